"""The image tables of gpcnn's catalog: what each holds (``ImageTable``); describe, list and drop
them; the buffers of one."""

from __future__ import annotations

from dataclasses import dataclass

from gpcnn.deprecation import database_argument
from gpcnn.engines import Backend, Connection, Database, connect
from gpcnn.engines.identifiers import TableError, TableName
from gpcnn.engines.label_skew_sql import SkewIndex
from gpcnn.engines.table_records import TableRecords, made_by_gpcnn, relation_owner

IMAGE_LAYOUT = 2  # 1: gpcnn 0.1, without ids


@dataclass(frozen=True)
class ImageTable:
    """A gpcnn image table, as its catalog row describes it.

    ``load_images``, ``pack_table``, ``redeal`` and ``describe_table`` return one; the fields are
    read-only attributes of the same names.

    Parameters
    ----------
    table : TableName
        The table's schema-qualified name (``str(info.table)`` is ``"schema.name"``).
    image_shape : tuple of int
        The shape of one stored item: (H, W, C) for images, (F,) for feature rows.
    num_classes : int
        The number of classes; labels are class indices 0..num_classes-1.
    class_names : tuple of str
        A name per class, in class order; empty when none was given.
    keys : tuple of int
        The distribution key of each segment's rows, one per segment.
    images_per_segment : tuple of int
        The images each segment holds, in the order of ``keys`` (a shared sample included).
    buffer_size : int
        Images per buffer, the table's rows.
    source : str or None
        Where the images came from, as recorded at loading.
    layout : int, default 2
        The table's storage layout: 1 for tables of gpcnn 0.1, without image ids.
    distribution : str, default "iid"
        How the images were dealt to the segments: ``"iid"``, ``"label-skew"`` (Dirichlet
        ``skew``) or ``"distribute_by"`` (``pack_table``'s ``distribute_by``).
    skew : float, optional
        The Dirichlet concentration of a ``"label-skew"`` table.
    class_counts : tuple of tuple of int, optional
        Images of each class on each segment (per segment, per class); None if not recorded.
    label_skew : SkewIndex, optional
        The measured label skew: ``max``, the largest segment's total-variation distance of its
        label mix from the table's, and ``mean``, weighted by images; None if not measured
        (``gpcnn.measure_skew`` measures it).
    shared_images : int, default 0
        The images of a shared sample, held by every segment besides its own.
    """

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
    label_skew: SkewIndex | None = None  # None: not measured (packed before gpcnn measured it)
    shared_images: int = 0  # the shared sample's images, held by every segment besides its own

    def require_ids(self, what: str) -> None:
        """Refuse, with what to do, a table loaded before images had ids.

        Parameters
        ----------
        what : str
            What needs the ids, completing the message "gpcnn cannot ...", e.g.
            ``"write predictions keyed by image id"``.

        Raises
        ------
        TableError
            The table has layout 1 (gpcnn 0.1, without image ids).
        """
        if self.layout < 2:
            raise TableError(
                f"{self.table} was loaded by gpcnn 0.1, without image ids, so gpcnn cannot "
                f"{what}: reload it (load_images(..., replace=True) or `gpcnn load --replace`); "
                "training and evaluation work on it as it is"
            )

    @property
    def segments(self) -> int:
        """The number of segments the table is spread over (``len(keys)``)."""
        return len(self.keys)

    @property
    def images(self) -> int:
        """The table's distinct images (a shared sample counted once, not once per segment)."""
        return sum(self.images_per_segment) - self.segments * self.shared_images


def resolved_name(backend: Backend, table: TableName) -> TableName:
    """``table`` with its schema (``TableName.qualified``)."""
    return table.qualified(backend)


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
        label_skew=(
            None
            if row.label_skew_max is None
            else SkewIndex(row.label_skew_max, row.label_skew_mean)
        ),
        shared_images=int(row.shared_images),
    )


def _per_segment(flat, segments: int):
    if flat is None:
        return None
    width = len(flat) // segments
    return tuple(tuple(int(v) for v in flat[k * width : (k + 1) * width]) for k in range(segments))


def _entry(conn: Connection, backend, name: TableName):
    """The name with its schema, its catalog row (None if none, or if the table is there but not
    the one the row describes: ``made_by_gpcnn``) and whether the table exists."""
    name = resolved_name(backend, name)
    assert name.schema is not None  # qualified by resolved_name
    row = TableRecords(conn, backend).image_table(name.schema, name.name)
    owner = relation_owner(conn, name)
    if owner is not None and not made_by_gpcnn(row, owner):
        row = None
    return name, row, owner is not None


@database_argument
def describe(database: Database | str | None, table) -> ImageTable:
    """The catalog entry of an image table.

    Parameters
    ----------
    database : Database, str or None
        A handle from ``gpcnn.connect``, a URL, or None for the default database.
    table : str or (schema, table)
        The image table; without a schema, the connection's current schema.

    Returns
    -------
    ImageTable
        What the table holds: segments, image shape, classes, counts, label skew.

    Raises
    ------
    TableError
        ``table`` is not a gpcnn image table, or its catalog entry remains but the table was
        dropped by hand.

    Examples
    --------
    >>> info = gpcnn.describe_table(db, "fm.train")  # doctest: +SKIP
    >>> info.segments, info.image_shape, info.num_classes  # doctest: +SKIP
    (4, (28, 28, 1), 10)
    """
    db = connect(database)
    name = TableName.parse(table)
    with db.connect() as conn:
        name, row, exists = _entry(conn, db.backend, name)
        if row is not None and not exists:
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


@database_argument
def list_tables(database: Database | str | None = None) -> list[ImageTable]:
    """Every image table of the catalog.

    Catalog entries whose table was dropped by hand are removed on the way; an entry whose
    table is owned by another role than the one that wrote the entry is not listed.

    Parameters
    ----------
    database : Database, str or None
        A handle from ``gpcnn.connect``, a URL, or None for the default database.

    Returns
    -------
    list of ImageTable
        One per image table, in the catalog's order.
    """
    db = connect(database)
    backend = db.backend
    found = []
    with db.begin() as conn:
        for row in TableRecords(conn, backend).image_tables():
            name = TableName(row.table_schema, row.table_name)
            owner = relation_owner(conn, name)
            if owner is None:
                TableRecords(conn, backend).delete_image_table(row.table_schema, row.table_name)
            elif made_by_gpcnn(row, owner):
                found.append(_from_row(name, row))
    return found


@database_argument
def drop_table(database: Database | str | None, table, *, missing_ok: bool = False) -> bool:
    """Drop an image table with its parts and its catalog entry, in one transaction.

    A table dropped by hand has its catalog entry removed.

    Parameters
    ----------
    database : Database, str or None
        A handle from ``gpcnn.connect``, a URL, or None for the default database.
    table : str or (schema, table)
        The image table; without a schema, the connection's current schema.
    missing_ok : bool, default False
        Return False for a table that is neither in the catalog nor in the database, instead
        of raising.

    Returns
    -------
    bool
        True when something was dropped, False when there was nothing to drop.

    Raises
    ------
    TableError
        ``table`` exists but is not a gpcnn image table (gpcnn drops only its own), or there is
        no such image table and not ``missing_ok``.
    """
    db = connect(database)
    backend = db.backend
    name = TableName.parse(table)
    with db.begin() as conn:
        name, row, exists = _entry(conn, backend, name)
        if row is None:
            if exists:
                raise TableError(f"{name} is not a gpcnn image table: gpcnn drops only its own")
            if missing_ok:
                return False
            raise TableError(f"no image table {name}")
        if exists:
            conn.exec_driver_sql(backend.drop_ddl(name))
        TableRecords(conn, backend).delete_image_table(name.schema, name.name)
    return True


def buffer_counts(db: Database, info: ImageTable) -> dict[int, list[tuple[int, int]]]:
    """Each key's (buffer_id, images) in training order."""
    buffers: dict[int, list[tuple[int, int]]] = {k: [] for k in info.keys}
    with db.connect() as conn:
        for key, buffer_id, n in conn.exec_driver_sql(db.backend.buffers_sql(info.table)):
            buffers[key].append((buffer_id, n))
    return buffers
