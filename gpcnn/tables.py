"""Image tables: validate, shuffle, pack into buffers, deal to segments, load atomically, read back.

A table holds one row per *buffer* (many images): ``__dist_key__`` (the segment), ``buffer_id``
(a fixed training order), ``x`` (uint8 images N×H×W×C as bytes), ``y`` (int32 labels, little-endian),
``n`` (images in the buffer). A load runs in ONE transaction — staging table, COPY, swap, catalog row —
under an advisory lock on the target name, so any failure (a bad row, a lost connection, the client
killed mid-COPY) rolls back to the previous table and catalog row, and no staging table can outlive it.
"""

from __future__ import annotations

import math
import struct
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import sqlalchemy as sa

from . import __version__
from .engines import Backend, Database, catalog, connect
from .engines.copy import COPY_HEADER, COPY_TRAILER, CopyStream
from .segment import LABEL_DTYPE, decode_images, decode_labels

IMAGES_PER_BUFFER_28x28 = 1_000
BUFFERS_PER_SEGMENT = 4  # aim for several buffers per segment when the data allows
STAGING_SUFFIX = "__gpcnn_staging"
MAX_NAME_BYTES = 63 - len(STAGING_SUFFIX) - len("__seg9999")


class TableError(ValueError):
    """Bad input for an image table, or a table that is not a gpcnn image table."""


# -- names --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TableName:
    schema: str | None
    name: str

    @classmethod
    def parse(cls, table: str | Sequence[str] | TableName) -> TableName:
        """``'s.t'``, ``'"My Schema"."a.b"'`` (quotes respected, unquoted folded to lower case), or
        a ``(schema, table)`` tuple taken literally."""
        if isinstance(table, TableName):
            return table
        if isinstance(table, tuple | list):
            if len(table) != 2 or not all(isinstance(p, str) and p for p in table):
                raise TableError(f"a table tuple must be (schema, table), got {table!r}")
            return cls(table[0], table[1])
        if not isinstance(table, str):
            raise TableError(
                f"expected a table name, got {type(table).__name__}: load arrays into a table "
                "first with gpcnn.load_images(engine, table, x, y)"
            )
        parts = _split_identifier(table)
        if len(parts) == 1:
            return cls(None, parts[0])
        if len(parts) == 2:
            return cls(parts[0], parts[1])
        raise TableError(f"{table!r}: expected [schema.]table")

    def sql(self, backend: Backend) -> str:
        name = backend.quote(self.name)
        return f"{backend.quote(self.schema)}.{name}" if self.schema else name

    def with_suffix(self, suffix: str) -> TableName:
        return TableName(self.schema, self.name + suffix)

    def __str__(self) -> str:
        return f"{self.schema}.{self.name}" if self.schema else self.name


def _split_identifier(text: str) -> list[str]:
    parts, i = [], 0
    while True:
        if i < len(text) and text[i] == '"':
            j, name = i + 1, []
            while True:
                k = text.find('"', j)
                if k < 0:
                    raise TableError(f"{text!r}: unterminated quoted identifier")
                name.append(text[j:k])
                if text[k + 1 : k + 2] == '"':  # "" is a literal quote
                    name.append('"')
                    j = k + 2
                    continue
                i = k + 1
                break
            part = "".join(name)
        else:
            k = text.find(".", i)
            k = len(text) if k < 0 else k
            part = text[i:k].strip()
            if not part or '"' in part:
                raise TableError(f"{text!r} is not a valid table name")
            part, i = part.lower(), k
        if not part:
            raise TableError(f"{text!r}: empty identifier")
        parts.append(part)
        if i == len(text):
            return parts
        if text[i] != ".":
            raise TableError(f"{text!r}: unexpected {text[i]!r} after an identifier")
        i += 1


# -- validation and packing ---------------------------------------------------------------------


def validate_images(x, y, num_classes: int | None = None) -> tuple[np.ndarray, np.ndarray, int]:
    """Return (uint8 N×H×W×C images, int32 labels, number of classes), or raise TableError."""
    x = np.asarray(x)
    y = np.asarray(y)
    if x.ndim == 3:
        x = x[..., np.newaxis]
    if x.ndim != 4:
        raise TableError(f"images must be (N, H, W) or (N, H, W, C), got shape {x.shape}")
    if x.dtype != np.uint8:
        if not np.issubdtype(x.dtype, np.floating):
            raise TableError(f"images must be uint8, or float in [0, 1]; got {x.dtype}")
        if x.size and (not np.isfinite(x).all() or x.min() < 0 or x.max() > 1):
            raise TableError("float images must lie in [0, 1] (store uint8 0..255 otherwise)")
        warnings.warn("float images in [0, 1] are stored as uint8 (rounded x*255)", stacklevel=3)
        x = np.rint(x * 255).astype(np.uint8)
    if y.ndim != 1 or (y.size and not np.issubdtype(y.dtype, np.integer)):
        raise TableError(f"labels must be a 1-D array of integers, got {y.dtype} {y.shape}")
    if len(x) != len(y):
        raise TableError(f"{len(x)} images but {len(y)} labels")
    if len(x) == 0:
        raise TableError("no images to load")
    if y.min() < 0:
        raise TableError(f"labels must be >= 0, found {y.min()}")
    classes = int(num_classes) if num_classes is not None else int(y.max()) + 1
    if y.max() >= classes:
        raise TableError(f"label {y.max()} is out of range for {classes} classes")
    return np.ascontiguousarray(x), y.astype(LABEL_DTYPE), classes


def default_buffer_size(n_images: int, segments: int, image_shape: Sequence[int]) -> int:
    """About 1,000 28×28 images (scaled by image size), several buffers per segment if possible."""
    base = max(1, round(IMAGES_PER_BUFFER_28x28 * 28 * 28 / math.prod(image_shape)))
    return max(1, min(base, math.ceil(n_images / (segments * BUFFERS_PER_SEGMENT))))


@dataclass(frozen=True)
class Buffer:
    key: int
    buffer_id: int
    start: int
    stop: int


def plan_buffers(n_images: int, keys: Sequence[int], buffer_size: int) -> list[Buffer]:
    """Contiguous shards, per-segment counts differing by at most one image; each shard cut into
    nearly equal buffers of at most ``buffer_size``. ``buffer_id`` follows the shuffled order."""
    if n_images < len(keys):
        raise TableError(f"{n_images} images cannot fill {len(keys)} segments (one image each)")
    buffers, start = [], 0
    for key, shard in zip(keys, np.array_split(np.arange(n_images), len(keys)), strict=True):
        for piece in np.array_split(shard, math.ceil(len(shard) / buffer_size)):
            buffers.append(Buffer(key, len(buffers), start, start + len(piece)))
            start += len(piece)
    return buffers


# -- COPY ---------------------------------------------------------------------------------------


def _copy_row(buf: Buffer, x: np.ndarray, y: np.ndarray, order: np.ndarray, scratch=None):
    """The binary COPY row of one buffer, as chunks (header, images, labels) to send in turn:
    the images are gathered through ``order`` straight into ``scratch`` and copied once to bytes,
    so loading never materialises a shuffled copy of the whole data set."""
    idx = order[buf.start : buf.stop]
    n = len(idx)
    if scratch is None or len(scratch) < n:
        scratch = np.empty((n, *x.shape[1:]), dtype=x.dtype)
    images = np.take(x, idx, axis=0, out=scratch[:n], mode="clip").tobytes()
    labels = y[idx].astype(LABEL_DTYPE, copy=False).tobytes()
    header = struct.pack("!hiiiiiii", 5, 4, buf.key, 4, buf.buffer_id, 4, n, len(images))
    return header, images, struct.pack("!i", len(labels)) + labels


def _copy_chunks(buffers: Sequence[Buffer], x, y, order) -> Iterator[bytes]:
    """The whole binary COPY stream, produced lazily one buffer at a time."""
    yield COPY_HEADER
    scratch = np.empty((max(b.stop - b.start for b in buffers), *x.shape[1:]), dtype=x.dtype)
    for buf in buffers:
        yield from _copy_row(buf, x, y, order, scratch)
    yield COPY_TRAILER


# -- catalog ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ImageTable:
    """A gpcnn image table, as its catalog row describes it."""

    table: TableName
    image_shape: tuple[int, ...]
    num_classes: int
    class_names: tuple[str, ...]
    keys: tuple[int, ...]
    images_per_segment: tuple[int, ...]
    buffer_size: int
    source: str | None

    @property
    def segments(self) -> int:
        return len(self.keys)

    @property
    def images(self) -> int:
        return sum(self.images_per_segment)


def _resolved(conn: sa.Connection, table: TableName) -> TableName:
    return TableName(table.schema or catalog.current_schema(conn), table.name)


def _from_row(name: TableName, row) -> ImageTable:
    return ImageTable(
        table=name,
        image_shape=tuple(row.image_shape),
        num_classes=row.num_classes,
        class_names=tuple(row.class_names or ()),
        keys=tuple(row.dist_keys),
        images_per_segment=tuple(int(c) for c in row.images_per_segment),
        buffer_size=row.buffer_size,
        source=row.source,
    )


def describe(db: Database | str | None, table) -> ImageTable:
    """The catalog entry of an image table; TableError if it is not one."""
    db = connect(db)
    backend = db.backend
    name = TableName.parse(table)
    with db.connect() as conn:
        name = _resolved(conn, name)
        row = catalog.catalog_row(conn, backend, name.schema, name.name)
        if row is not None and not catalog.relation_exists(conn, name.sql(backend)):
            raise TableError(
                f"{name} is in gpcnn's catalog but the table is gone (dropped by hand?): "
                f"`gpcnn tables drop {name}` or gpcnn.drop_table(db, {str(name)!r}) removes the entry"
            )
    if row is None:
        raise TableError(
            f"{name} is not a gpcnn image table (no entry in {db.schema}.image_tables): "
            "load it with gpcnn.load_images or `gpcnn load`"
        )
    return _from_row(name, row)


def list_tables(db: Database | str | None = None) -> list[ImageTable]:
    """Every image table of the catalog; entries whose table was dropped by hand are removed."""
    db = connect(db)
    backend = db.backend
    found = []
    with db.begin() as conn:
        for row in catalog.catalog_rows(conn, backend):
            name = TableName(row.table_schema, row.table_name)
            if catalog.relation_exists(conn, name.sql(backend)):
                found.append(_from_row(name, row))
            else:
                catalog.delete_catalog_row(conn, backend, name.schema, name.name)
    return found


def drop_table(db: Database | str | None, table, *, missing_ok: bool = False) -> bool:
    """Drop an image table with its parts and its catalog entry, in one transaction. A table
    dropped by hand has its entry removed. False when there was nothing to drop."""
    db = connect(db)
    backend = db.backend
    name = TableName.parse(table)
    with db.begin() as conn:
        name = _resolved(conn, name)
        row = catalog.catalog_row(conn, backend, name.schema, name.name)
        exists = catalog.relation_exists(conn, name.sql(backend))
        if row is None:
            if exists:
                raise TableError(f"{name} is not a gpcnn image table: gpcnn drops only its own")
            if missing_ok:
                return False
            raise TableError(f"no image table {name}")
        if exists:
            conn.exec_driver_sql(backend.drop_ddl(name))
        catalog.delete_catalog_row(conn, backend, name.schema, name.name)
    return True


def buffer_counts(db: Database, info: ImageTable) -> dict[int, list[tuple[int, int]]]:
    """Each key's (buffer_id, images) in training order."""
    buffers: dict[int, list[tuple[int, int]]] = {k: [] for k in info.keys}
    with db.connect() as conn:
        for key, buffer_id, n in conn.exec_driver_sql(db.backend.buffers_sql(info.table)):
            buffers[key].append((buffer_id, n))
    return buffers


# -- load and read ------------------------------------------------------------------------------


def load_images(
    db: Database | str | None,
    table,
    x,
    y,
    *,
    segments: int | None = None,
    buffer_size: int | None = None,
    num_classes: int | None = None,
    class_names: Sequence[str] | None = None,
    seed: int = 0,
    replace: bool = False,
    progress: bool = True,
    source: str | None = None,
) -> ImageTable:
    """Load labelled images into a table spread over ``segments`` segments, atomically."""
    if class_names is not None:
        class_names = [str(c) for c in class_names]
        if num_classes is None:
            num_classes = len(class_names)
        elif num_classes != len(class_names):
            raise TableError(f"{len(class_names)} class names for {num_classes} classes")
    x, y, classes = validate_images(x, y, num_classes)
    db = connect(db)
    backend = db.backend
    k = backend.default_segments() if segments is None else int(segments)
    if k < 1:
        raise TableError(f"segments must be >= 1, got {segments}")
    if len(x) < k:
        raise TableError(f"{len(x)} images cannot give each of {k} segments at least one")
    image_shape = x.shape[1:]
    size = default_buffer_size(len(x), k, image_shape) if buffer_size is None else int(buffer_size)
    if size < 1:
        raise TableError(f"buffer_size must be >= 1, got {buffer_size}")
    size = min(size, math.ceil(len(x) / k))  # every segment gets at least one buffer
    name = TableName.parse(table)
    if len(name.name.encode()) > MAX_NAME_BYTES:
        raise TableError(
            f"table name {name.name!r} is longer than {MAX_NAME_BYTES} bytes: gpcnn appends "
            "suffixes for staging and partitions within PostgreSQL's 63-byte identifier limit"
        )

    order = np.random.default_rng(seed).permutation(len(x))  # applied buffer by buffer
    with db.begin() as conn:
        name = _resolved(conn, name)
        backend.lock_name(conn, str(name))
        catalog.ensure_tables(conn, backend)
        conn.exec_driver_sql(backend.create_schema_ddl(name.schema))
        exists = catalog.relation_exists(conn, name.sql(backend))
        if exists and not replace:
            raise TableError(f"table {name} exists: pass replace=True (or --replace) to reload it")
        keys = backend.choose_keys(conn, k)
        buffers = plan_buffers(len(x), keys, size)
        staging = name.with_suffix(STAGING_SUFFIX)
        # A load's staging table dies with its transaction; one left by anything else (a tool
        # that committed it, an older gpcnn) is removed here, under the lock, by the next load.
        conn.exec_driver_sql(backend.drop_ddl(staging, if_exists=True))
        for statement in backend.image_table_ddl(staging, keys):
            conn.exec_driver_sql(statement)
        _copy_buffers(conn, backend, staging, buffers, x, y, order, progress, str(name))
        if exists:
            conn.exec_driver_sql(backend.drop_ddl(name))
        for statement in backend.rename_ddl(staging, name, keys):
            conn.exec_driver_sql(statement)
        counts = [sum(b.stop - b.start for b in buffers if b.key == key) for key in keys]
        catalog.write_catalog_row(
            conn,
            backend,
            {
                "table_schema": name.schema,
                "table_name": name.name,
                "image_shape": list(image_shape),
                "num_classes": classes,
                "class_names": class_names,
                "dist_keys": list(keys),
                "images_per_segment": counts,
                "buffer_size": size,
                "images": len(x),
                "source": source,
                "gpcnn_version": __version__,
            },
        )
    return describe(db, name)


def _copy_buffers(conn, backend, table, buffers, x, y, order, progress, label) -> None:
    bar = None
    if progress:
        from tqdm.auto import tqdm

        total = x.nbytes + len(y) * LABEL_DTYPE.itemsize + 34 * len(buffers) + 21
        bar = tqdm(total=total, unit="B", unit_scale=True, desc=f"loading {label}", leave=False)
    stream = CopyStream(_copy_chunks(buffers, x, y, order), bar)
    try:
        with conn.connection.driver_connection.cursor() as cursor:
            cursor.copy_expert(backend.copy_sql(table), stream, size=1 << 20)
    except Exception as e:
        if conn.connection.driver_connection.closed:
            # the server is gone: tell SQLAlchemy, so that its rollback does not replace this
            # error with "connection already closed" (the server has rolled back anyway)
            conn.invalidate(e)
        if stream.error is not None:  # the COPY was cancelled because producing a row failed
            raise stream.error from e
        raise
    finally:
        if bar is not None:
            bar.close()


def read_images(db: Database | str | None, table) -> tuple[np.ndarray, np.ndarray]:
    """All images (uint8 N×H×W×C) and labels of an image table, in ``buffer_id`` order."""
    db = connect(db)
    info = describe(db, table)
    xs, ys = [], []
    with db.connect() as conn:
        for row in conn.exec_driver_sql(db.backend.read_sql(info.table)):
            xs.append(decode_images(row.x, row.n, info.image_shape))
            ys.append(decode_labels(row.y))
    return np.concatenate(xs), np.concatenate(ys)
