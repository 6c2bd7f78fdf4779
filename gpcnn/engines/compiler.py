"""Statement text: every statement gpcnn sends an engine, built as strings and run elsewhere.

A ``Compiler`` needs only a SQL dialect (for quoting) and gpcnn's schema, never a connection, so
the statements can be checked offline (tests/test_sql.py). Each engine module subclasses it for
its DDL (``PostgresCompiler``, ``GreenplumCompiler``); its ``Backend`` runs what it builds.
Statements use one parameter style, SQLAlchemy's ``:name`` (``CAST(:x AS integer[])`` where a
type is needed); the segment sessions compile them for the driver. Identifiers are quoted here
(``quote``, ``TableName.sql``) and nowhere else.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import sqlalchemy as sa

from gpcnn.engines.transfers import EVERY_KEY

# A key's shard position (0-based order in the statement's ``:keys``, the table's ``dist_keys``):
# vectors and metrics are added in this order, so the sums do not depend on the key values.
SHARD_ORDER = "array_position(CAST(:keys AS integer[]), %s.key)"


def text_safe(sql: str) -> str:
    """Quoted identifiers inside a ``:name`` statement: a colon in a name is not a parameter."""
    return sql.replace(":", "\\:")


class Compiler:
    """The statements of one engine kind on gpcnn's ``schema``, quoted for ``dialect``."""

    kind: ClassVar[str] = "abstract"

    def __init__(self, dialect: sa.Dialect, schema: str = "gpcnn") -> None:
        self.dialect = dialect
        self.schema = schema

    def quote(self, identifier: str) -> str:
        return self.dialect.identifier_preparer.quote(identifier)

    @property
    def qschema(self) -> str:
        return self.quote(self.schema)

    # -- image tables (``table`` arguments are gpcnn.data.tables.TableName) -------------------------

    IMAGE_COLUMNS: ClassVar[str] = (
        "__dist_key__ integer NOT NULL, buffer_id integer NOT NULL, n integer NOT NULL, "
        "x bytea NOT NULL, y bytea NOT NULL, ids bytea NOT NULL"
    )
    COPY_COLUMNS: ClassVar[str] = "__dist_key__, buffer_id, n, x, y, ids"
    # Images barely compress: EXTERNAL (out of line, uncompressed) made COPY ~10x faster.
    EXTERNAL_STORAGE: ClassVar[str] = (
        "ALTER COLUMN x SET STORAGE EXTERNAL, ALTER COLUMN y SET STORAGE EXTERNAL"
    )
    partitioned: ClassVar[bool] = False  # one partition per segment (PostgreSQL's layout)

    def distribution(self, *columns: str) -> str:
        """What follows ``CREATE TABLE name (...)`` for gpcnn's own tables."""
        return ""

    def replicated(self) -> str:
        """What follows ``CREATE TABLE name (...)`` for a table every segment reads locally."""
        return ""

    def image_table_ddl(self, table, keys: list[int]) -> list[str]:
        """Statements that create an image table whose rows have the ``__dist_key__`` ``keys``."""
        raise NotImplementedError

    def rename_table_ddl(self, staging, table) -> str:
        return f"ALTER TABLE {staging.sql(self)} RENAME TO {self.quote(table.name)}"

    def rename_ddl(self, staging, table, keys: list[int]) -> list[str]:
        """Statements that give the staging image table (and its parts) the final name."""
        return [self.rename_table_ddl(staging, table)]

    def drop_ddl(self, table, if_exists: bool = False) -> str:
        """Drops an image table with its parts."""
        return f"DROP TABLE {'IF EXISTS ' if if_exists else ''}{table.sql(self)}"

    def create_schema_ddl(self, schema: str) -> str:
        return f"CREATE SCHEMA IF NOT EXISTS {self.quote(schema)}"

    def drop_schema_ddl(self, schema: str) -> str:
        return f"DROP SCHEMA IF EXISTS {self.quote(schema)}"

    def copy_sql(self, table) -> str:
        """The binary COPY into an image table (a driver-level statement: no parameters)."""
        return f"COPY {table.sql(self)} ({self.COPY_COLUMNS}) FROM STDIN WITH (FORMAT binary)"

    def buffers_sql(self, table) -> str:
        """Every buffer's (key, buffer_id, images), in training order."""
        return f"SELECT __dist_key__, buffer_id, n FROM {table.sql(self)} ORDER BY 1, 2"

    def read_sql(self, table, ids: bool = False) -> str:
        columns = "x, y, n, ids" if ids else "x, y, n"
        return f"SELECT {columns} FROM {table.sql(self)} ORDER BY buffer_id"

    # -- iterations (the queries; the same functions on every engine) --------------------------

    def training_sql(self, table_sql: str, outer: str | None, stored: bool = False) -> str:
        """Shape (b) of docs/design.md: each key's buffers of the slice, in a fixed order, through
        the ``train`` aggregate. The key's start vector (its own, or the one for every key) is
        joined from ``transfers`` to its first buffer of the first epoch, one row per chunk, so
        it reaches the aggregate first (on Greenplum ``transfers`` is replicated: a local join);
        ``stored``: from the run's checkpoint named by ``:start_run``/``:start_iteration``
        instead (a ``StoredStart``; on Greenplum broadcast to the segments). ``outer`` = "merge"
        merges the K trained vectors chunk by chunk in shard order (each key's position in
        ``:keys``, whatever the key values), None returns each key's chunks (``state_chunks``)."""
        s, table_sql = text_safe(self.qschema), text_safe(table_sql)
        inner = (
            f"SELECT t.__dist_key__ AS key, {s}.train(t.__dist_key__, c.chunk, c.data, t.x, t.y, "
            "t.n, :model, :options, p.expected "
            "ORDER BY e.epoch, t.buffer_id, c.chunk) AS state "
            f"FROM {table_sql} t "
            "JOIN unnest(CAST(:keys AS integer[]), CAST(:first AS integer[]), "
            "CAST(:stop AS integer[]), CAST(:expected AS bigint[])) "
            "AS p(key, first_buffer, stop_buffer, expected) "
            "ON t.__dist_key__ = p.key AND t.buffer_id >= p.first_buffer "
            "AND t.buffer_id < p.stop_buffer "
            "CROSS JOIN generate_series(1, :epochs) AS e(epoch) "
            f"LEFT JOIN {self._vectors_sql(stored)} "
            f"AND c.__dist_key__ IN ({EVERY_KEY}, t.__dist_key__) "
            "AND t.buffer_id = p.first_buffer AND e.epoch = 1 "
            "WHERE t.__dist_key__ = ANY(CAST(:group AS integer[])) "
            "GROUP BY t.__dist_key__"
        )
        # state_chunks in a select list streams its rows (a ProjectSet); in FROM, a function
        # scan would first write them all to a tuplestore, spilled to disk past work_mem.
        chunks = (
            "SELECT r.key, (r.c).chunk, (r.c).count, (r.c).data FROM "
            f"(SELECT q.key, {s}.state_chunks(q.state, :chunk_values) AS c FROM ({inner}) q) r"
        )
        if outer == "merge":
            order = SHARD_ORDER % "m"
            return (
                f"SELECT m.chunk, {s}.merge_chunks(m.chunk, m.count, m.data ORDER BY {order}) "
                f"FROM ({chunks}) m GROUP BY m.chunk"
            )
        return chunks

    def _vectors_sql(self, stored: bool) -> str:
        """The chunk rows a statement's vectors come from, as ``c``: the transfer ``:transfer``,
        or (``stored``) the ``weights`` checkpoint ``:start_run``/``:start_iteration``."""
        s = text_safe(self.qschema)
        if stored:
            return (
                f"{s}.checkpoints c ON c.run_id = :start_run AND c.iteration = :start_iteration "
                "AND c.part = 'weights'"
            )
        return f"{s}.transfers c ON c.transfer_id = :transfer"

    def evaluation_sql(self, table_sql: str, outer: str | None, stored: bool = False) -> str:
        """Each key's buffers through ``evaluate``, the weights joined to the key's first buffer
        as for training (from ``transfers``, or ``stored`` in a checkpoint); "merge" adds the K
        small states in shard order."""
        s = text_safe(self.qschema)
        inner = (
            f"SELECT t.__dist_key__ AS key, {s}.evaluate(t.__dist_key__, c.chunk, c.data, t.x, "
            "t.y, t.n, :model, :options ORDER BY t.buffer_id, c.chunk) AS state "
            f"{self._weighted_buffers_sql(table_sql, stored)} GROUP BY t.__dist_key__"
        )
        if outer == "merge":
            return f"SELECT {s}.merge(q.state ORDER BY {SHARD_ORDER % 'q'}) FROM ({inner}) q"
        return inner

    def _weighted_buffers_sql(self, table_sql: str, stored: bool = False) -> str:
        """FROM and WHERE of the group's buffers (``t``) with the one vector for every key joined
        to each key's first buffer, one row per chunk (``c``): how evaluation and prediction
        receive their weights, as training receives its start."""
        table_sql = text_safe(table_sql)
        return (
            f"FROM {table_sql} t "
            f"JOIN (SELECT __dist_key__ AS key, min(buffer_id) AS first_buffer FROM {table_sql} "
            "GROUP BY __dist_key__) p ON t.__dist_key__ = p.key "
            f"LEFT JOIN {self._vectors_sql(stored)} "
            f"AND c.__dist_key__ = {EVERY_KEY} AND t.buffer_id = p.first_buffer "
            "WHERE t.__dist_key__ = ANY(CAST(:group AS integer[]))"
        )

    def _predicted_sql(self, table_sql: str, column: str) -> str:
        """``column`` of each buffer of the group's keys and its class probabilities ``p``: the
        ``predict`` window runs over each key's buffers in order, the weights of transfer
        ``:transfer`` in chunks before the first (never one value: no size limit below
        training's); only a buffer's last row carries ``p``."""
        return (
            f"SELECT q.{column}, q.p FROM (SELECT t.{column}, "
            f"{text_safe(self.qschema)}.predict(t.__dist_key__, c.chunk, c.data, t.x, t.n, "
            ":model, :options) OVER (PARTITION BY t.__dist_key__ ORDER BY t.buffer_id, c.chunk "
            f"ROWS UNBOUNDED PRECEDING) AS p {self._weighted_buffers_sql(table_sql)}) q "
            "WHERE q.p IS NOT NULL"
        )

    def prediction_sql(self, table_sql: str) -> str:
        """(buffer_id, class probabilities) of every buffer of the group's keys."""
        return self._predicted_sql(table_sql, "buffer_id")

    # Output tables of predictions, MADlib's columns per pred_type.
    PREDICTION_COLUMNS: ClassVar[dict[str, tuple[str, ...]]] = {
        "response": ("id", "class_value", "class_name", "prob"),
        "prob": ("id", "class_value", "class_name", "prob"),
        "topk": ("id", "rank", "class_value", "class_name", "prob"),
    }
    _PREDICTION_TYPES: ClassVar[dict[str, str]] = {
        "id": "bigint NOT NULL",
        "rank": "integer NOT NULL",
        "class_value": "integer NOT NULL",
        "class_name": "text",
        "prob": "double precision NOT NULL",
    }

    def prediction_table_ddl(self, table, pred_type: str) -> str:
        columns = ", ".join(
            f"{c} {self._PREDICTION_TYPES[c]}" for c in self.PREDICTION_COLUMNS[pred_type]
        )
        return f"CREATE TABLE {table.sql(self)} ({columns}){self.distribution('id')}"

    def insert_predictions_sql(self, source_sql: str, target_sql: str, pred_type: str) -> str:
        """Predictions of one group of keys, computed where the rows are (``prediction_rows`` in
        the select list of a subquery, once per buffer) and inserted without leaving the server;
        ``:names`` are the class names, indexed by class value."""
        columns = self.PREDICTION_COLUMNS[pred_type]
        value = {"class_name": "(CAST(:names AS text[]))[(r.p).class_value + 1]"}
        selected = ", ".join(value.get(c, f"(r.p).{c}") for c in columns)
        return (
            f"INSERT INTO {text_safe(target_sql)} ({', '.join(columns)}) SELECT {selected} FROM "
            f"(SELECT {text_safe(self.qschema)}.prediction_rows(b.p, b.ids, :top_k) AS p FROM "
            f"({self._predicted_sql(source_sql, 'ids')}) b) r"
        )

    def chunk_copy_sql(self, table_sql: str, prefix: Sequence[str]) -> str:
        """The binary COPY of chunk rows (``*prefix, chunk, data``) into a chunked table."""
        columns = ", ".join([*prefix, "chunk", "data"])
        return f"COPY {table_sql} ({columns}) FROM STDIN WITH (FORMAT binary)"

    @staticmethod
    def copy_out_sql(query: str) -> str:
        """A query whose rows come back as binary COPY data: bytea as raw bytes, not hex text."""
        return f"COPY ({query}) TO STDOUT WITH (FORMAT binary)"
