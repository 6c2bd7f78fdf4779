"""What every engine offers gpcnn; subclasses differ only in DDL, settings and dispatch."""

from __future__ import annotations

import json
from typing import ClassVar

import sqlalchemy as sa


class Backend:
    """An engine gpcnn runs on, bound to a SQLAlchemy engine and gpcnn's schema."""

    kind: ClassVar[str] = "abstract"

    def __init__(self, engine: sa.Engine, schema: str = "gpcnn") -> None:
        self.engine = engine
        self.schema = schema

    def quote(self, identifier: str) -> str:
        return self.engine.dialect.identifier_preparer.quote(identifier)

    @property
    def qschema(self) -> str:
        return self.quote(self.schema)

    def server_version(self) -> str:
        with self.engine.connect() as conn:
            return conn.execute(sa.text("SELECT version()")).scalar()

    def default_segments(self) -> int:
        """K when the user gives none."""
        raise NotImplementedError

    def probe_segments(self, threads: int | None = None) -> list[dict]:
        """The environment probe's JSON, once per segment (a segment id added to each)."""
        raise NotImplementedError

    @staticmethod
    def _decode_probes(rows) -> list[dict]:
        return [{"segment": segment, **json.loads(text)} for segment, text in rows]

    # -- image tables (``table`` arguments are gpcnn.tables.TableName) -------------------------

    IMAGE_COLUMNS: ClassVar[str] = (
        "__dist_key__ integer NOT NULL, buffer_id integer NOT NULL, n integer NOT NULL, "
        "x bytea NOT NULL, y bytea NOT NULL"
    )
    # Images barely compress: EXTERNAL (out of line, uncompressed) made COPY ~10x faster.
    EXTERNAL_STORAGE: ClassVar[str] = (
        "ALTER COLUMN x SET STORAGE EXTERNAL, ALTER COLUMN y SET STORAGE EXTERNAL"
    )

    def catalog_suffix(self) -> str:
        """What follows ``CREATE TABLE gpcnn.image_tables (...)``."""
        return ""

    def choose_keys(self, conn: sa.Connection, segments: int) -> list[int]:
        """The ``__dist_key__`` values of a new table of ``segments`` segments."""
        raise NotImplementedError

    def image_table_ddl(self, table, keys: list[int]) -> list[str]:
        raise NotImplementedError

    def rename_ddl(self, staging, table, keys: list[int]) -> list[str]:
        """Statements that give the staging table (and its parts) the final name."""
        return [f"ALTER TABLE {staging.sql(self)} RENAME TO {self.quote(table.name)}"]
