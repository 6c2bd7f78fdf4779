"""What every engine offers gpcnn; subclasses differ only in DDL, settings and dispatch.

Statements use one parameter style, SQLAlchemy's ``:name`` (``CAST(:x AS integer[])`` where a
type is needed); the segment sessions compile them for the driver. Identifiers are quoted here
(``quote``, ``TableName.sql``) and nowhere else.

Dispatch — how one iteration reaches the segments:
- ``"sessions"`` (PostgreSQL's default): one session per segment, each runs the statement for its
  keys, all at once (K segments use K cores); the K states are merged by one more statement.
- ``"statement"`` (Greenplum's only way): one statement for all keys in one session, ``GROUP BY``
  key with the merge on top. ``connect(dispatch="statement")`` runs PostgreSQL this way, so the
  suite exercises Greenplum's path: the same statement text, bookkeeping and decoding.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import ClassVar

import sqlalchemy as sa

from .sessions import SegmentSessions

DISPATCHES = (None, "sessions", "statement")


def text_safe(sql: str) -> str:
    """Quoted identifiers inside a ``:name`` statement: a colon in a name is not a parameter."""
    return sql.replace(":", "\\:")


class Backend:
    """An engine gpcnn runs on, bound to a SQLAlchemy engine, gpcnn's schema and a dispatch."""

    kind: ClassVar[str] = "abstract"
    native_dispatch: ClassVar[str] = "sessions"

    def __init__(self, engine: sa.Engine, schema: str = "gpcnn", dispatch: str | None = None):
        if dispatch not in DISPATCHES:
            raise ValueError(f"dispatch={dispatch!r}: choose one of {DISPATCHES}")
        self.engine = engine
        self.schema = schema
        self.dispatch = dispatch or self.native_dispatch

    def quote(self, identifier: str) -> str:
        return self.engine.dialect.identifier_preparer.quote(identifier)

    @property
    def qschema(self) -> str:
        return self.quote(self.schema)

    def server_version(self) -> str:
        with self.engine.connect() as conn:
            return conn.execute(sa.text("SELECT version()")).scalar()

    def server_version_num(self) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(sa.text("SHOW server_version_num")).scalar())

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

    def choose_keys(self, conn: sa.Connection, segments: int) -> list[int]:
        """The ``__dist_key__`` values of a new table of ``segments`` segments."""
        raise NotImplementedError

    def image_table_ddl(self, table, keys: list[int]) -> list[str]:
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

    def ensure_schema(self, conn: sa.Connection, schema: str) -> None:
        """Create the schema if missing, under a lock on its name until the transaction ends:
        two sessions creating it at once would otherwise collide on pg_namespace's unique index
        (``IF NOT EXISTS`` does not see the other's uncommitted schema)."""
        exists = sa.text("SELECT 1 FROM pg_namespace WHERE nspname = :s")
        if conn.execute(exists, {"s": schema}).scalar() is None:
            self.lock_name(conn, f"schema {schema}")
            # Asked again under the lock: the other session may have committed the schema while
            # this one waited, and CREATE ... IF NOT EXISTS may not see that yet (its catalog
            # cache is not refreshed by an advisory lock); a new query does.
            if conn.execute(exists, {"s": schema}).scalar() is None:
                conn.exec_driver_sql(self.create_schema_ddl(schema))

    def drop_schema_ddl(self, schema: str) -> str:
        return f"DROP SCHEMA IF EXISTS {self.quote(schema)}"

    def lock_name(self, conn: sa.Connection, name: str) -> None:
        """Serialise loads of one table name until the transaction ends."""
        conn.execute(sa.select(sa.func.pg_advisory_xact_lock(sa.func.hashtext(name))))

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

    session_settings: ClassVar[tuple[str, ...]] = ()

    @property
    def per_segment_sessions(self) -> bool:
        return self.dispatch == "sessions"

    def open_sessions(self, segments: int, threads: int = 0) -> SegmentSessions:
        """Sessions for the iterations of a fit of ``segments`` keys whose segment processes run
        ``threads`` TF threads: one per segment, or one for all (``"statement"``)."""
        count = segments if self.per_segment_sessions else 1
        return SegmentSessions(self.engine, count, self.session_settings, threads)

    def session_groups(self, keys: Sequence[int], sessions: int) -> list[list[int]]:
        """Which keys each session handles: one statement per group, run concurrently."""
        if not self.per_segment_sessions:
            return [[int(k) for k in keys]]
        count = min(len(keys), sessions)
        return [[int(k) for k in keys[i::count]] for i in range(count)]

    def default_threads(self, segments: int) -> int:
        """TensorFlow threads per segment process when the user sets none."""
        raise NotImplementedError

    def training_sql(self, table_sql: str, outer: str | None, per_segment: bool = False) -> str:
        """Shape (b) of docs/design.md: each key's buffers of the slice, in a fixed order, through
        the ``train`` aggregate; ``outer`` = "merge" adds and finalises the K states, "final"
        finalises each key's state, None returns the raw states. With ``per_segment``, each key
        starts from its own model and optimizer state in ``segment_models`` (joined by key: on
        Greenplum both tables are distributed by it, so no motion), else from ``:weights``."""
        s, table_sql = text_safe(self.qschema), text_safe(table_sql)
        start, join = ":weights, :optimizer", ""
        if per_segment:
            start = "m.weights, m.optimizer"
            join = (
                f"JOIN {s}.segment_models m ON m.run_id = :run_id "
                "AND m.__dist_key__ = t.__dist_key__ "
            )
        inner = (
            f"SELECT t.__dist_key__ AS key, {s}.train(t.__dist_key__, t.x, t.y, t.n, :model, "
            f":options, {start}, p.expected ORDER BY e.epoch, t.buffer_id) AS state "
            f"FROM {table_sql} t {join}"
            "JOIN unnest(CAST(:keys AS integer[]), CAST(:first AS integer[]), "
            "CAST(:stop AS integer[]), CAST(:expected AS bigint[])) "
            "AS p(key, first_buffer, stop_buffer, expected) "
            "ON t.__dist_key__ = p.key AND t.buffer_id >= p.first_buffer "
            "AND t.buffer_id < p.stop_buffer "
            "CROSS JOIN generate_series(1, :epochs) AS e(epoch) "
            "WHERE t.__dist_key__ = ANY(CAST(:group AS integer[])) "
            "GROUP BY t.__dist_key__"
        )
        return self._outer(inner, outer)

    def evaluation_sql(self, table_sql: str, outer: str | None) -> str:
        s, table_sql = text_safe(self.qschema), text_safe(table_sql)
        inner = (
            f"SELECT t.__dist_key__ AS key, {s}.evaluate(t.x, t.y, t.n, :model, :options, "
            f":weights) AS state FROM {table_sql} t "
            "WHERE t.__dist_key__ = ANY(CAST(:group AS integer[])) GROUP BY t.__dist_key__"
        )
        return self._outer(inner, outer)

    def prediction_sql(self, table_sql: str) -> str:
        return (
            f"SELECT t.buffer_id, {text_safe(self.qschema)}.predict(t.x, t.n, :model, :options, "
            f":weights) FROM {text_safe(table_sql)} t WHERE t.__dist_key__ = ANY(CAST(:group AS integer[]))"
        )

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
        """Predictions of one group of keys, computed where the rows are (``predict_rows`` in the
        select list of a subquery, so it runs once per buffer) and inserted without leaving the
        server; ``:names`` are the class names, indexed by class value."""
        columns = self.PREDICTION_COLUMNS[pred_type]
        value = {"class_name": "(CAST(:names AS text[]))[(r.p).class_value + 1]"}
        selected = ", ".join(value.get(c, f"(r.p).{c}") for c in columns)
        return (
            f"INSERT INTO {text_safe(target_sql)} ({', '.join(columns)}) SELECT {selected} FROM "
            f"(SELECT {text_safe(self.qschema)}.predict_rows(t.x, t.n, t.ids, :model, :options, "
            f":weights, :top_k) AS p FROM {text_safe(source_sql)} t "
            "WHERE t.__dist_key__ = ANY(CAST(:group AS integer[]))) r"
        )

    def run_statement(self, sessions: SegmentSessions, sql: str, params: dict, keys) -> None:
        """A statement without results (an INSERT) for every group of keys, concurrently."""
        self._per_group(sessions, sql, params, keys)

    def merge_sql(self) -> str:
        s = text_safe(self.qschema)
        return f"SELECT {s}.merge(s) FROM unnest(CAST(:states AS bytea[])) AS s"

    def _outer(self, inner: str, outer: str | None) -> str:
        s = text_safe(self.qschema)
        if outer == "merge":
            return f"SELECT {s}.merge(q.state) FROM ({inner}) q"
        if outer == "final":
            return f"SELECT q.key, {s}.final_state(q.state) FROM ({inner}) q"
        return inner

    def _per_group(self, sessions: SegmentSessions, sql: str, params: dict, keys) -> list[tuple]:
        groups = self.session_groups(keys, len(sessions))
        rows = sessions.map(sql, [{**params, "group": group} for group in groups])
        return [row for group_rows in rows for row in group_rows]

    def run_aggregate(
        self,
        sessions: SegmentSessions,
        kind: str,
        table_sql: str,
        params: dict,
        keys,
        merged: bool,
        per_segment: bool = False,
    ) -> bytes | dict[int, bytes]:
        """One iteration's training (``kind="train"``) or an evaluation (``"evaluate"``): the merged
        final value, or each key's final value when ``merged`` is False."""
        if kind == "train":

            def build(outer):
                return self.training_sql(table_sql, outer, per_segment)
        else:

            def build(outer):
                return self.evaluation_sql(table_sql, outer)

        groups = self.session_groups(keys, len(sessions))
        if len(groups) == 1:  # one statement does it all ("statement" dispatch, or one segment)
            rows = sessions.one(
                build("merge" if merged else "final"), {**params, "group": groups[0]}
            )
            return bytes(rows[0][0]) if merged else {k: bytes(v) for k, v in rows}
        if not merged:
            rows = self._per_group(sessions, build("final"), params, keys)
            return {k: bytes(v) for k, v in rows}
        states = [state for _, state in self._per_group(sessions, build(None), params, keys)]
        return bytes(sessions.one(self.merge_sql(), {"states": states})[0][0])

    def run_prediction(
        self, sessions: SegmentSessions, table_sql: str, params: dict, keys
    ) -> list[tuple[int, bytes]]:
        """(buffer_id, probabilities) of every buffer, in buffer order."""
        rows = self._per_group(sessions, self.prediction_sql(table_sql), params, keys)
        return sorted(((int(b), bytes(p)) for b, p in rows), key=lambda r: r[0])
