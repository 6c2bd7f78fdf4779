"""Load images into an image table: in ONE transaction, under an advisory lock on the target name,
a staging table, its buffers by COPY, the swap, the catalog row.

A table holds one row per *buffer* (many images): ``__dist_key__`` (the segment), ``buffer_id``
(a fixed training order), ``x`` (uint8 images N×H×W×C as bytes), ``y`` (int32 labels, little-endian),
``n`` (images in the buffer), ``ids`` (int64). Any failure (a bad row, a lost connection, the client
killed mid-COPY) rolls back to the previous table and catalog row, and no staging table can outlive
it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from gpcnn.data.copy_rows import COPY_ROW_OVERHEAD, COPY_STREAM_OVERHEAD, copy_stream, source_rows
from gpcnn.data.dealing import ID_DTYPE, default_buffer_size, plan_buffers, validate_ids
from gpcnn.data.label_skew import measured
from gpcnn.data.sources import as_source
from gpcnn.data.table_catalog import IMAGE_LAYOUT, ImageTable, describe, resolved_name
from gpcnn.deprecation import database_argument
from gpcnn.engines import Database, connect
from gpcnn.engines.catalog import Catalog
from gpcnn.engines.copying import CopyStream, copy
from gpcnn.engines.identifiers import STAGING_SUFFIX, TableError, TableName, checked_name
from gpcnn.engines.table_records import TableRecords, made_by_gpcnn, not_gpcnns, relation_owner
from gpcnn.kernel.segment import LABEL_DTYPE
from gpcnn.version import __version__


@database_argument
def load_images(
    database: Database | str | None,
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
    drawn from Dirichlet(``skew``) (``deal``). Or ``x`` is an image source (``ImageSource``), such
    as a folder from ``gpcnn.datasets.load_image_folder``: already shuffled, loaded in its own order
    and decoded batch by batch while the COPY runs, so memory stays bounded. ``ids`` name the images
    (default: the input position, or the source's ids: for a folder, the file's position in its
    sorted listing). The catalog records the distribution and
    every segment's class mix.

    Parameters
    ----------
    database : Database, str or None
        A handle from ``gpcnn.connect``, a URL, or None for the default database.
    table : str or (schema, table)
        The image table to create.
    x : ndarray or ImageSource
        Images (N, H, W) or (N, H, W, C), integers 0..255 (stored as uint8) or floats in [0, 1]
        (stored as uint8, rounded); feature rows (N, F), integers 0..255 (uint8) or floats of
        any value (stored as float32); or an image source, such as a folder from
        ``load_image_folder``. ``gpcnn.data.pixels`` states the rule.
    y : ndarray, optional
        One label per image: class indices (0..classes-1), or names (strings), which map to
        their sorted distinct values as ``pack_table`` maps a table's, kept as the class names;
        None for a source, which carries its labels.
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
    >>> from gpcnn import datasets
    >>> data = datasets.load_fashion_mnist()
    >>> gpcnn.load_images(db, "fm.train", data.x_train, data.y_train, segments=4,
    ...                   class_names=data.class_names)
    """
    images = as_source(x, y, num_classes=num_classes, class_names=class_names)
    count, image_shape = len(images), tuple(images.image_shape)
    if count == 0:
        raise TableError("no images to load")
    names = None if class_names is None else [str(c) for c in class_names]
    names = names or (None if images.class_names is None else list(images.class_names))
    classes = images.num_classes if names is None else len(names)
    ids = validate_ids(images.ids if ids is None else ids, count)
    db = connect(database)
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
    order, counts = images.deal(k, seed, distribution, skew)  # applied buffer by buffer

    def rows(buffers):
        return source_rows(images, buffers, order, ids, progress=progress)

    item = math.prod(image_shape) * images.itemsize
    payload = count * (item + LABEL_DTYPE.itemsize + ID_DTYPE.itemsize)
    meta = {
        "image_shape": list(image_shape),
        "num_classes": classes,
        "class_names": names,
        "buffer_size": size,
        "images": count,
        "source": source,
        "distribution": distribution,
        "skew": None if skew is None else float(skew),
    }
    return _load(db, name, counts, replace, meta, rows, payload if progress else None)


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
        name = resolved_name(backend, name)
        staging, keys, exists = begin_swap(conn, backend, name, len(counts), replace)
        buffers = plan_buffers(sum(counts), keys, meta["buffer_size"], counts)
        total = None if payload is None else payload + COPY_ROW_OVERHEAD * len(buffers)
        _copy_buffers(conn, backend, staging, copy_stream(rows(buffers)), total, str(name))
        finish_swap(
            conn, backend, name, staging, keys, exists, {**meta, "images_per_segment": counts}
        )
    return describe(db, name)


def check_target(conn, backend, name: TableName, replace: bool) -> bool:
    """Whether the image table ``name`` exists; refuses a table there that gpcnn did not make
    (whatever ``replace`` says), and one of gpcnn's without ``replace``."""
    owner = relation_owner(conn, name)
    if owner is None:
        return False
    assert name.schema is not None  # callers pass the name with its schema (resolved_name)
    if not made_by_gpcnn(TableRecords(conn, backend).image_table(name.schema, name.name), owner):
        raise TableError(not_gpcnns(name, "an image table"))
    if not replace:
        raise TableError(f"table {name} exists: pass replace=True (or --replace) to reload it")
    return True


def begin_swap(conn, backend, name: TableName, k: int, replace: bool):
    """The lock, the checks, and an empty staging table for a new version of ``name``; returns
    (staging, keys, whether ``name`` exists)."""
    backend.lock_name(conn, str(name))
    Catalog(conn, backend).ensure_tables()
    backend.ensure_schema(conn, name.schema)
    exists = check_target(conn, backend, name, replace)
    keys = backend.choose_keys(conn, k)
    staging = name.with_suffix(STAGING_SUFFIX)
    # A load's staging table dies with its transaction; one left by anything else (a tool
    # that committed it, an older gpcnn) is removed here, under the lock, by the next load.
    conn.exec_driver_sql(backend.drop_ddl(staging, if_exists=True))
    for statement in backend.image_table_ddl(staging, keys):
        conn.exec_driver_sql(statement)
    return staging, keys, exists


def finish_swap(conn, backend, name, staging, keys, exists: bool, meta: dict) -> None:
    """The staging table takes the name, and the catalog row says what it holds: ``meta`` and
    the labels of each segment, counted in the staging table."""
    skew = measured(conn, backend, staging, keys, meta["num_classes"])
    if exists:
        conn.exec_driver_sql(backend.drop_ddl(name))
    for statement in backend.rename_ddl(staging, name, keys):
        conn.exec_driver_sql(statement)
    TableRecords(conn, backend).write_image_table(
        {
            "table_schema": name.schema,
            "table_name": name.name,
            "dist_keys": list(keys),
            "layout": IMAGE_LAYOUT,
            "gpcnn_version": __version__,
            **meta,
            **skew,
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
