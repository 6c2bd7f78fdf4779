"""Image tables: validate, shuffle, pack into buffers, deal to segments, load atomically, read back.

A table holds one row per *buffer* (many images): ``__dist_key__`` (the segment), ``buffer_id``
(a fixed training order), ``x`` (uint8 images N×H×W×C as bytes), ``y`` (int32 labels, little-endian),
``n`` (images in the buffer). A load runs in ONE transaction — staging table, COPY, swap, catalog row —
under an advisory lock on the target name, so any failure (a bad row, a lost connection, the client
killed mid-COPY) rolls back to the previous table and catalog row, and no staging table can outlive it.
"""

from __future__ import annotations

import io
import math
import struct
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import sqlalchemy as sa

from . import __version__
from .engines import Backend, backend_for
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

_COPY_HEADER = b"PGCOPY\n\xff\r\n\0" + struct.pack("!ii", 0, 0)
_COPY_TRAILER = struct.pack("!h", -1)


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
    yield _COPY_HEADER
    scratch = np.empty((max(b.stop - b.start for b in buffers), *x.shape[1:]), dtype=x.dtype)
    for buf in buffers:
        yield from _copy_row(buf, x, y, order, scratch)
    yield _COPY_TRAILER


class _CopyStream(io.RawIOBase):
    """A file for ``copy_expert`` that hands out the chunks of a binary COPY stream, at most
    ``size`` bytes per read (a chunk that fits is passed on as is, without a copy)."""

    def __init__(self, chunks: Iterator[bytes], progress) -> None:
        self._chunks = iter(chunks)
        self._pending = memoryview(b"")
        self._whole: bytes | None = None
        self._progress = progress
        self.error: BaseException | None = None  # what broke the stream (the driver hides it)

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        while not self._pending:
            try:
                chunk = next(self._chunks, None)
            except BaseException as e:
                self.error = e
                raise
            if chunk is None:
                return b""
            self._whole, self._pending = chunk, memoryview(chunk)
        if size < 0 or size >= len(self._pending):
            out = self._whole if len(self._pending) == len(self._whole) else bytes(self._pending)
            self._pending, self._whole = memoryview(b""), None
        else:
            out, self._pending = bytes(self._pending[:size]), self._pending[size:]
        if self._progress is not None:
            self._progress.update(len(out))
        return out


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


def ensure_catalog(conn: sa.Connection, backend: Backend) -> None:
    s = backend.qschema
    conn.exec_driver_sql(f"CREATE SCHEMA IF NOT EXISTS {s}")
    conn.exec_driver_sql(
        f"""CREATE TABLE IF NOT EXISTS {s}.image_tables (
            table_schema text NOT NULL,
            table_name text NOT NULL,
            image_shape integer[] NOT NULL,
            dtype text NOT NULL DEFAULT 'uint8',
            num_classes integer NOT NULL,
            class_names text[],
            dist_keys integer[] NOT NULL,
            images_per_segment bigint[] NOT NULL,
            buffer_size integer NOT NULL,
            images bigint NOT NULL,
            source text,
            created_at timestamptz NOT NULL DEFAULT now(),
            gpcnn_version text NOT NULL,
            PRIMARY KEY (table_schema, table_name)
        ){backend.distribution("table_schema", "table_name")}"""
    )


def _resolved(conn: sa.Connection, table: TableName) -> TableName:
    schema = table.schema or conn.execute(sa.text("SELECT current_schema()")).scalar()
    return TableName(schema, table.name)


def describe(engine: sa.Engine, table, schema: str = "gpcnn") -> ImageTable:
    """The catalog entry of an image table; TableError if it is not one."""
    backend = backend_for(engine, schema)
    name = TableName.parse(table)
    with engine.connect() as conn:
        name = _resolved(conn, name)
        catalog = conn.execute(
            sa.text("SELECT to_regclass(:t)"), {"t": f"{backend.qschema}.image_tables"}
        ).scalar()
        row = None
        if catalog:
            row = conn.execute(
                sa.text(
                    f"SELECT image_shape, num_classes, class_names, dist_keys, images_per_segment, "
                    f"buffer_size, source FROM {backend.qschema}.image_tables "
                    "WHERE table_schema = :s AND table_name = :t"
                ),
                {"s": name.schema, "t": name.name},
            ).first()
    if row is None:
        raise TableError(
            f"{name} is not a gpcnn image table (no entry in {schema}.image_tables): "
            "load it with gpcnn.load_images or `gpcnn load`"
        )
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


# -- load and read ------------------------------------------------------------------------------


def load_images(
    engine: sa.Engine,
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
    schema: str = "gpcnn",
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
    backend = backend_for(engine, schema)
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
    with engine.begin() as conn:
        name = _resolved(conn, name)
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(hashtext(:t))"), {"t": str(name)})
        ensure_catalog(conn, backend)
        conn.exec_driver_sql(f"CREATE SCHEMA IF NOT EXISTS {backend.quote(name.schema)}")
        exists = conn.execute(sa.text("SELECT to_regclass(:t)"), {"t": name.sql(backend)}).scalar()
        if exists and not replace:
            raise TableError(f"table {name} exists: pass replace=True (or --replace) to reload it")
        keys = backend.choose_keys(conn, k)
        buffers = plan_buffers(len(x), keys, size)
        staging = name.with_suffix(STAGING_SUFFIX)
        # A load's staging table dies with its transaction; one left by anything else (a tool
        # that committed it, an older gpcnn) is removed here, under the lock, by the next load.
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {staging.sql(backend)}")
        for statement in backend.image_table_ddl(staging, keys):
            conn.exec_driver_sql(statement)
        _copy_buffers(conn, backend, staging, buffers, x, y, order, progress, str(name))
        if exists:
            conn.exec_driver_sql(f"DROP TABLE {name.sql(backend)}")
        for statement in backend.rename_ddl(staging, name, keys):
            conn.exec_driver_sql(statement)
        counts = [sum(b.stop - b.start for b in buffers if b.key == key) for key in keys]
        conn.execute(
            sa.text(
                f"DELETE FROM {backend.qschema}.image_tables "
                "WHERE table_schema = :s AND table_name = :t"
            ),
            {"s": name.schema, "t": name.name},
        )
        conn.execute(
            sa.text(
                f"INSERT INTO {backend.qschema}.image_tables (table_schema, table_name, "
                "image_shape, num_classes, class_names, dist_keys, images_per_segment, "
                "buffer_size, images, source, gpcnn_version) VALUES (:s, :t, :shape, :classes, "
                ":names, :keys, :counts, :size, :images, :source, :version)"
            ),
            {
                "s": name.schema,
                "t": name.name,
                "shape": list(image_shape),
                "classes": classes,
                "names": class_names,
                "keys": list(keys),
                "counts": counts,
                "size": size,
                "images": len(x),
                "source": source,
                "version": __version__,
            },
        )
    return describe(engine, name, schema)


def _copy_buffers(conn, backend, table, buffers, x, y, order, progress, label) -> None:
    bar = None
    if progress:
        from tqdm.auto import tqdm

        total = x.nbytes + len(y) * LABEL_DTYPE.itemsize + 34 * len(buffers) + 21
        bar = tqdm(total=total, unit="B", unit_scale=True, desc=f"loading {label}", leave=False)
    stream = _CopyStream(_copy_chunks(buffers, x, y, order), bar)
    columns = "__dist_key__, buffer_id, n, x, y"
    try:
        with conn.connection.driver_connection.cursor() as cursor:
            cursor.copy_expert(
                f"COPY {table.sql(backend)} ({columns}) FROM STDIN WITH (FORMAT binary)",
                stream,
                size=1 << 20,
            )
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


def read_images(engine: sa.Engine, table, schema: str = "gpcnn") -> tuple[np.ndarray, np.ndarray]:
    """All images (uint8 N×H×W×C) and labels of an image table, in ``buffer_id`` order."""
    info = describe(engine, table, schema)
    backend = backend_for(engine, schema)
    xs, ys = [], []
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(f"SELECT x, y, n FROM {info.table.sql(backend)} ORDER BY buffer_id")
        )
        for row in rows:
            xs.append(decode_images(row.x, row.n, info.image_shape))
            ys.append(decode_labels(row.y))
    return np.concatenate(xs), np.concatenate(ys)
