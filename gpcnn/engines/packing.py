"""The statements of ``pack_table``: an existing table of images becomes a gpcnn image table
without the images leaving the server.

The source has one row per image: an integer id, the pixels (``real[]``, ``double precision[]``,
``smallint[]``, ``integer[]`` in H×W×C order, or ``bytea`` of uint8) and a label of any type. The
checks name the first bad row by its id; the fill is one INSERT … SELECT that orders the rows by
id, deals them to buffers by a permutation the client sends (as ``load_images`` deals arrays), and
packs each buffer with ``pixel_bytes`` / ``little_endian`` on the segments.
"""

from __future__ import annotations

import sqlalchemy as sa

from gpcnn.engines.base import Backend, text_safe

ARRAY_TYPES = ("real[]", "double precision[]", "smallint[]", "integer[]")
IMAGE_TYPES = (*ARRAY_TYPES, "bytea")
ID_TYPES = ("smallint", "integer", "bigint")


def column_types(conn: sa.Connection, qualified_sql: str) -> dict[str, str]:
    """Each column of a table and its type, as ``format_type`` spells it."""
    rows = conn.execute(
        sa.text(
            "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = to_regclass(:t) AND attnum > 0 AND NOT attisdropped ORDER BY attnum"
        ),
        {"t": qualified_sql},
    )
    return dict(rows.all())


class PackingSource:
    """The statements over one source table and its three columns (quoted here), each run on the
    connection it is given and returning plain values."""

    def __init__(self, backend: Backend, source_sql: str, x: str, y: str, id_: str, x_type: str):
        self.backend = backend
        self.source = text_safe(source_sql)
        self.x, self.y, self.id = (text_safe(backend.quote(c)) for c in (x, y, id_))
        self.is_array = x_type in ARRAY_TYPES

    def _length(self) -> str:
        return f"cardinality({self.x})" if self.is_array else f"octet_length({self.x})"

    def counts(self, conn: sa.Connection) -> tuple[int, int]:
        """(rows, distinct ids)."""
        sql = f"SELECT count(*), count(DISTINCT {self.id}) FROM {self.source}"
        total, distinct = conn.execute(sa.text(sql)).one()
        return int(total), int(distinct)

    def null_ids(self, conn: sa.Connection) -> int:
        sql = f"SELECT count(*) FROM {self.source} WHERE {self.id} IS NULL"
        return int(conn.execute(sa.text(sql)).scalar())

    def duplicate_id(self, conn: sa.Connection):
        """The smallest id that appears more than once."""
        sql = (
            f"SELECT {self.id} FROM {self.source} GROUP BY {self.id} HAVING count(*) > 1 "
            f"ORDER BY {self.id} LIMIT 1"
        )
        return conn.execute(sa.text(sql)).scalar()

    def first_null(self, conn: sa.Connection) -> tuple | None:
        """(id, whether the images are the NULL) of the first row with a NULL image or label."""
        sql = (
            f"SELECT {self.id}, {self.x} IS NULL FROM {self.source} "
            f"WHERE {self.x} IS NULL OR {self.y} IS NULL ORDER BY {self.id} LIMIT 1"
        )
        return conn.execute(sa.text(sql)).first()

    def lengths(self, conn: sa.Connection) -> list[tuple]:
        """Two of the distinct image lengths, with the smallest id of each."""
        sql = (
            f"SELECT {self._length()}, min({self.id}) FROM {self.source} "
            f"GROUP BY 1 ORDER BY 2 LIMIT 2"
        )
        return [tuple(r) for r in conn.execute(sa.text(sql)).all()]

    def first_out_of_range(self, conn: sa.Connection, top: float):
        """The id of the first row with a value outside [0, top] (NaN included: it sorts above
        all)."""
        sql = (
            f"SELECT {self.id} FROM {self.source} WHERE EXISTS (SELECT 1 FROM unnest({self.x}) v "
            "WHERE v IS NULL OR v < 0 OR v > :top) ORDER BY 1 LIMIT 1"
        )
        return conn.execute(sa.text(sql), {"top": top}).scalar()

    def class_values(self, conn: sa.Connection) -> list[str]:
        """The distinct labels in their type's order, as text (MADlib's class values)."""
        sql = (
            f"SELECT CAST(d.v AS text) AS value FROM (SELECT DISTINCT {self.y} AS v "
            f"FROM {self.source}) d ORDER BY d.v"
        )
        return list(conn.execute(sa.text(sql)).scalars())

    def first_unknown_label(self, conn: sa.Connection, values: list[str]) -> tuple | None:
        """(id, label) of the first row whose label is not one of ``values``."""
        sql = (
            f"SELECT {self.id}, CAST({self.y} AS text) FROM {self.source} "
            f"WHERE NOT (CAST({self.y} AS text) = ANY(CAST(:values AS text[]))) "
            f"ORDER BY {self.id} LIMIT 1"
        )
        return conn.execute(sa.text(sql), {"values": values}).first()

    def fill(self, conn: sa.Connection, target_sql: str, params: dict) -> None:
        """Buffers into ``target``: row ``pos`` (0-based, in id order) is the ``rank``-th image
        dealt (``:order`` lists the positions by rank) into buffer ``:buffer_of[rank]``, and
        ``:keys`` / ``:buffer_ids`` give each buffer's key and id."""
        conn.execute(sa.text(self._fill_sql(target_sql)), params)

    def _fill_sql(self, target_sql: str) -> str:
        s = text_safe(self.backend.qschema)
        pixels = (  # arrays: one call per buffer on the buffer's images as an N×L array
            f"{s}.pixel_bytes(array_agg(CAST(r.x AS double precision[]) ORDER BY p.rank), "
            ":normalized)"
            if self.is_array
            else "string_agg(r.x, ''::bytea ORDER BY p.rank)"
        )
        return (
            f"INSERT INTO {text_safe(target_sql)} (__dist_key__, buffer_id, n, x, y, ids) "
            f"SELECT b.key, b.buffer_id, count(*), {pixels}, "
            f"{s}.little_endian(array_agg(CAST(array_position(CAST(:values AS text[]), "
            "CAST(r.y AS text)) - 1 AS bigint) ORDER BY p.rank), 4), "
            f"{s}.little_endian(array_agg(CAST(r.id AS bigint) ORDER BY p.rank), 8) "
            f"FROM (SELECT row_number() OVER (ORDER BY {self.id}) - 1 AS pos, {self.id} AS id, "
            f"{self.x} AS x, {self.y} AS y FROM {self.source}) r "
            "JOIN (SELECT u.pos, u.buffer, u.rank FROM unnest(CAST(:order AS bigint[]), "
            "CAST(:buffer_of AS integer[])) WITH ORDINALITY AS u(pos, buffer, rank)) p "
            "ON p.pos = r.pos "
            "JOIN (SELECT u.key, u.buffer_id, u.ordinality - 1 AS buffer FROM "
            "unnest(CAST(:keys AS integer[]), CAST(:buffer_ids AS integer[])) WITH ORDINALITY "
            "AS u(key, buffer_id, ordinality)) b ON b.buffer = p.buffer "
            "GROUP BY b.key, b.buffer_id"
        )
