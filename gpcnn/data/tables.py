"""Image tables: validate, shuffle, pack into buffers, deal to segments, load atomically, read back.

A table holds one row per *buffer* (many images): ``__dist_key__`` (the segment), ``buffer_id``
(a fixed training order), ``x`` (uint8 images N×H×W×C as bytes), ``y`` (int32 labels, little-endian),
``n`` (images in the buffer). A load runs in ONE transaction — staging table, COPY, swap, catalog row —
under an advisory lock on the target name, so any failure (a bad row, a lost connection, the client
killed mid-COPY) rolls back to the previous table and catalog row, and no staging table can outlive it.
"""

from __future__ import annotations

import itertools
import math
import struct
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from gpcnn.engines import Backend, Connection, Database, connect
from gpcnn.engines.catalog import Catalog, current_schema, relation_exists
from gpcnn.engines.transport import COPY_HEADER, COPY_TRAILER, CopyStream, copy
from gpcnn.kernel.segment import LABEL_DTYPE, decode_images, decode_labels
from gpcnn.version import __version__

IMAGES_PER_BUFFER_28x28 = 1_000
BUFFERS_PER_SEGMENT = 4  # aim for several buffers per segment when the data allows
STAGING_SUFFIX = "__gpcnn_staging"
ID_DTYPE = np.dtype("<i8")  # one id per image, as the user gave it (default: its input position)
IMAGE_LAYOUT = 2  # 1: gpcnn 0.1, without ids
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


def plan_buffers(
    n_images: int, keys: Sequence[int], buffer_size: int, counts: Sequence[int] | None = None
) -> list[Buffer]:
    """Contiguous shards of ``counts`` images each (default: counts differing by at most one
    image); each shard cut into nearly equal buffers of at most ``buffer_size``. ``buffer_id``
    follows the dealt order."""
    if n_images < len(keys):
        raise TableError(f"{n_images} images cannot fill {len(keys)} segments (one image each)")
    if counts is None:
        counts = [len(s) for s in np.array_split(np.arange(n_images), len(keys))]
    buffers, start = [], 0
    for key, count in zip(keys, counts, strict=True):
        for piece in np.array_split(np.arange(count), math.ceil(count / buffer_size)):
            buffers.append(Buffer(key, len(buffers), start, start + len(piece)))
            start += len(piece)
    return buffers


DISTRIBUTIONS = ("iid", "label-skew")


def deal(y: np.ndarray, segments: int, seed: int, distribution: str = "iid", skew=None):
    """The order in which images are dealt (shard after shard) and each shard's size.

    ``iid``: one random permutation, shards of equal size. ``label-skew``: each class's images
    split among the segments in proportions drawn from Dirichlet(``skew``) (Hsu et al. 2019), so
    every segment has its own class mix and size; each shard is shuffled."""
    rng = np.random.default_rng(seed)
    if distribution == "iid":
        if skew is not None:
            raise TableError("skew applies to distribution='label-skew' only")
        order = rng.permutation(len(y))
        return order, [len(s) for s in np.array_split(order, segments)]
    if distribution != "label-skew":
        raise TableError(f"distribution={distribution!r}: choose one of {', '.join(DISTRIBUTIONS)}")
    if isinstance(skew, bool) or not isinstance(skew, int | float) or not 0 < skew < math.inf:
        raise TableError(
            f"label-skew needs skew = alpha > 0 (Dirichlet concentration), got {skew!r}"
        )
    parts: list[list[np.ndarray]] = [[] for _ in range(segments)]
    for c in np.unique(y):
        members = rng.permutation(np.flatnonzero(y == c))
        cuts = np.round(
            np.cumsum(rng.dirichlet(np.full(segments, float(skew))))[:-1] * len(members)
        )
        for k, piece in enumerate(np.split(members, cuts.astype(int))):
            parts[k].append(piece)
    shards = [rng.permutation(np.concatenate(p)) for p in parts]
    empty = [k for k, shard in enumerate(shards) if len(shard) == 0]
    if empty:
        raise TableError(
            f"label-skew with alpha={skew} left segment {empty[0]} without images (seed {seed}): "
            "use a larger alpha, fewer segments or another seed"
        )
    return np.concatenate(shards), [len(s) for s in shards]


def class_counts(y: np.ndarray, order: np.ndarray, counts: Sequence[int], classes: int):
    """Each segment's images per class, in dealing order."""
    bounds = np.cumsum([0, *counts])
    return [
        np.bincount(y[order[a:b]], minlength=classes).tolist()
        for a, b in itertools.pairwise(bounds)
    ]


# -- COPY ---------------------------------------------------------------------------------------


def _array_rows(buffers: Sequence[Buffer], x, y, ids, order) -> Iterator[tuple]:
    """(buffer, images, labels, ids) of each buffer of in-memory arrays: the images are gathered
    through ``order`` straight into one scratch array and copied once to bytes, so loading never
    materialises a shuffled copy of the whole data set."""
    scratch = np.empty((max(b.stop - b.start for b in buffers), *x.shape[1:]), dtype=x.dtype)
    for buf in buffers:
        idx = order[buf.start : buf.stop]
        n = len(idx)
        images = np.take(x, idx, axis=0, out=scratch[:n], mode="clip").tobytes()
        yield buf, images, y[idx].astype(LABEL_DTYPE).tobytes(), ids[idx].astype(ID_DTYPE).tobytes()


def _folder_rows(buffers: Sequence[Buffer], batches, ids) -> Iterator[tuple]:
    """(buffer, images, labels, ids) of each buffer, filled in order from an iterator of (x, y)
    batches of decoded images: at most one batch and one buffer are in memory at a time."""
    pending_x: list[np.ndarray] = []
    pending_y: list[np.ndarray] = []
    have = 0
    batches = iter(batches)
    for buf in buffers:
        need = buf.stop - buf.start
        while have < need:
            cx, cy = next(batches)
            pending_x.append(np.asarray(cx, np.uint8))
            pending_y.append(np.asarray(cy))
            have += len(cy)
        x, y = np.concatenate(pending_x), np.concatenate(pending_y)
        pending_x, pending_y, have = [x[need:]], [y[need:]], have - need
        images = np.ascontiguousarray(x[:need]).tobytes()
        labels = y[:need].astype(LABEL_DTYPE).tobytes()
        yield buf, images, labels, ids[buf.start : buf.stop].astype(ID_DTYPE).tobytes()


def _copy_row(buf: Buffer, images: bytes, labels: bytes, ids: bytes) -> tuple[bytes, ...]:
    """The binary COPY row of one buffer, as pieces to send in turn (no copy of the images)."""
    n = len(ids) // ID_DTYPE.itemsize
    header = struct.pack("!hiiiiiii", 6, 4, buf.key, 4, buf.buffer_id, 4, n, len(images))
    return (
        header,
        images,
        struct.pack("!i", len(labels)) + labels,
        struct.pack("!i", len(ids)) + ids,
    )


def _copy_stream(rows: Iterator[tuple]) -> Iterator[bytes]:
    """The whole binary COPY stream, produced lazily one buffer at a time."""
    yield COPY_HEADER
    for row in rows:
        yield from _copy_row(*row)
    yield COPY_TRAILER


COPY_ROW_OVERHEAD = 2 + 3 * 8 + 3 * 4  # field count, 3 integers with their lengths, 3 lengths
COPY_STREAM_OVERHEAD = len(COPY_HEADER) + len(COPY_TRAILER)


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
    layout: int = IMAGE_LAYOUT
    distribution: str = "iid"
    skew: float | None = None  # label-skew's Dirichlet alpha
    class_counts: tuple[tuple[int, ...], ...] | None = None  # per segment, per class

    def require_ids(self, what: str) -> None:
        """Refuse, with what to do, a table loaded before images had ids."""
        if self.layout < 2:
            raise TableError(
                f"{self.table} was loaded by gpcnn 0.1, without image ids, so gpcnn cannot "
                f"{what}: reload it (load_images(..., replace=True) or `gpcnn load --replace`); "
                "training and evaluation work on it as it is"
            )

    @property
    def segments(self) -> int:
        return len(self.keys)

    @property
    def images(self) -> int:
        return sum(self.images_per_segment)


def resolved_name(conn: Connection, table: TableName) -> TableName:
    return TableName(table.schema or current_schema(conn), table.name)


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
        layout=row.layout,
        distribution=row.distribution,
        skew=row.skew,
        class_counts=_per_segment(row.class_counts, len(row.dist_keys)),
    )


def _per_segment(flat, segments: int):
    if flat is None:
        return None
    width = len(flat) // segments
    return tuple(tuple(int(v) for v in flat[k * width : (k + 1) * width]) for k in range(segments))


def describe(db: Database | str | None, table) -> ImageTable:
    """The catalog entry of an image table; TableError if it is not one."""
    db = connect(db)
    backend = db.backend
    name = TableName.parse(table)
    with db.connect() as conn:
        name = resolved_name(conn, name)
        row = Catalog(conn, backend).image_table(name.schema, name.name)
        if row is not None and not relation_exists(conn, name.sql(backend)):
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
        for row in Catalog(conn, backend).image_tables():
            name = TableName(row.table_schema, row.table_name)
            if relation_exists(conn, name.sql(backend)):
                found.append(_from_row(name, row))
            else:
                Catalog(conn, backend).delete_image_table(name.schema, name.name)
    return found


def drop_table(db: Database | str | None, table, *, missing_ok: bool = False) -> bool:
    """Drop an image table with its parts and its catalog entry, in one transaction. A table
    dropped by hand has its entry removed. False when there was nothing to drop."""
    db = connect(db)
    backend = db.backend
    name = TableName.parse(table)
    with db.begin() as conn:
        name = resolved_name(conn, name)
        row = Catalog(conn, backend).image_table(name.schema, name.name)
        exists = relation_exists(conn, name.sql(backend))
        if row is None:
            if exists:
                raise TableError(f"{name} is not a gpcnn image table: gpcnn drops only its own")
            if missing_ok:
                return False
            raise TableError(f"no image table {name}")
        if exists:
            conn.exec_driver_sql(backend.drop_ddl(name))
        Catalog(conn, backend).delete_image_table(name.schema, name.name)
    return True


def buffer_counts(db: Database, info: ImageTable) -> dict[int, list[tuple[int, int]]]:
    """Each key's (buffer_id, images) in training order."""
    buffers: dict[int, list[tuple[int, int]]] = {k: [] for k in info.keys}
    with db.connect() as conn:
        for key, buffer_id, n in conn.exec_driver_sql(db.backend.buffers_sql(info.table)):
            buffers[key].append((buffer_id, n))
    return buffers


# -- load and read ------------------------------------------------------------------------------


def validate_ids(ids, count: int) -> np.ndarray:
    """One distinct integer id per image; by default the input position."""
    if ids is None:
        return np.arange(count, dtype=ID_DTYPE)
    ids = np.asarray(ids)
    if ids.shape != (count,) or (ids.size and not np.issubdtype(ids.dtype, np.integer)):
        raise TableError(
            f"ids must be {count} integers, one per image; got {ids.dtype} {ids.shape}"
        )
    unique, counts = np.unique(ids, return_counts=True)
    if len(unique) != count:
        raise TableError(f"ids must be distinct: {unique[counts > 1][:5].tolist()} repeat")
    return ids.astype(ID_DTYPE)


def _is_folder(x) -> bool:
    """An image folder (``datasets.ImageFolder``) or anything shaped like one."""
    return all(hasattr(x, a) for a in ("batches", "class_names", "image_shape", "__len__"))


def load_images(
    db: Database | str | None,
    table,
    x,
    y=None,
    *,
    ids=None,
    segments: int | None = None,
    buffer_size: int | None = None,
    num_classes: int | None = None,
    class_names: Sequence[str] | None = None,
    seed: int = 0,
    distribution: str = "iid",
    skew: float | None = None,
    replace: bool = False,
    progress: bool = True,
    source: str | None = None,
) -> ImageTable:
    """Load labelled images into a table spread over ``segments`` segments, atomically.

    ``x, y`` are arrays, dealt to the segments in a random order from ``seed``: equal IID shards,
    or with ``distribution="label-skew"`` each class split among the segments in proportions
    drawn from Dirichlet(``skew``) (``deal``). Or ``x`` is an image folder
    (``gpcnn.data.datasets.load_image_folder``: already shuffled; decoded batch by batch while the COPY
    runs, so memory stays bounded). ``ids`` name the images (default: the input position; for a
    folder, the file's position in its sorted listing). The catalog records the distribution and
    every segment's class mix.

    Parameters
    ----------
    db : Database, str or None
        A handle from ``gpcnn.connect``, a URL, or None for the default database.
    table : str or (schema, table)
        The image table to create.
    x : ndarray or ImageFolder
        Images (N, H, W) or (N, H, W, C), uint8 0..255 or float in [0, 1] (stored as uint8); or a
        folder from ``load_image_folder``.
    y : ndarray, optional
        One class index (0..classes-1) per image; None for a folder, which carries its labels.
    ids : array of int, optional
        Distinct image ids, kept through training and predictions.
    segments : int, optional
        How many segments to spread the images over (default: the engine's).
    buffer_size : int, optional
        Images per row (default: several buffers per segment, about 1,000 28×28 images each).
    num_classes : int, optional
        The number of classes (default: the largest label + 1, or ``len(class_names)``).
    class_names : sequence of str, optional
        A name per class, stored in the catalog and written with predictions.
    seed : int, default 0
        The shuffle before the images are dealt.
    distribution : {"iid", "label-skew"}
        Equal random shards, or each class split by Dirichlet(``skew``).
    skew : float, optional
        The Dirichlet concentration for ``distribution="label-skew"``.
    replace : bool, default False
        Replace an existing table (atomically) instead of refusing.
    progress : bool, default True
        Show a progress bar while the rows are copied.
    source : str, optional
        Where the images came from, recorded in the catalog.

    Returns
    -------
    ImageTable
        The table as the catalog describes it: segments, image shape, classes, counts.

    Raises
    ------
    TableError
        Bad images, labels or ids, more segments than images, or ``table`` exists without
        ``replace`` (a ``ValueError``; each message says what to change).

    Examples
    --------
    >>> from gpcnn.data.datasets import load_fashion_mnist
    >>> data = load_fashion_mnist()
    >>> gpcnn.load_images(db, "fm.train", data.x_train, data.y_train, segments=4,
    ...                   class_names=data.class_names)
    """
    if class_names is not None:
        class_names = [str(c) for c in class_names]
    if _is_folder(x):
        if y is not None:
            raise TableError("an image folder carries its labels: pass y=None")
        class_names = class_names or list(x.class_names)
        count, image_shape = len(x), tuple(x.image_shape)
        if count == 0:
            raise TableError("no images to load")
        classes = len(class_names)
        ranks = {path: i for i, path in enumerate(sorted(p for p, _ in x.files))}
        ids = validate_ids([ranks[p] for p, _ in x.files] if ids is None else ids, count)
        if distribution != "iid":
            raise TableError("an image folder loads IID (its files are shuffled): no label-skew")
        labels = np.array([label for _, label in x.files], dtype=np.int64)
    else:
        if class_names is not None and num_classes is not None and num_classes != len(class_names):
            raise TableError(f"{len(class_names)} class names for {num_classes} classes")
        x, y, classes = validate_images(
            x, y, num_classes if class_names is None else len(class_names)
        )
        count, image_shape = len(x), x.shape[1:]
        ids = validate_ids(ids, count)
        labels = y
    db = connect(db)
    backend = db.backend
    k = backend.default_segments() if segments is None else int(segments)
    if k < 1:
        raise TableError(f"segments must be >= 1, got {segments}")
    if count < k:
        raise TableError(f"{count} images cannot give each of {k} segments at least one")
    size = default_buffer_size(count, k, image_shape) if buffer_size is None else int(buffer_size)
    if size < 1:
        raise TableError(f"buffer_size must be >= 1, got {buffer_size}")
    size = min(size, math.ceil(count / k))  # every segment gets at least one buffer
    name = checked_name(table)
    if _is_folder(x):
        order = np.arange(count)
        counts = [len(s) for s in np.array_split(order, k)]
    else:
        order, counts = deal(labels, k, seed, distribution, skew)  # applied buffer by buffer
    mixes = class_counts(labels, order, counts, classes)

    def rows(buffers):
        if _is_folder(x):
            return _folder_rows(buffers, x.batches(progress=progress), ids)
        return _array_rows(buffers, x, y, ids, order)

    payload = count * (math.prod(image_shape) + LABEL_DTYPE.itemsize + ID_DTYPE.itemsize)
    meta = {
        "image_shape": list(image_shape),
        "num_classes": classes,
        "class_names": class_names,
        "buffer_size": size,
        "images": count,
        "source": source,
        "distribution": distribution,
        "skew": None if skew is None else float(skew),
        "class_counts": [c for mix in mixes for c in mix],
    }
    return _load(db, name, counts, replace, meta, rows, payload if progress else None)


def checked_name(table) -> TableName:
    name = TableName.parse(table)
    if len(name.name.encode()) > MAX_NAME_BYTES:
        raise TableError(
            f"table name {name.name!r} is longer than {MAX_NAME_BYTES} bytes: gpcnn appends "
            "suffixes for staging and partitions within PostgreSQL's 63-byte identifier limit"
        )
    return name


def _load(
    db: Database,
    name: TableName,
    counts: list[int],
    replace: bool,
    meta: dict,
    rows,
    payload: int | None,
) -> ImageTable:
    """One transaction, under an advisory lock on the name: a staging table, its buffers
    (``rows(buffers)``, sent by COPY; shard k holds ``counts[k]`` images), the swap, the catalog
    row."""
    backend = db.backend
    with db.begin() as conn:
        name = resolved_name(conn, name)
        staging, keys, exists = begin_swap(conn, backend, name, len(counts), replace)
        buffers = plan_buffers(sum(counts), keys, meta["buffer_size"], counts)
        total = None if payload is None else payload + COPY_ROW_OVERHEAD * len(buffers)
        _copy_buffers(conn, backend, staging, _copy_stream(rows(buffers)), total, str(name))
        finish_swap(
            conn, backend, name, staging, keys, exists, {**meta, "images_per_segment": counts}
        )
    return describe(db, name)


def begin_swap(conn, backend, name: TableName, k: int, replace: bool):
    """The lock, the checks, and an empty staging table for a new version of ``name``; returns
    (staging, keys, whether ``name`` exists)."""
    backend.lock_name(conn, str(name))
    Catalog(conn, backend).ensure_tables()
    backend.ensure_schema(conn, name.schema)
    exists = relation_exists(conn, name.sql(backend))
    if exists and not replace:
        raise TableError(f"table {name} exists: pass replace=True (or --replace) to reload it")
    keys = backend.choose_keys(conn, k)
    staging = name.with_suffix(STAGING_SUFFIX)
    # A load's staging table dies with its transaction; one left by anything else (a tool
    # that committed it, an older gpcnn) is removed here, under the lock, by the next load.
    conn.exec_driver_sql(backend.drop_ddl(staging, if_exists=True))
    for statement in backend.image_table_ddl(staging, keys):
        conn.exec_driver_sql(statement)
    return staging, keys, exists


def finish_swap(conn, backend, name, staging, keys, exists: bool, meta: dict) -> None:
    """The staging table takes the name, and the catalog row says what it holds."""
    if exists:
        conn.exec_driver_sql(backend.drop_ddl(name))
    for statement in backend.rename_ddl(staging, name, keys):
        conn.exec_driver_sql(statement)
    Catalog(conn, backend).write_image_table(
        {
            "table_schema": name.schema,
            "table_name": name.name,
            "dist_keys": list(keys),
            "layout": IMAGE_LAYOUT,
            "gpcnn_version": __version__,
            **meta,
        },
    )


def _copy_buffers(conn, backend, table, pieces, total: int | None, label: str) -> None:
    bar = None
    if total is not None:
        from tqdm.auto import tqdm

        total += COPY_STREAM_OVERHEAD
        bar = tqdm(total=total, unit="B", unit_scale=True, desc=f"loading {label}", leave=False)
    stream = CopyStream(pieces, bar)
    try:
        copy(conn.connection.driver_connection, backend.copy_sql(table), stream)
    except Exception as e:
        if conn.connection.driver_connection.closed:
            # the server is gone: tell SQLAlchemy, so that its rollback does not replace this
            # error with "connection already closed" (the server has rolled back anyway)
            conn.invalidate(e)
        raise
    finally:
        if bar is not None:
            bar.close()


def read_images(db: Database | str | None, table, *, ids: bool = False):
    """All images (uint8 N×H×W×C) and labels of an image table, in ``buffer_id`` order, and with
    ``ids=True`` their ids too: ``(x, y)`` or ``(x, y, ids)``.

    Parameters
    ----------
    db : Database, str or None
        A handle from ``gpcnn.connect``, a URL, or None for the default database.
    table : str or (schema, table)
        A gpcnn image table.
    ids : bool, default False
        Also return every image's id.

    Returns
    -------
    x : ndarray of uint8, shape (N, H, W, C)
    y : ndarray of int32, shape (N,)
    ids : ndarray of int64, shape (N,)
        Only with ``ids=True``.

    Raises
    ------
    TableError
        ``table`` is not a gpcnn image table, or (``ids=True``) was loaded by gpcnn 0.1, without
        ids.

    Examples
    --------
    >>> x, y, ids = gpcnn.read_images(db, "fm.test", ids=True)
    """
    db = connect(db)
    info = describe(db, table)
    if ids:
        info.require_ids("read its ids")
    xs, ys, names = [], [], []
    with db.connect() as conn:
        for row in conn.exec_driver_sql(db.backend.read_sql(info.table, ids=ids)):
            xs.append(decode_images(row.x, row.n, info.image_shape))
            ys.append(decode_labels(row.y))
            if ids:
                names.append(np.frombuffer(row.ids, dtype=ID_DTYPE))
    x, y = np.concatenate(xs), np.concatenate(ys)
    return (x, y, np.concatenate(names)) if ids else (x, y)
