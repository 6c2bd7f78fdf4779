"""An image table made again into a new one, on the server: ``redeal`` deals its images IID
(the remedy when they may move), ``add_shared_sample`` keeps every image on its segment and adds
the same sample to each (the remedy when they must stay). The buffers are unpacked into one row
per image in SQL and packed again as ``pack_table`` packs: the images never pass through the
client."""

from __future__ import annotations

import math

import numpy as np

from gpcnn.data.dealing import check_shared_sample
from gpcnn.data.packing import Dealing, pack_rows
from gpcnn.data.table_catalog import ImageTable, describe
from gpcnn.deprecation import database_argument
from gpcnn.engines import Database, connect
from gpcnn.engines.identifiers import TableError, checked_name
from gpcnn.engines.install import ensure_installed
from gpcnn.engines.packing_sql import PackingSource, image_rows_sql, layout


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
    info = _source(db, table, "re-deal it")
    dealing = Dealing(segments, buffer_size, seed, shared_sample=sample)
    return _repack(db, info, name, dealing, {"source": f"redeal of {info.table}"}, replace)


@database_argument
def add_shared_sample(
    database: Database | str | None,
    table,
    target,
    fraction: float,
    *,
    seed: int = 0,
    buffer_size: int | None = None,
    replace: bool = False,
) -> ImageTable:
    """Copy the image table ``table`` into ``target`` with every image on the segment it is on,
    and a shared IID sample beside each segment's own: the remedy for label skew when the data
    must stay where it is (Zhao et al. 2018).

    Each segment of ``target`` holds the images of the same segment of ``table`` plus the same
    ``fraction`` of all the images, chosen by ``seed``, shuffled in (``pack_table``'s
    ``shared_sample``); the catalog keeps how ``table`` was dealt, and measures the new skew.

    Parameters
    ----------
    database : Database, str or None
        A handle from ``gpcnn.connect``, a URL, or None for the default database.
    table : str or (schema, table)
        A gpcnn image table (with image ids, and no shared sample of its own).
    target : str or (schema, table)
        The image table to create (not ``table``).
    fraction : float
        The sample's share of the images, 0 < p <= 0.5 (e.g. 0.05).
    seed : int, default 0
        The sample, and each segment's order.
    buffer_size : int, optional
        Images per row (default: ``table``'s).
    replace : bool, default False
        Replace an existing ``target`` (atomically) instead of refusing.

    Returns
    -------
    ImageTable
        The new table as the catalog describes it.

    Raises
    ------
    TableError
        As ``redeal``.

    Examples
    --------
    >>> gpcnn.add_shared_sample(db, "sites.images", "sites.images_shared", 0.05)
    """
    fraction = check_shared_sample(fraction)
    db = connect(database)
    name = checked_name(target)
    info = _source(db, table, "add a shared sample to it")
    with db.connect() as conn:
        found = layout(conn, info.table.sql(db.backend))
    shards = [np.asarray(found[key], dtype=np.int64) for key in info.keys]
    kept = (np.concatenate(shards), [len(shard) for shard in shards])
    dealing = Dealing(
        info.segments, buffer_size or info.buffer_size, seed, shared_sample=fraction, kept=kept
    )
    catalog = {
        "source": f"{info.table} with a shared sample of {fraction:g}",
        "distribution": info.distribution,
        "skew": info.skew,
    }
    return _repack(db, info, name, dealing, catalog, replace)


def _source(db: Database, table, what: str) -> ImageTable:
    info = describe(db, table)
    info.require_ids(what)
    if info.shared_images:
        raise TableError(
            f"{info.table} holds a shared sample once per segment: use the table it was made from"
        )
    return info


def _repack(
    db: Database, info: ImageTable, name, dealing: Dealing, catalog: dict, replace: bool
) -> ImageTable:
    """The images of ``info`` packed into ``name`` as ``dealing`` deals them."""
    ensure_installed(db)  # the packing runs gpcnn's functions on the segments
    rows = image_rows_sql(info.table.sql(db.backend), math.prod(info.image_shape))
    queries = PackingSource(db.backend, rows, "x", "y", "id", "bytea")
    classes = [str(c) for c in range(info.num_classes)]  # the stored labels, as pack_table reads
    return pack_rows(
        db,
        queries,
        info.table,
        name,
        info.images,
        classes,
        dealing,
        {"class_names": list(info.class_names) or None, **catalog},
        shape=tuple(info.image_shape),
        normalized=False,
        replace=replace,
    )
