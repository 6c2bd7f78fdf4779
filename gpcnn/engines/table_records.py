"""The catalogs of the tables gpcnn made: image tables (``image_tables``) and the tables it wrote
predictions into (``prediction_tables``), as ``TableRecords`` on the caller's connection; and
whether a table is one gpcnn made (``made_by_gpcnn``: a catalog row counts only when the role that
wrote it owns the table, as ``pg_class`` says).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import sqlalchemy as sa

from gpcnn.engines import shapes
from gpcnn.engines.backend import Backend
from gpcnn.engines.identifiers import TableName


def relation_owner(conn: sa.Connection, name: TableName) -> str | None:
    """The role that owns the table ``name`` (with its schema), as the server records it; None when
    there is no such table. Read from the catalog by name, so that a schema this role may not use
    answers too (``to_regclass`` refuses it)."""
    return conn.execute(
        sa.text(
            "SELECT CAST(pg_catalog.pg_get_userbyid(c.relowner) AS text) FROM pg_catalog.pg_class c "
            "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = :s AND c.relname = :n"
        ),
        {"s": name.schema, "n": name.name},
    ).scalar()


def made_by_gpcnn(row, owner: str | None) -> bool:
    """A catalog row describes the table it names: the table exists and is owned by the role
    that wrote the row (a row another role planted, or a table replaced by hand, is not)."""
    return row is not None and owner is not None and row.created_by == owner


def not_gpcnns(name: object, kind: str) -> str:
    """The refusal to replace a table gpcnn did not make (``made_by_gpcnn``)."""
    return (
        f"table {name} exists, but is not {kind} that gpcnn made (gpcnn's catalog has no entry "
        "for it written by the table's owner): gpcnn replaces only tables it made; choose "
        "another name, or drop or rename that table yourself"
    )


@dataclass(frozen=True)
class TableRecords:
    """The catalogs of gpcnn's tables in the backend's schema, through an open connection whose
    transaction the caller owns (``TableRecords(conn, db.backend)``)."""

    conn: sa.Connection
    backend: Backend

    @property
    def tables(self) -> shapes.Tables:
        return shapes.tables(self.backend.schema)

    def image_table(self, table_schema: str, table_name: str):
        """The catalog row of an image table, or None (``_describing``)."""
        if not shapes.exists(self.conn, self.backend, "image_tables"):
            return None
        return self._describing(self.tables.image_tables, table_schema, table_name)

    def _describing(self, t: sa.Table, table_schema: str, table_name: str):
        """Of the rows a catalog ``t`` shows this role for a name, the one its table's owner wrote
        (``made_by_gpcnn``); where the table is gone, the first (a stale entry, to remove)."""
        rows = self.conn.execute(
            sa.select(t).where(t.c.table_schema == table_schema, t.c.table_name == table_name)
        ).all()
        owner = relation_owner(self.conn, TableName(table_schema, table_name))
        if owner is None:
            return rows[0] if rows else None
        return next((row for row in rows if row.created_by == owner), None)

    def image_tables(self) -> Sequence[sa.Row]:
        t = self.tables.image_tables
        if not shapes.exists(self.conn, self.backend, "image_tables"):
            return []
        return self.conn.execute(sa.select(t).order_by(t.c.table_schema, t.c.table_name)).all()

    def write_image_table(self, row: dict) -> None:
        """Replace the catalog row of ``row["table_schema"], row["table_name"]``."""
        self.delete_image_table(row["table_schema"], row["table_name"])
        self.conn.execute(self.tables.image_tables.insert().values(**row))

    def update_image_table(self, table_schema: str, table_name: str, values: dict) -> None:
        """Set some columns of an image table's catalog row."""
        t = self.tables.image_tables
        self.conn.execute(
            t.update()
            .where(t.c.table_schema == table_schema, t.c.table_name == table_name)
            .values(**values)
        )

    def prediction_tables(self) -> Sequence[sa.Row]:
        t = self.tables.prediction_tables
        if not shapes.exists(self.conn, self.backend, "prediction_tables"):
            return []
        return self.conn.execute(sa.select(t).order_by(t.c.table_schema, t.c.table_name)).all()

    def prediction_table(self, table_schema: str, table_name: str):
        """The catalog row of a table gpcnn wrote predictions into, or None."""
        return self._describing(self.tables.prediction_tables, table_schema, table_name)

    def write_prediction_table(self, table_schema: str, table_name: str, source: str) -> None:
        """Record (again) that gpcnn wrote predictions of ``source`` into the table."""
        from gpcnn.version import __version__

        t = self.tables.prediction_tables
        where = (t.c.table_schema == table_schema, t.c.table_name == table_name)
        self.conn.execute(t.delete().where(*where))
        self.conn.execute(
            t.insert().values(
                table_schema=table_schema,
                table_name=table_name,
                source=source,
                gpcnn_version=__version__,
            )
        )

    def delete_image_table(self, table_schema: str, table_name: str) -> None:
        t = self.tables.image_tables
        self.conn.execute(
            t.delete().where(t.c.table_schema == table_schema, t.c.table_name == table_name)
        )
