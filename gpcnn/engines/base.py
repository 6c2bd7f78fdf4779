"""What every engine offers gpcnn; subclasses differ only in DDL, settings and dispatch."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import ClassVar

import sqlalchemy as sa

from .sessions import SegmentSessions


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

    def distribution(self, *columns: str) -> str:
        """What follows ``CREATE TABLE name (...)`` for gpcnn's own tables."""
        return ""

    def choose_keys(self, conn: sa.Connection, segments: int) -> list[int]:
        """The ``__dist_key__`` values of a new table of ``segments`` segments."""
        raise NotImplementedError

    def image_table_ddl(self, table, keys: list[int]) -> list[str]:
        raise NotImplementedError

    def rename_ddl(self, staging, table, keys: list[int]) -> list[str]:
        """Statements that give the staging table (and its parts) the final name."""
        return [f"ALTER TABLE {staging.sql(self)} RENAME TO {self.quote(table.name)}"]

    # -- iterations (the queries; the same functions on every engine) --------------------------

    session_settings: ClassVar[tuple[str, ...]] = ()

    def open_sessions(self, segments: int, threads: int = 0) -> SegmentSessions:
        """Sessions for the iterations of a fit whose segment processes run ``threads`` TF threads."""
        raise NotImplementedError

    def session_groups(self, keys: Sequence[int], sessions: int) -> list[list[int]]:
        """Which keys each session handles: one statement per group, run concurrently."""
        raise NotImplementedError

    def default_threads(self, segments: int) -> int:
        """TensorFlow threads per segment process when the user sets none."""
        raise NotImplementedError

    def training_sql(self, table_sql: str, outer: str | None, per_segment: bool = False) -> str:
        """Shape (b) of DESIGN.md: each key's buffers of the slice, in a fixed order, through the
        ``train`` aggregate; ``outer`` = "merge" adds and finalises the K states, "final" finalises
        each key's state, None returns the raw states. With ``per_segment``, each key starts from
        its own model and optimizer state in ``segment_models`` (joined by key: on Greenplum both
        tables are distributed by it, so no motion), else from the ``weights`` parameter."""
        s = self.qschema
        start, join = "%(weights)s, %(optimizer)s", ""
        if per_segment:
            start = "m.weights, m.optimizer"
            join = (
                f"JOIN {s}.segment_models m ON m.run_id = %(run_id)s "
                "AND m.__dist_key__ = t.__dist_key__ "
            )
        inner = (
            f"SELECT t.__dist_key__ AS key, {s}.train(t.__dist_key__, t.x, t.y, t.n, %(model)s, "
            f"%(options)s, {start}, p.expected ORDER BY e.epoch, t.buffer_id) AS state "
            f"FROM {table_sql} t {join}"
            "JOIN unnest(%(keys)s::integer[], %(first)s::integer[], %(stop)s::integer[], "
            "%(expected)s::bigint[]) AS p(key, first_buffer, stop_buffer, expected) "
            "ON t.__dist_key__ = p.key AND t.buffer_id >= p.first_buffer "
            "AND t.buffer_id < p.stop_buffer "
            "CROSS JOIN generate_series(1, %(epochs)s) AS e(epoch) "
            "WHERE t.__dist_key__ = ANY(%(group)s::integer[]) "
            "GROUP BY t.__dist_key__"
        )
        return self._outer(inner, outer)

    def evaluation_sql(self, table_sql: str, outer: str | None) -> str:
        s = self.qschema
        inner = (
            f"SELECT t.__dist_key__ AS key, {s}.evaluate(t.x, t.y, t.n, %(model)s, %(options)s, "
            f"%(weights)s) AS state FROM {table_sql} t "
            "WHERE t.__dist_key__ = ANY(%(group)s::integer[]) GROUP BY t.__dist_key__"
        )
        return self._outer(inner, outer)

    def prediction_sql(self, table_sql: str) -> str:
        return (
            f"SELECT t.buffer_id, {self.qschema}.predict(t.x, t.n, %(model)s, %(options)s, "
            f"%(weights)s) FROM {table_sql} t WHERE t.__dist_key__ = ANY(%(group)s::integer[])"
        )

    def merge_sql(self) -> str:
        return f"SELECT {self.qschema}.merge(s) FROM unnest(%(states)s::bytea[]) AS s"

    def _outer(self, inner: str, outer: str | None) -> str:
        if outer == "merge":
            return f"SELECT {self.qschema}.merge(q.state) FROM ({inner}) q"
        if outer == "final":
            return f"SELECT q.key, {self.qschema}.final_state(q.state) FROM ({inner}) q"
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
        if len(groups) == 1:  # one statement does it all (Greenplum, or a single segment)
            rows = sessions.one(
                build("merge" if merged else "final"), {**params, "group": groups[0]}
            )
            return bytes(rows[0][0]) if merged else {k: bytes(v) for k, v in rows}
        if not merged:
            rows = self._per_group(sessions, build("final"), params, keys)
            return {k: bytes(v) for k, v in rows}
        states = [state for _, state in self._per_group(sessions, build(None), params, keys)]
        return bytes(sessions.one(self.merge_sql(), {"states": states})[0][0])
