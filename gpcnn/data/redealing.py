"""``redeal``: an image table dealt again, IID (or IID with a shared sample), into a new image
table, on the server: the buffers are unpacked into one row per image in SQL and packed again as
``pack_table`` packs, so the images never pass through the client."""

from __future__ import annotations

import math

from gpcnn.data.dealing import check_shared_sample
from gpcnn.data.packing import Dealing, pack_rows
from gpcnn.data.table_catalog import ImageTable, describe
from gpcnn.deprecation import database_argument
from gpcnn.engines import Database, connect
from gpcnn.engines.identifiers import TableError, checked_name
from gpcnn.engines.install import ensure_installed
from gpcnn.engines.packing import PackingSource, image_rows_sql


@database_argument
def redeal(
    database: Database | str | None,
    table,
    target,
    *,
    segments: int | None = None,
    seed: int = 0,
    buffer_size: int | None = None,
    shared_sample: float | None = None,
    replace: bool = False,
) -> ImageTable:
    """Deal the images of the image table ``table`` again, IID, into the new image table
    ``target``: the remedy for a table whose label skew (``ImageTable.label_skew``) slows
    training, when its images may move.

    ``redeal(db, t, u, seed=s)`` holds the images of ``t`` as ``load_images(seed=s)`` of them in
    id order would; the class names stay.

    Parameters
    ----------
    database : Database, str or None
        A handle from ``gpcnn.connect``, a URL, or None for the default database.
    table : str or (schema, table)
        A gpcnn image table (with image ids, and no shared sample of its own).
    target : str or (schema, table)
        The image table to create (not ``table``).
    segments : int, optional
        How many segments to deal over (default: the engine's).
    seed : int, default 0
        The permutation the images are dealt in (and the shared sample, if any).
    buffer_size : int, optional
        Images per row (default: as ``load_images``).
    shared_sample : float, optional
        A fraction 0 < p <= 0.5 of the images that every segment holds besides its own, as in
        ``pack_table``.
    replace : bool, default False
        Replace an existing ``target`` (atomically) instead of refusing.

    Returns
    -------
    ImageTable
        The new table as the catalog describes it, its label skew measured.

    Raises
    ------
    TableError
        ``table`` is not an image table, has no ids or has a shared sample; a bad
        ``shared_sample``; more segments than images; ``target`` exists without ``replace``.

    Examples
    --------
    >>> gpcnn.redeal(db, "sites.images", "sites.images_iid", segments=4, seed=0)
    """
    sample = None if shared_sample is None else check_shared_sample(shared_sample)
    db = connect(database)
    name = checked_name(target)
    info = describe(db, table)
    info.require_ids("re-deal it")
    if info.shared_images:
        raise TableError(
            f"{info.table} holds a shared sample once per segment: re-deal the table it was "
            "made from"
        )
    ensure_installed(db)  # the packing runs gpcnn's functions on the segments
    rows = image_rows_sql(info.table.sql(db.backend), math.prod(info.image_shape))
    queries = PackingSource(db.backend, rows, "x", "y", "id", "bytea")
    classes = [str(c) for c in range(info.num_classes)]  # the stored labels, as pack_table reads
    catalog = {"class_names": list(info.class_names) or None, "source": f"redeal of {info.table}"}
    return pack_rows(
        db, queries, info.table, name, info.images, classes,
        Dealing(segments, buffer_size, seed, shared_sample=sample), catalog,
        shape=tuple(info.image_shape), normalized=False, replace=replace,
    )  # fmt: skip
