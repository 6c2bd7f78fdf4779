"""The statements of ``pack_table``: an existing table of images becomes a gpcnn image table
without the images leaving the server.

The source has one row per image: an integer id, the pixels (``real[]``, ``double precision[]``,
``smallint[]``, ``integer[]`` in H×W×C order, or ``bytea`` of uint8) and a label of any type. The
checks name the first bad row by its id; the fill is one INSERT … SELECT that orders the rows by
id, deals them to buffers in the order the client sends (as ``load_images`` deals arrays; a row
dealt twice is in two buffers), and packs each buffer with ``pixel_bytes`` / ``little_endian`` on
the segments. Arrays travel to PL/Python in their in-memory form (``array_bytes``), which numpy
reads as it is: PL/Python's own conversion makes a Python object of every number.
"""

from __future__ import annotations

import math

import numpy as np
import sqlalchemy as sa

from gpcnn.engines.backend import Backend
from gpcnn.engines.compiler import text_safe

ARRAY_TYPES = ("real[]", "double precision[]", "smallint[]", "integer[]")
IMAGE_TYPES = (*ARRAY_TYPES, "bytea")
ID_TYPES = ("smallint", "integer", "bigint")
ITEM_BYTES = {"real[]": 4, "double precision[]": 8, "smallint[]": 2, "integer[]": 4}
GROUP_BYTES = 1 << 26  # images per call of the range check: about 64 MB of numbers
# Per statement: the sorts of whole rows stay in memory (JIT is off on every connection gpcnn
# opens: ``sessions.SERVER_OPTIONS``).
SETTINGS = "SELECT set_config('work_mem', '256MB', true)"


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
        self.x_type = x_type
        self.is_array = x_type in ARRAY_TYPES

    def _length(self) -> str:
        return f"cardinality({self.x})" if self.is_array else f"octet_length({self.x})"

    def summary(self, conn: sa.Connection) -> tuple[int, int, int, int | None, int | None]:
        """(rows, distinct ids, NULL ids, the smallest id of a NULL image, of a NULL label: None
        when none is), in one scan."""
        sql = (
            f"SELECT count(*), count(DISTINCT {self.id}), count(*) - count({self.id}), "
            f"min({self.id}) FILTER (WHERE {self.x} IS NULL), "
            f"min({self.id}) FILTER (WHERE {self.y} IS NULL) FROM {self.source}"
        )
        total, distinct, nulls, image, label = conn.execute(sa.text(sql)).one()
        return int(total), int(distinct), int(nulls), image, label

    def duplicate_id(self, conn: sa.Connection):
        """The smallest id that appears more than once."""
        sql = (
            f"SELECT {self.id} FROM {self.source} GROUP BY {self.id} HAVING count(*) > 1 "
            f"ORDER BY {self.id} LIMIT 1"
        )
        return conn.execute(sa.text(sql)).scalar()

    def lengths(self, conn: sa.Connection) -> list[tuple]:
        """Two of the distinct image lengths, with the smallest id of each."""
        sql = (
            f"SELECT {self._length()}, min({self.id}) FROM {self.source} "
            f"GROUP BY 1 ORDER BY 2 LIMIT 2"
        )
        return [tuple(r) for r in conn.execute(sa.text(sql)).all()]

    def first_out_of_range(self, conn: sa.Connection, count: int, length: int, top: float):
        """The id of the first row with a value outside [0, top], NaN or NULL included: numpy
        checks groups of rows (by a hash of the id), a NULL element is found here."""
        s = text_safe(self.backend.qschema)
        groups = math.ceil(count * length * ITEM_BYTES[self.x_type] / GROUP_BYTES)
        sql = (
            f"SELECT min(g.bad) FROM (SELECT least(min(r.id) FILTER (WHERE r.holes), "
            f"{s}.first_out_of_range(string_agg(int8send(r.id) || {s}.array_bytes(r.x), "
            "''::bytea) FILTER (WHERE NOT r.holes), CAST(count(*) FILTER (WHERE NOT r.holes) "
            "AS integer), :length, :top)) "
            f"AS bad FROM (SELECT CAST({self.id} AS bigint) AS id, {self.x} AS x, "
            f"array_position({self.x}, NULL) IS NOT NULL AS holes FROM {self.source}) r "
            "GROUP BY abs(hashint8(r.id) % :groups)) g"
        )
        conn.execute(sa.text(SETTINGS))
        params = {"length": length, "top": top, "groups": groups}
        return conn.execute(sa.text(sql), params).scalar()

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

    def groups(self, conn: sa.Connection, column: str) -> list[int]:
        """Each row's group by its value of ``column`` (0..G-1 in the value's order, NULLs one
        group), in id order: one array, not a row per image."""
        conn.execute(sa.text(SETTINGS))
        by = text_safe(self.backend.quote(column))
        sql = (
            f"SELECT array_agg(g.rank - 1 ORDER BY g.id) FROM (SELECT {self.id} AS id, "
            f"dense_rank() OVER (ORDER BY {by}) AS rank FROM {self.source}) g"
        )
        return conn.execute(sa.text(sql)).scalar_one()

    def fill(self, conn: sa.Connection, target_sql: str, params: dict) -> None:
        """Buffers into ``target``: the i-th image dealt is the row at ``:position[i]`` (0-based,
        in id order; every row at least once, some more: a shared sample), into the buffer
        ``:buffer_id[i]`` of ``:key[i]``; ``:length`` numbers an image."""
        conn.execute(sa.text(SETTINGS))
        position = np.asarray(params["position"])
        dealt = {k: np.asarray(params[k]) for k in ("key", "buffer_id")}
        _, first = np.unique(position, return_index=True)  # each row's first deal, by position
        again = np.setdiff1d(np.arange(len(position)), first)
        lists = {  # by position, as the rows are numbered: no join needed for the first deals
            "rank": first.tolist(),
            **{k: v[first].tolist() for k, v in dealt.items()},
        }
        if len(again):  # and the deals after the first, joined by position
            lists |= {
                "again_position": (position[again] + 1).tolist(),
                "again_rank": again.tolist(),
                **{f"again_{k}": v[again].tolist() for k, v in dealt.items()},
            }
        sql = self._fill_sql(target_sql, again=bool(len(again)))
        bound = {k: _array_literal(v) for k, v in lists.items()}
        conn.execute(sa.text(sql), {**params, **bound})

    def _fill_sql(self, target_sql: str, again: bool = False) -> str:
        s = text_safe(self.backend.qschema)
        n = "CAST(count(*) AS integer)"
        pixels = (  # one call per buffer on its images' in-memory forms
            f"{s}.pixel_bytes({_ranked(f'{s}.array_bytes(r.x)')}, {n}, :length, :normalized)"
            if self.is_array
            else f"{s}.image_bytes({_ranked('r.x')}, {n})"
        )
        label = "array_position(CAST(:values AS text[]), CAST(r.y AS text)) - 1"
        numbered = (
            f"(SELECT {self.id} AS id, row_number() OVER (ORDER BY {self.id}) AS pos "
            f"FROM {self.source}) o"
        )
        deals = (
            "SELECT o.id, (CAST(:rank AS bigint[]))[o.pos] AS rank, "
            "(CAST(:key AS integer[]))[o.pos] AS key, "
            f"(CAST(:buffer_id AS integer[]))[o.pos] AS buffer_id FROM {numbered}"
        )
        if again:
            deals += (
                f" UNION ALL SELECT o.id, a.rank, a.key, a.buffer_id FROM {numbered} "
                "JOIN unnest(CAST(:again_position AS bigint[]), CAST(:again_rank AS bigint[]), "
                "CAST(:again_key AS integer[]), CAST(:again_buffer_id AS integer[])) "
                "AS a(pos, rank, key, buffer_id) ON a.pos = o.pos"
            )
        return (  # each dealt image's buffer and rank first, then the whole rows, by buffer
            f"INSERT INTO {text_safe(target_sql)} (__dist_key__, buffer_id, n, x, y, ids) "
            f"SELECT d.key, d.buffer_id, count(*), {pixels}, "
            f"{s}.little_endian({_ranked(f'int8send(CAST({label} AS bigint))')}, {n}, 4), "
            f"{s}.little_endian({_ranked('int8send(CAST(r.id AS bigint))')}, {n}, 8) "
            f"FROM (SELECT {self.id} AS id, {self.x} AS x, {self.y} AS y FROM {self.source}) r "
            f"JOIN ({deals}) d ON d.id = r.id GROUP BY d.key, d.buffer_id"
        )


def _ranked(value_sql: str) -> str:
    """A buffer's values, each after its rank, in one bytea: the kernel puts them in rank order,
    so the aggregate need not sort (and the buffers may be hashed)."""
    return f"string_agg(int8send(d.rank) || {value_sql}, ''::bytea)"


def _array_literal(values) -> str:
    """Integers as one array literal, bound as text: a bound list becomes ``ARRAY[...]`` of one
    constant per element, which the server parses and plans one by one (0.2 s for 60,000)."""
    return "{" + ",".join(map(str, values)) + "}"


def little_endian_sql(value: str, index: str, width: int, *, top: int | None = None) -> str:
    """The ``index``-th little-endian integer of ``width`` bytes in the bytea ``value``, in SQL;
    ``top``: only the bytes that an integer below it uses (labels below the class count)."""
    used = width if top is None else max(1, (max(top - 1, 1).bit_length() + 7) // 8)
    cast = "CAST({} AS bigint)" if width > 4 else "{}"
    return " | ".join(
        f"({cast.format(f'get_byte({value}, {width} * {index} + {j})')} << {8 * j})"
        for j in range(used)
    )


def layout(conn: sa.Connection, table_sql: str) -> dict[int, list[int]]:
    """Each key's images of an image table, as positions in id order (0-based), in the order
    the key trains them (buffer by buffer)."""
    sql = (
        "SELECT r.key, array_agg(r.pos - 1 ORDER BY r.buffer_id, r.i) FROM (SELECT u.key, "
        "u.buffer_id, u.i, row_number() OVER (ORDER BY u.id) AS pos FROM (SELECT b.key, "
        f"b.buffer_id, g.i, {little_endian_sql('b.ids', 'g.i', 8)} AS id "
        "FROM (SELECT __dist_key__ AS key, buffer_id, n, ids || ''::bytea AS ids "
        f"FROM {text_safe(table_sql)} OFFSET 0) b CROSS JOIN LATERAL generate_series(0, b.n - 1) "
        "AS g(i) OFFSET 0) u) r GROUP BY r.key"
    )
    conn.execute(sa.text(SETTINGS))
    return {int(key): list(positions) for key, positions in conn.execute(sa.text(sql))}


def image_rows_sql(table_sql: str, image_bytes: int) -> str:
    """An image table as a source of one row per image (``id``, ``x`` bytea, ``y`` the class),
    for ``PackingSource``: each buffer's columns copied once, so that the reads that follow see
    plain values rather than a TOAST pointer fetched again for every image; both levels fenced
    (``OFFSET 0``), so that no plan carries a whole buffer per image into a sort."""
    return (
        f"(SELECT {little_endian_sql('b.ids', 'g.i', 8)} AS id, "
        f"substring(b.x FROM g.i * {int(image_bytes)} + 1 FOR {int(image_bytes)}) AS x, "
        f"{little_endian_sql('b.y', 'g.i', 4)} AS y "
        f"FROM (SELECT n, x || ''::bytea AS x, y || ''::bytea AS y, ids || ''::bytea AS ids "
        f"FROM {table_sql} OFFSET 0) b CROSS JOIN LATERAL generate_series(0, b.n - 1) AS g(i) "
        "OFFSET 0) AS images"
    )
