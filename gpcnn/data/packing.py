"""``pack_table``: a table of images already in the database becomes a gpcnn image table, in SQL
on the server (MADlib's ``training_preprocessor_dl``), with ``load_images``' guarantees: every
check first with an error that names the bad row's id, one transaction with the atomic swap,
balanced segments, a catalog row. The images never pass through the client; it sends only the
order in which they are dealt (a permutation of N positions from ``seed``, as ``load_images``
draws it), so ``pack_table(seed=s)`` of a table equals ``load_images(seed=s)`` of the same arrays
in id order.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpcnn.data.dealing import (
    check_shared_sample,
    deal_groups,
    default_buffer_size,
    plan_buffers,
    share_sample,
)
from gpcnn.data.loading import begin_swap, finish_swap
from gpcnn.data.table_catalog import ImageTable, describe, resolved_name
from gpcnn.deprecation import database_argument
from gpcnn.engines import Database, DatabaseError, connect
from gpcnn.engines.identifiers import TableError, TableName, checked_name
from gpcnn.engines.install import ensure_installed
from gpcnn.engines.packing_sql import ID_TYPES, IMAGE_TYPES, PackingSource, column_types


@database_argument
def pack_table(
    database: Database | str | None,
    source,
    target,
    *,
    x_column: str,
    y_column: str,
    id_column: str,
    shape: Sequence[int] | None = None,
    normalized: bool = False,
    segments: int | None = None,
    buffer_size: int | None = None,
    class_values: Sequence | None = None,
    seed: int = 0,
    replace: bool = False,
    distribute_by: str | None = None,
    shared_sample: float | None = None,
) -> ImageTable:
    """Pack ``source`` (one row per image) into the image table ``target``.

    ``x_column``: pixels as ``real[]``, ``double precision[]``, ``smallint[]``, ``integer[]`` (H×W×C,
    channels last, or F features; values 0..255, or 0..1 with ``normalized``, stored as uint8)
    or ``bytea`` (uint8). ``shape``: (H, W, C), or (F,) for feature rows; by default a square
    gray (L = s²) or RGB (L = 3s²) image. A model whose input holds as many values takes the
    table either way (``gpcnn.data.pixels``'s rule): rows of 784 values fit a 28×28×1 model.
    ``y_column``: labels of any type, mapped to classes 0..C-1 in the order of ``class_values``
    (default: the distinct labels, sorted; pack a validation table with the training table's
    ``class_names``). ``id_column``: an integer id per row, required (a row order is not an id).

    Parameters
    ----------
    database : Database, str or None
        A handle from ``gpcnn.connect``, a URL, or None for the default database.
    source : str or (schema, table)
        A table with one row per image, already in the database.
    target : str or (schema, table)
        The image table to create (not ``source``).
    x_column, y_column, id_column : str
        The columns of the pixels, the labels and the ids, as described above.
    shape : (H, W, C) or (F,), optional
        The image shape, when not a square gray or RGB image; (F,) for feature rows.
    normalized : bool, default False
        Pixel values are 0..1 instead of 0..255.
    segments, buffer_size, seed, replace
        As in ``load_images``; with the same ``seed`` the table equals ``load_images`` of the
        same arrays in id order.
    class_values : sequence, optional
        The labels in class order (default: the distinct labels, sorted).
    distribute_by : str, optional
        A column of ``source``: rows with equal values land on the same segment, as Greenplum's
        ``DISTRIBUTED BY`` keeps them (images grouped by site, camera or day stay where they
        are, with the label skew that brings: ``ImageTable.label_skew`` measures it). Each value
        goes whole, largest first, to the segment with the fewest images so far (ties in an order
        from ``seed``), so the segments stay as even as the values allow. Default: IID dealing.
    shared_sample : float, optional
        A fraction 0 < p <= 0.5 of the images, chosen by ``seed``, that every segment holds
        besides its own and trains on (Zhao et al. 2018: a small shared IID sample closes much of
        what label skew costs). The segments' own images are those dealt without it; the sample
        is shuffled into each segment's buffers, so a sampled image is stored once per segment
        besides its own copy. A table with a sample is for training: evaluating or predicting on
        it counts the sample once per segment.

    Returns
    -------
    ImageTable
        The new table as the catalog describes it.

    Raises
    ------
    TableError
        A missing column or one of the wrong type, a row of the wrong length or out of range
        (named by its id), more segments than rows (or than ``distribute_by`` values), a
        ``shared_sample`` outside 0 < p <= 0.5, or ``target`` exists without ``replace``.
    InstallError
        gpcnn's functions are missing and the user may not install them.

    Examples
    --------
    >>> gpcnn.pack_table(db, "raw.images", "fm.packed", x_column="pixels", y_column="label",
    ...                  id_column="image_id", segments=4)
    """
    sample = None if shared_sample is None else check_shared_sample(shared_sample)
    db = connect(database)
    ensure_installed(db)  # the packing runs gpcnn's functions on the segments
    name = checked_name(target)
    with db.connect() as conn:
        src = resolved_name(db.backend, TableName.parse(source))
        columns = {"x_column": x_column, "y_column": y_column, "id_column": id_column}
        if distribute_by is not None:
            columns["distribute_by"] = distribute_by
        queries, count = _check_columns(conn, db.backend, src, columns)
        image_shape = _check_rows(conn, queries, src, shape)
    by = "" if distribute_by is None else f" distributed by {distribute_by}"
    try:
        with db.connect() as conn:
            values = _class_values(conn, queries, src, class_values)
            groups = None if distribute_by is None else _groups(conn, queries, src, distribute_by)
        dealing = Dealing(segments, buffer_size, seed, groups, sample)
        catalog = {"class_names": values, "source": f"pack_table of {src}{by}"}
        return pack_rows(
            db,
            queries,
            src,
            name,
            count,
            values,
            dealing,
            catalog,
            shape=image_shape,
            normalized=bool(normalized),
            replace=replace,
        )
    except (TableError, DatabaseError):
        # The fill checks the range as it converts: any refusal from here on is first the
        # range's, for the row named by the check alone, as if it had come first.
        _refuse_out_of_range(db, queries, src, count, image_shape, normalized)
        raise


@dataclass(frozen=True)
class Dealing:
    """How a pack deals its rows: over ``segments`` in buffers of ``buffer_size`` (None: the
    defaults), IID by ``seed``, whole ``groups`` (each row's, in id order) or as ``kept`` (an
    order and each shard's size, given), and the fraction of a shared sample (None: none)."""

    segments: int | None
    buffer_size: int | None
    seed: int
    groups: np.ndarray | None = None
    shared_sample: float | None = None
    kept: tuple[np.ndarray, list[int]] | None = None

    def order(self, count: int, k: int):
        """(order, images per shard, the shared sample's positions) over ``count`` rows in id
        order; positions repeat where the sample is dealt beside each shard."""
        if self.kept is not None:
            order, counts = self.kept
        elif self.groups is None:
            order = np.random.default_rng(self.seed).permutation(count)
            counts = [len(s) for s in np.array_split(order, k)]
        else:
            order, counts = deal_groups(self.groups, k, self.seed)
        if self.shared_sample is None:
            return order, counts, order[:0]
        return share_sample(order, counts, self.shared_sample, self.seed)


def pack_rows(
    db: Database,
    queries: PackingSource,
    src: TableName,
    name: TableName,
    count: int,
    values: list[str],
    dealing: Dealing,
    catalog: dict,
    *,
    shape,
    normalized,
    replace,
) -> ImageTable:
    """The rows of ``queries`` (``count`` images, labels ``values``) dealt into ``name`` in one
    transaction; ``catalog``: the entry's class names and source."""
    backend = db.backend
    k = backend.default_segments() if dealing.segments is None else int(dealing.segments)
    if k < 1 or count < k:
        raise TableError(f"{count} images cannot give each of {k} segments at least one")
    size = dealing.buffer_size
    size = default_buffer_size(count, k, shape) if size is None else int(size)
    if size < 1:
        raise TableError(f"buffer_size must be >= 1, got {dealing.buffer_size}")
    size = min(size, math.ceil(count / k))
    order, counts, sample = dealing.order(count, k)
    with db.begin() as conn:
        name = resolved_name(backend, name)
        if name == src:
            raise TableError("pack_table writes a new table: target must differ from source")
        staging, keys, exists = begin_swap(conn, backend, name, k, replace)
        buffers = plan_buffers(len(order), keys, size, counts)
        key, buffer_id = np.empty(len(order), dtype=np.int64), np.empty(len(order), dtype=np.int64)
        for buf in buffers:  # each dealt image's buffer, in the order dealt
            key[buf.start : buf.stop] = buf.key
            buffer_id[buf.start : buf.stop] = buf.buffer_id
        queries.fill(
            conn,
            staging.sql(backend),
            {
                "normalized": normalized,
                "length": math.prod(shape),
                "values": values,
                "position": order,
                "key": key,
                "buffer_id": buffer_id,
            },
        )
        finish_swap(
            conn,
            backend,
            name,
            staging,
            keys,
            exists,
            {
                "image_shape": list(shape),
                "num_classes": len(values),
                "buffer_size": size,
                "images": count,
                "images_per_segment": counts,
                "distribution": "iid" if dealing.groups is None else "distribute_by",
                "shared_images": len(sample),
                **catalog,
            },
        )
    return describe(db, name)


def _check_columns(conn, backend, src: TableName, columns: dict[str, str]):
    """The columns (role -> name) checked, then the rows' ids and NULLs: (queries, rows)."""
    types = column_types(conn, src.sql(backend))
    if not types:
        raise TableError(f"no table {src} to pack")
    for role, column in columns.items():
        if not isinstance(column, str):
            raise TableError(f"{role}={column!r}: a column name (str)")
        if "%" in column:  # psycopg2's parameter marker: the statements would name another column
            raise TableError(f"{role}={column!r}: gpcnn cannot name a column holding '%'")
        if column not in types:
            raise TableError(f"{role}={column!r} is not a column of {src} ({', '.join(types)})")
    x, id_ = columns["x_column"], columns["id_column"]
    if types[x] not in IMAGE_TYPES:
        raise TableError(f"{src}.{x} is {types[x]}: images must be one of {', '.join(IMAGE_TYPES)}")
    if types[id_] not in ID_TYPES:
        raise TableError(f"{src}.{id_} is {types[id_]}: ids must be one of {', '.join(ID_TYPES)}")
    queries = PackingSource(backend, src.sql(backend), x, columns["y_column"], id_, types[x])
    total, distinct, nulls, null_image, null_label = queries.summary(conn)
    if total == 0:
        raise TableError(f"{src} has no rows to pack")
    if nulls:
        raise TableError(f"{src}: {nulls} rows have a NULL {id_}; every image needs an id")
    if distinct != total:
        duplicate = queries.duplicate_id(conn)
        raise TableError(f"{src}: {id_} = {duplicate} appears more than once; ids must be unique")
    missing = min((i for i in (null_image, null_label) if i is not None), default=None)
    if missing is not None:
        what = "images" if missing == null_image else "label"
        raise TableError(f"{src}: the row with id {missing} has NULL {what}")
    return queries, total


def _check_rows(conn, queries: PackingSource, src: TableName, shape) -> tuple[int, ...]:
    lengths = queries.lengths(conn)
    image_shape = _shape(lengths[0][0], shape, src)
    expected = math.prod(image_shape)
    for length, first_id in lengths:
        if length != expected:
            raise TableError(
                f"{src}: the row with id {first_id} has {length} values, expected {expected} "
                f"for images of shape {image_shape}"
            )
    return image_shape


def _refuse_out_of_range(
    db: Database, queries: PackingSource, src: TableName, count: int, shape, normalized: bool
) -> None:
    if not queries.is_array:
        return
    top = 1.0 if normalized else 255.0
    with db.connect() as conn:
        bad = queries.first_out_of_range(conn, count, math.prod(shape), top)
    if bad is not None:
        raise TableError(
            f"{src}: the row with id {bad} has values outside 0..{top:g}"
            + ("" if normalized else " (pass normalized=True for images in 0..1)")
        ) from None


def _shape(length: int, shape, src: TableName) -> tuple[int, ...]:
    if shape is not None:
        shape = tuple(int(s) for s in shape)
        if len(shape) == 2:
            shape = (*shape, 1)
        if len(shape) not in (1, 3) or min(shape) < 1:
            raise TableError(f"shape must be (F,) feature rows, (H, W) or (H, W, C), got {shape}")
        return shape
    for channels in (1, 3):
        side = math.isqrt(length // channels)
        if side * side * channels == length:
            return side, side, channels
    raise TableError(
        f"{src}: images of {length} values are not square: give shape=(H, W, C), or "
        f"shape=({length},) for feature rows"
    )


def _groups(conn, queries: PackingSource, src: TableName, column: str) -> np.ndarray:
    """Each row's group (0..G-1) by its value of ``column``, in id order."""
    try:
        return np.asarray(queries.groups(conn, column), dtype=np.int64)
    except DatabaseError as e:  # a type without an order (json, point): no way to group it
        raise TableError(
            f"{src}: cannot distribute by {column}: {getattr(e, 'orig', e)}".strip()
        ) from None


def _class_values(conn, queries: PackingSource, src: TableName, given) -> list[str]:
    if given is None:
        return queries.class_values(conn)
    values = [str(v) for v in given]
    if len(set(values)) != len(values):
        raise TableError(f"class_values must be distinct, got {values}")
    unknown = queries.first_unknown_label(conn, values)
    if unknown is not None:
        raise TableError(
            f"{src}: the row with id {unknown[0]} has label {unknown[1]!r}, not one of the "
            f"class values {values}"
        )
    return values
