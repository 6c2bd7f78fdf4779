"""Table names: parse ``[schema.]table`` as SQL reads it, check its length, quote it for a backend.

Quoting itself is ``Backend.quote`` (the dialect's); this module only splits and joins names, so
no user text reaches a statement unquoted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

STAGING_SUFFIX = "__gpcnn_staging"
IDENTIFIER_BYTES = 63  # PostgreSQL's limit (NAMEDATALEN - 1): a longer name is silently cut
# A name leaves room for the staging suffix and a partition's within the 63-byte limit.
MAX_NAME_BYTES = IDENTIFIER_BYTES - len(STAGING_SUFFIX) - len("__seg9999")


class Quoting(Protocol):
    """What naming a table needs of a backend: its quoting, and the schema that a name without
    one means (``Backend.default_schema``)."""

    @property
    def default_schema(self) -> str | None: ...

    def quote(self, name: str) -> str: ...


class TableError(ValueError):
    """Bad input for an image table, or a table that is not a gpcnn image table.

    A ``ValueError``: raised before anything is written, by ``load_images``, ``pack_table``,
    ``describe_table``, ``drop_table`` and the fits that read a table, with a message that names
    the table and what to do.

    Examples
    --------
    >>> gpcnn.describe_table(db, "public.not_images")  # doctest: +SKIP
    Traceback (most recent call last):
    TableError: public.not_images is not a gpcnn image table (no entry in gpcnn.image_tables): ...
    """


@dataclass(frozen=True)
class TableName:
    """A table's schema (None: the connection's current schema) and name, both unquoted."""

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
            return cls(*(_checked_part(p, table) for p in table))
        if not isinstance(table, str):
            raise TableError(
                f"expected a table name, got {type(table).__name__}: load arrays into a table "
                "first with gpcnn.load_images(engine, table, x, y)"
            )
        parts = [_checked_part(p, table) for p in _split_identifier(table)]
        if len(parts) == 1:
            return cls(None, parts[0])
        if len(parts) == 2:
            return cls(parts[0], parts[1])
        raise TableError(f"{table!r}: expected [schema.]table")

    def sql(self, backend: Quoting) -> str:
        """The name quoted for ``backend``, always with its schema (``qualified``)."""
        return f"{backend.quote(self._schema_for(backend))}.{backend.quote(self.name)}"

    def qualified(self, backend: Quoting) -> TableName:
        """The name with its schema: the user's default schema (``Backend.default_schema``) when
        it was given without one, as PostgreSQL would read it under the user's search path."""
        if self.schema is not None:
            return self
        return TableName(self._schema_for(backend), self.name)

    def _schema_for(self, backend: Quoting) -> str:
        """The schema ``qualified`` gives the name."""
        if self.schema is not None:
            return self.schema
        schema = backend.default_schema
        if schema is None:
            raise TableError(
                f"{self.name!r} names no schema, and your search_path holds no schema that "
                "exists: write it as schema.table"
            )
        return schema

    def with_suffix(self, suffix: str) -> TableName:
        return TableName(self.schema, self.name + suffix)

    def __str__(self) -> str:
        return f"{self.schema}.{self.name}" if self.schema else self.name


def checked_name(table) -> TableName:
    """The parsed name of a table gpcnn will create: short enough for its suffixes."""
    name = TableName.parse(table)
    if len(name.name.encode()) > MAX_NAME_BYTES:
        raise TableError(
            f"table name {name.name!r} is longer than {MAX_NAME_BYTES} bytes: gpcnn appends "
            "suffixes for staging and partitions within PostgreSQL's 63-byte identifier limit"
        )
    return name


def _checked_part(part: str, table: object) -> str:
    """One identifier as PostgreSQL and the driver can take it: no NUL byte, no ``%`` (quoted
    names reach psycopg2 with and without its ``%%`` escape, so "a%b" would be created as one
    table and copied into as another), valid UTF-8, at most 63 bytes (the server would cut a
    longer one to another name without an error)."""
    if "\x00" in part:
        raise TableError(f"{table!r}: a name cannot hold a NUL byte")
    if "%" in part:  # psycopg2's parameter marker: some statements would name another table
        raise TableError(f"{table!r}: a name cannot hold '%' (the driver's parameter marker)")
    try:
        size = len(part.encode())
    except UnicodeEncodeError:
        raise TableError(
            f"{table!r}: {part!r} is not valid Unicode text (a lone surrogate)"
        ) from None
    if size > IDENTIFIER_BYTES:
        raise TableError(
            f"{table!r}: {part!r} is {size} bytes, longer than PostgreSQL's {IDENTIFIER_BYTES}-byte "
            "identifier limit (the server would silently cut it to another name)"
        )
    return part


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
