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

import contextlib
import json
import secrets
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import ClassVar

import numpy as np
import sqlalchemy as sa

from gpcnn.engines import transport
from gpcnn.engines.sessions import SegmentSessions, named
from gpcnn.engines.transport import (
    EVERY_KEY,
    BinaryRows,
    StreamingAverage,
    Trained,
    merged_result,
    per_key_result,
)
from gpcnn.kernel import segment

DISPATCHES = (None, "sessions", "statement")
# A key's shard position (0-based order in the statement's ``:keys``, the table's ``dist_keys``):
# vectors and metrics are added in this order, so the sums do not depend on the key values.
SHARD_ORDER = "array_position(CAST(:keys AS integer[]), %s.key)"
# A chunk of a vector: one row of transfers and checkpoints, one row of a result stream. 1 MiB
# rather than 8: the client's allocator reuses 1 MiB buffers, where it kept freed 8 MiB ones in
# per-thread arenas (25M weights: client peak 3.12x against 3.97x the model, K = 2;
# bench/overhead.py --memory 25 2 [--chunk-bytes 8388608]).
DEFAULT_CHUNK_BYTES = 1 << 20


@dataclass(frozen=True)
class StoredStart:
    """A start already stored: the ``weights`` checkpoint of ``iteration`` of run ``run_id``, the
    same for every key. The training statement joins it where it would join a new transfer, so
    a rule whose next start is the model it just stored (``average`` without optimizer state)
    does not write the model twice per iteration."""

    run_id: int
    iteration: int
    size: int  # values


def text_safe(sql: str) -> str:
    """Quoted identifiers inside a ``:name`` statement: a colon in a name is not a parameter."""
    return sql.replace(":", "\\:")


class Backend:
    """An engine gpcnn runs on, bound to a SQLAlchemy engine, gpcnn's schema and a dispatch."""

    kind: ClassVar[str] = "abstract"
    native_dispatch: ClassVar[str] = "sessions"
    dispatches: ClassVar[tuple[str | None, ...]] = DISPATCHES  # the ones this engine can run

    def __init__(
        self,
        engine: sa.Engine,
        schema: str = "gpcnn",
        dispatch: str | None = None,
        chunk_bytes: int | None = None,
    ):
        if dispatch not in self.dispatches:
            raise ValueError(
                f"dispatch={dispatch!r} on {self.kind}: choose one of {self.dispatches} (None: "
                f"the engine's own, {self.native_dispatch!r})"
            )
        self.engine = engine
        self.schema = schema
        self.dispatch = dispatch or self.native_dispatch
        self.chunk_bytes = check_chunk_bytes(chunk_bytes)

    @property
    def chunk_values(self) -> int:
        """float32 values per chunk."""
        return self.chunk_bytes // 4

    def quote(self, identifier: str) -> str:
        return self.engine.dialect.identifier_preparer.quote(identifier)

    @property
    def qschema(self) -> str:
        return self.quote(self.schema)

    @contextlib.contextmanager
    def autocommit_connection(self) -> Iterator[sa.Connection]:
        """A new server session outside any transaction, for statements that refuse one (VACUUM).
        Not a pooled session as it was: on Greenplum 7.0.0-dev a pooled connection's segment
        processes can stay in the transaction of an earlier one-segment read, and VACUUM then
        fails there ("cannot run inside a transaction block (seg1)"). Every engine takes this
        path, so the suite runs it on PostgreSQL too. Closed afterwards: the pool stays as it was."""
        url = self.engine.url
        fresh = sa.create_engine(url, poolclass=sa.pool.NullPool, connect_args=named(url))
        try:
            with fresh.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                yield conn
        finally:
            fresh.dispose()

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

    # Settings `gpcnn doctor` reports: autovacuum decides whether pruned checkpoints and used
    # transfers leave the disk on their own.
    DOCTOR_SETTINGS: ClassVar[tuple[str, ...]] = ("autovacuum", "max_connections")

    def doctor_facts(self) -> dict:
        """What the server offers gpcnn besides the probes: those settings, and the bytes on disk
        of each of gpcnn's tables (dead rows included)."""
        with self.engine.connect() as conn:
            settings = conn.execute(
                sa.text(
                    "SELECT name, setting || coalesce(unit, '') FROM pg_settings "
                    "WHERE name = ANY(CAST(:names AS text[])) ORDER BY name"
                ),
                {"names": list(self.DOCTOR_SETTINGS)},
            ).all()
            sizes = conn.execute(
                sa.text(
                    "SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c "
                    "JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "WHERE n.nspname = :schema AND c.relkind = 'r' ORDER BY c.relname"
                ),
                {"schema": self.schema},
            ).all()
        return {"settings": dict(settings), "table_bytes": {name: int(b) for name, b in sizes}}

    @staticmethod
    def _decode_probes(rows) -> list[dict]:
        return [{"segment": segment, **json.loads(text)} for segment, text in rows]

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
    # settings a connection's start must make (libpq options): the training sessions open with them
    session_options: ClassVar[str] = ""

    @property
    def per_segment_sessions(self) -> bool:
        return self.dispatch == "sessions"

    def open_sessions(self, segments: int, threads: int = 0) -> SegmentSessions:
        """Sessions for the iterations of a fit of ``segments`` keys whose segment processes run
        ``threads`` TF threads: one per segment, or one for all (``"statement"``)."""
        count = segments if self.per_segment_sessions else 1
        return SegmentSessions(
            self.engine, count, self.session_settings, threads, self.session_options
        )

    def session_groups(self, keys: Sequence[int], sessions: int) -> list[list[int]]:
        """Which keys each session handles: one statement per group, run concurrently."""
        if not self.per_segment_sessions:
            return [[int(k) for k in keys]]
        count = min(len(keys), sessions)
        return [[int(k) for k in keys[i::count]] for i in range(count)]

    def default_threads(self, segments: int) -> int:
        """TensorFlow threads per segment process when the user sets none."""
        raise NotImplementedError

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

    def run_statement(self, sessions: SegmentSessions, sql: str, params: dict, keys) -> None:
        """A statement without results (an INSERT) for every group of keys, concurrently."""
        self._per_group(sessions, sql, params, keys)

    # -- transfers: the vectors one statement sends, by binary COPY --------------------------

    def chunk_copy_sql(self, table_sql: str, prefix: Sequence[str]) -> str:
        """The binary COPY of chunk rows (``*prefix, chunk, data``) into a chunked table."""
        columns = ", ".join([*prefix, "chunk", "data"])
        return f"COPY {table_sql} ({columns}) FROM STDIN WITH (FORMAT binary)"

    @contextlib.contextmanager
    def _vectors(
        self, vectors: Mapping[int, np.ndarray] | StoredStart, params: dict
    ) -> Iterator[dict]:
        """``params`` naming a statement's vectors (key -> vector, written to ``transfers`` and
        deleted afterwards; or a ``StoredStart``), with the token that names them in the
        segment processes and their size in ``options`` (a ``kernel.protocol.SegmentOptions``,
        encoded here)."""
        if isinstance(vectors, StoredStart):
            source = {"start_run": vectors.run_id, "start_iteration": vectors.iteration}
            token, size = secrets.randbits(62), vectors.size
        else:
            sizes = {vector.size for vector in vectors.values()}
            if len(sizes) != 1:
                raise ValueError(f"start vectors of different sizes {sorted(sizes)}")
            token, size = transport.write_transfer(self, vectors), sizes.pop()
            source = {"transfer": token}
        options = params["options"].with_transport(token, size)
        try:
            yield {**params, **source, "options": options.to_json()}
        finally:
            if "transfer" in source:
                transport.delete_transfer(self, token)

    # -- running an iteration -----------------------------------------------------------------

    def _per_group(
        self, sessions: SegmentSessions, sql: str, params: dict, keys, binary=None
    ) -> list[tuple]:
        groups = self.session_groups(keys, len(sessions))
        rows = sessions.map(sql, [{**params, "group": group} for group in groups], binary)
        return [row for group_rows in rows for row in group_rows]

    @staticmethod
    def copy_out_sql(query: str) -> str:
        """A query whose rows come back as binary COPY data: bytea as raw bytes, not hex text."""
        return f"COPY ({query}) TO STDOUT WITH (FORMAT binary)"

    def run_training(
        self,
        sessions: SegmentSessions,
        table_sql: str,
        params: dict,
        keys: Sequence[int],
        starts: Mapping[int, np.ndarray] | StoredStart,
        merged: bool,
        into: np.ndarray | None = None,
        on_chunk=None,
    ) -> Trained:
        """One iteration's training from ``starts`` (key -> start vector, or ``EVERY_KEY``; or a
        ``StoredStart``): the image-weighted average of the trained vectors with the merged
        metrics, or (not ``merged``) each key's vector and metrics. One statement merges in the
        database; with a session per segment, the K results are merged here, chunk by chunk, the
        same way, into ``into`` when given and of the average's size (a vector whose values are
        no longer needed: the caller's model, already sent), telling ``on_chunk`` each chunk of
        the average as it is whole (``StreamingAverage``; never called when the database merges)."""
        stored = isinstance(starts, StoredStart)
        params = with_shards(params, keys)
        with self._vectors(starts, params) as params:
            params = {**params, "chunk_values": self.chunk_values}
            groups = self.session_groups(keys, len(sessions))
            size = starts.size if stored else next(iter(starts.values())).size
            if merged and len(groups) == 1 and self.merges_in_database(len(keys), size):
                rows = sessions.one(
                    self.copy_out_sql(self.training_sql(table_sql, "merge", stored)),
                    {**params, "group": groups[0]},
                    partial(BinaryRows, ("integer", "bytea")),
                )
                return merged_result(rows)
            sql = self.copy_out_sql(self.training_sql(table_sql, None, stored))
            types = ("integer", "integer", "bigint", "bytea")
            if merged:
                paced = all(len(group) == 1 for group in groups)
                average = StreamingAverage(params["keys"], self.chunk_values, paced, into, on_chunk)
                sink = partial(BinaryRows, types, on_row=average.add, on_end=average.end_stream)
                try:
                    self._per_group(sessions, sql, params, keys, sink)
                finally:
                    average.close()
                return average.result()
            rows = self._per_group(sessions, sql, params, keys, partial(BinaryRows, types))
        return per_key_result(rows, params["keys"])

    # One statement merges in the database only when the K trained vectors together pass this
    # (bytes): below it, the coordinator passes them on to the client, which averages them as they
    # arrive (and streams the checkpoint meanwhile), as for a session per segment. On the live
    # one-host cluster the client's merge was faster at 1M and at 25M weights, K = 2 (200 MB), in
    # every round (docs/greenplum.md, "Where the merge runs"); past this limit, where the relayed
    # vectors would load the coordinator and the client's link K times, the segments merge.
    database_merge_bytes = 256 << 20

    def merges_in_database(self, keys: int, values: int) -> bool:
        """Whether one statement's merge of ``keys`` trained vectors of ``values`` float32 runs
        in the database (on the segments, chunk by chunk) rather than here."""
        return keys * values * 4 > self.database_merge_bytes

    def run_evaluation(
        self,
        sessions: SegmentSessions,
        table_sql: str,
        params: dict,
        keys,
        weights: np.ndarray | StoredStart,
    ) -> dict:
        """Image-weighted loss and metrics of ``weights`` (a vector, or a ``StoredStart``: the
        model of a stored checkpoint, not written again) over the keys' buffers."""
        stored = isinstance(weights, StoredStart)
        vectors = weights if stored else {EVERY_KEY: weights}
        params = with_shards(params, keys)
        with self._vectors(vectors, params) as params:
            groups = self.session_groups(keys, len(sessions))
            if len(groups) == 1:
                rows = sessions.one(
                    self.evaluation_sql(table_sql, "merge", stored), {**params, "group": groups[0]}
                )
                return segment.decode_result(bytes(rows[0][0]))
            sql = self.evaluation_sql(table_sql, None, stored)
            rows = self._per_group(sessions, sql, params, keys)
        state = None
        for _, value in sorted(rows, key=lambda r: params["keys"].index(r[0])):
            state = segment.add_states(state, bytes(value))
        return segment.decode_result(segment.state_result(state))

    def run_prediction(
        self, sessions: SegmentSessions, table_sql: str, params: dict, keys
    ) -> list[tuple[int, bytes]]:
        """(buffer_id, probabilities) of every buffer, in buffer order."""
        rows = self._per_group(sessions, self.prediction_sql(table_sql), params, keys)
        return sorted(((int(b), bytes(p)) for b, p in rows), key=lambda r: r[0])


def with_shards(params: dict, keys: Sequence[int]) -> dict:
    """``params`` with the table's keys in shard order: as ``:keys`` (the merge's order) and in the
    segment options (``shard_keys``: what the segments' random streams derive from)."""
    keys = [int(k) for k in keys]
    return {**params, "keys": keys, "options": params["options"].replace(shard_keys=tuple(keys))}


def check_chunk_bytes(chunk_bytes: int | None) -> int:
    """A chunk size: a positive multiple of 8 bytes (whole float32 and float64 values), far
    below PostgreSQL's 1 GB field limit even as a float64 sum."""
    if chunk_bytes is None:
        return DEFAULT_CHUNK_BYTES
    if not isinstance(chunk_bytes, int) or chunk_bytes <= 0 or chunk_bytes % 8:
        raise ValueError(f"chunk_bytes={chunk_bytes!r}: a positive multiple of 8")
    if chunk_bytes > 256 << 20:
        raise ValueError(f"chunk_bytes={chunk_bytes}: at most 256 MiB (a float64 sum doubles it)")
    return chunk_bytes
