"""What every engine offers gpcnn beyond its statement text: a connection, the sessions of a fit
and the dispatch that runs an iteration's statements through them.

A ``Backend`` is its engine's ``Compiler`` (the statements, built as strings) bound to a
SQLAlchemy engine, with a ``Dispatch`` object of its ``dispatch_modes`` (``dispatch.py``) chosen by
name; ``run_training``, ``run_evaluation`` and ``run_prediction`` hand the statements to it. An
engine subclasses it in one module and registers there (``registry.register_engine``).
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import sqlalchemy as sa

from gpcnn.engines.compiler import Compiler
from gpcnn.engines.dispatch import Dispatch, OneStatement, SessionPerSegment, TrainingCall
from gpcnn.engines.identifiers import TableName
from gpcnn.engines.results import Trained
from gpcnn.engines.sessions import SegmentSessions, connect_arguments
from gpcnn.engines.transfers import StoredStart

# A chunk of a vector: one row of transfers and checkpoints, one row of a result stream. 1 MiB
# rather than 8: the client's allocator reuses 1 MiB buffers, where it kept freed 8 MiB ones in
# per-thread arenas (25M weights: client peak 3.12x against 3.97x the model, K = 2;
# bench/overhead.py --memory 25 2 [--chunk-bytes 8388608], in git history before ce358ee).
DEFAULT_CHUNK_BYTES = 1 << 20


@dataclass(frozen=True)
class ServerPlace:
    """The server process an error names: ``engine``'s segment ``segment`` on ``host``:``port``,
    process ``pid``."""

    engine: str
    segment: int
    host: str
    port: int
    pid: int

    def __str__(self) -> str:
        return f"{self.engine} segment {self.segment} on {self.host}:{self.port}, pid {self.pid}"


class Backend(Compiler):
    """An engine gpcnn runs on, bound to a SQLAlchemy engine, gpcnn's schema and a dispatch
    (``dispatch``: its name, None for the engine's own; ``dispatcher``: the object).

    An engine subclasses it (its statements come from its ``Compiler``), lists its dispatch modes
    in ``dispatch_modes`` and registers itself (``register_engine``).

    Parameters
    ----------
    engine : sqlalchemy.Engine
        The connections' engine (``Database.engine``).
    schema : str, default "gpcnn"
        gpcnn's schema on that server.
    dispatch : str, optional
        One of the engine's ``dispatch_modes`` by name; None: its first, the engine's own.
    chunk_bytes : int, optional
        The size of the chunks vectors travel in (default 1 MiB).
    """

    # the dispatches this engine runs, its own first
    dispatch_modes: ClassVar[tuple[type[Dispatch], ...]] = (SessionPerSegment, OneStatement)

    def __init__(
        self,
        engine: sa.Engine,
        schema: str = "gpcnn",
        dispatch: str | None = None,
        chunk_bytes: int | None = None,
    ):
        super().__init__(engine.dialect, schema)
        modes = {mode.name: mode for mode in self.dispatch_modes}
        if dispatch is not None and dispatch not in modes:
            raise ValueError(
                f"dispatch={dispatch!r} on {self.kind}: choose one of {self.dispatches} (None: "
                f"the engine's own, {self.dispatch_modes[0].name!r})"
            )
        self.engine = engine
        self.dispatcher = (modes[dispatch] if dispatch else self.dispatch_modes[0])(self)
        self.dispatch = self.dispatcher.name
        self.chunk_bytes = check_chunk_bytes(chunk_bytes)

    @classmethod
    def dispatch_names(cls) -> tuple[str | None, ...]:
        """The ``dispatch`` values this engine accepts (None: its own)."""
        return (None, *(mode.name for mode in cls.dispatch_modes))

    @property
    def dispatches(self) -> tuple[str | None, ...]:
        return self.dispatch_names()

    @staticmethod
    def error_place(text: str) -> tuple[ServerPlace | None, str]:
        """Which server process an error's ``text`` names, and the text without that mention:
        (None, text) on an engine whose errors name none."""
        return None, text

    @property
    def chunk_values(self) -> int:
        """float32 values per chunk."""
        return self.chunk_bytes // 4

    @contextlib.contextmanager
    def autocommit_connection(self) -> Iterator[sa.Connection]:
        """A new server session outside any transaction, for statements that refuse one (VACUUM).
        Not a pooled session as it was: on Greenplum 7.0.0-dev a pooled connection's segment
        processes can stay in the transaction of an earlier one-segment read, and VACUUM then
        fails there ("cannot run inside a transaction block (seg1)"). Every engine takes this
        path, so the suite runs it on PostgreSQL too. Closed afterwards: the pool stays as it was."""
        url = self.engine.url
        fresh = sa.create_engine(
            url, poolclass=sa.pool.NullPool, connect_args=connect_arguments(url)
        )
        try:
            with fresh.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                yield conn
        finally:
            fresh.dispose()

    @functools.cached_property
    def default_schema(self) -> str | None:
        """The schema a table name without one means: ``current_schema()`` under the user's own
        search path (usually a schema named after the role, else ``public``), read once on a
        connection that does not pin the path; None when that path names no schema that exists.
        gpcnn's own connections pin it (``sessions.PINNED_SEARCH_PATH``), so every name they send
        carries its schema."""
        url = self.engine.url
        bare = sa.create_engine(
            url, poolclass=sa.pool.NullPool, connect_args=connect_arguments(url, pinned=False)
        )
        try:
            with bare.connect() as conn:
                return conn.execute(sa.text("SELECT pg_catalog.current_schema()")).scalar()
        finally:
            bare.dispose()

    def server_version(self) -> str:
        with self.engine.connect() as conn:
            return conn.execute(sa.text("SELECT version()")).scalar_one()

    def server_version_num(self) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(sa.text("SHOW server_version_num")).scalar_one())

    def default_segments(self) -> int:
        """K when the user gives none."""
        raise NotImplementedError

    def probe_segments(self, threads: int | None = None) -> list[dict]:
        """The environment probe's JSON, once per segment (a segment id added to each)."""
        raise NotImplementedError

    # Settings `gpcnn doctor` reports: autovacuum decides whether pruned checkpoints and used
    # transfers leave the disk on their own.
    DOCTOR_SETTINGS: ClassVar[tuple[str, ...]] = ("autovacuum", "max_connections")

    @staticmethod
    def doctor_lines(facts: dict, probes: list[dict]) -> list[str]:
        """What ``gpcnn doctor`` says of this engine's own ``doctor_facts`` (and the segments'
        ``probes``), one line each; none by default."""
        return []

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
        # in a session of its own: asking loads the JIT's library into that server process,
        # where TensorFlow must then never start (``kernel.server_guard``)
        with self.autocommit_connection() as conn:
            jit = conn.execute(sa.text("SELECT pg_catalog.pg_jit_available()")).scalar()
        return {
            "settings": dict(settings),
            "table_bytes": {name: int(b) for name, b in sizes},
            "jit_available": bool(jit),
        }

    @staticmethod
    def _decode_probes(rows) -> list[dict]:
        return [{"segment": segment, **json.loads(text)} for segment, text in rows]

    # -- image tables and schemas ------------------------------------------------------------

    def choose_keys(self, conn: sa.Connection, segments: int) -> list[int]:
        """The ``__dist_key__`` values of a new table of ``segments`` segments."""
        raise NotImplementedError

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
                self._check_may_create_schema(conn, schema)
                conn.exec_driver_sql(self.create_schema_ddl(schema))

    def _check_may_create_schema(self, conn: sa.Connection, schema: str) -> None:
        may = sa.text(
            "SELECT pg_catalog.has_database_privilege(pg_catalog.current_database(), 'CREATE'), "
            "CAST(current_user AS text)"
        )
        allowed, role = conn.execute(may).one()
        if not allowed:
            raise PermissionError(
                f"schema {schema!r} does not exist, and role {role!r} may not create schemas: "
                f"use a schema that exists, or ask an administrator to run "
                f"CREATE SCHEMA {self.quote(schema)} AUTHORIZATION {self.quote(role)}"
            )

    def lock_name(self, conn: sa.Connection, name: str) -> None:
        """Serialise loads of one table name until the transaction ends."""
        conn.execute(sa.select(sa.func.pg_advisory_xact_lock(sa.func.hashtext(name))))

    # -- running an iteration: the dispatch's ---------------------------------------------------

    session_settings: ClassVar[tuple[str, ...]] = ()
    # settings a connection's start must make (libpq options): the training sessions open with them
    session_options: ClassVar[str] = ""

    @property
    def per_segment_sessions(self) -> bool:
        return self.dispatcher.per_segment_sessions

    def open_sessions(self, segments: int, threads: int | None = 0) -> SegmentSessions:
        """Sessions for the iterations of a fit of ``segments`` keys whose segment processes run
        ``threads`` TF threads: one per segment, or one for all (``"statement"``)."""
        return SegmentSessions(
            self.engine,
            self.dispatcher.session_count(segments),
            self.session_settings,
            threads,
            self.session_options,
        )

    def session_groups(self, keys: Sequence[int], sessions: int) -> list[list[int]]:
        """Which keys each session handles: one statement per group, run concurrently."""
        return self.dispatcher.groups(keys, sessions)

    def default_threads(self, segments: int) -> int:
        """TensorFlow threads per segment process when the user sets none."""
        raise NotImplementedError

    def run_statement(self, sessions: SegmentSessions, sql: str, params: dict, keys) -> None:
        """A statement without results (an INSERT) for every group of keys, concurrently."""
        self.dispatcher.run(sessions, sql, params, keys)

    def run_training(self, sessions: SegmentSessions, call: TrainingCall) -> Trained:
        """One iteration's training in ``sessions``: ``Dispatch.train`` of this dispatch."""
        return self.dispatcher.train(sessions, call)

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
        *,
        table: TableName,
        params: dict,
        keys: Sequence[int],
        weights: np.ndarray | StoredStart,
    ) -> dict:
        """Image-weighted loss and metrics of a model over the keys' buffers of ``table``:
        ``Dispatch.evaluate`` of this dispatch."""
        return self.dispatcher.evaluate(
            sessions, table=table, params=params, keys=keys, weights=weights
        )

    def run_prediction(
        self, sessions: SegmentSessions, *, table: TableName, params: dict, keys: Sequence[int]
    ) -> list[tuple[int, bytes]]:
        """(buffer_id, probabilities) of every buffer of ``table``, in buffer order:
        ``Dispatch.predict``."""
        return self.dispatcher.predict(sessions, table=table, params=params, keys=keys)


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
