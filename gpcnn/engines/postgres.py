"""The PostgreSQL engine: one LIST partition per segment, one persistent session per segment
(docs/design.md); its statements (``PostgresCompiler``), its backend and its registration.
"""

from __future__ import annotations

import sqlalchemy as sa

from gpcnn.engines.backend import Backend
from gpcnn.engines.compiler import Compiler, text_safe
from gpcnn.engines.dispatch import OneStatement, SessionPerSegment
from gpcnn.engines.engine_registry import ServerFacts, register_engine


class PostgresCompiler(Compiler):
    """PostgreSQL's DDL: an image table is a parent partitioned by key, one partition per key."""

    kind = "postgresql"
    partitioned = True

    def probe_sql(self) -> str:
        """The probe once, in the server's own process (segment -1)."""
        return f"SELECT -1, {text_safe(self.qschema)}.probe(:threads)"

    @staticmethod
    def partition(table, key: int):
        return table.with_suffix(f"__seg{int(key)}")

    def image_table_ddl(self, table, keys: list[int]) -> list[str]:
        parent = table.sql(self)
        ddl = [f"CREATE TABLE {parent} ({self.IMAGE_COLUMNS}) PARTITION BY LIST (__dist_key__)"]
        ddl += [
            f"CREATE TABLE {self.partition(table, k).sql(self)} PARTITION OF {parent} "
            f"FOR VALUES IN ({int(k)})"
            for k in keys
        ]
        ddl.append(f"ALTER TABLE {parent} {self.EXTERNAL_STORAGE}")
        return ddl

    def rename_ddl(self, staging, table, keys: list[int]) -> list[str]:
        return super().rename_ddl(staging, table, keys) + [
            f"ALTER TABLE {self.partition(staging, k).sql(self)} "
            f"RENAME TO {self.quote(self.partition(table, k).name)}"
            for k in keys
        ]


class StatementAsOnGreenplum(OneStatement):
    """Greenplum's one statement on PostgreSQL, with a new table's keys numbered as Greenplum
    might (``greenplum_like_keys``): the suite runs Greenplum's path with keys that are neither
    0..K-1 nor in order, as Greenplum's are."""

    def numbered_keys(self, segments: int) -> list[int]:
        return greenplum_like_keys(segments)


class PostgresBackend(PostgresCompiler, Backend):
    """A PostgreSQL server: a session per segment by default, or ``"statement"``."""

    dispatch_modes = (SessionPerSegment, StatementAsOnGreenplum)

    def server_cpu_count(self) -> int:
        return int(self.probe_segments()[0]["cpu_count"] or 1)

    def default_segments(self) -> int:
        return max(2, self.server_cpu_count())

    def probe_segments(self, threads: int | None = None) -> list[dict]:
        with self.engine.connect() as conn:
            rows = conn.execute(sa.text(self.probe_sql()), {"threads": threads}).all()
        return self._decode_probes(rows)

    def choose_keys(self, conn: sa.Connection, segments: int) -> list[int]:
        """As the dispatch numbers them: 0..K-1, or Greenplum-like through ``"statement"``."""
        return self.dispatcher.numbered_keys(segments)

    def default_threads(self, segments: int) -> int:
        return max(1, self.server_cpu_count() // max(1, segments))

    # the standbys streaming from this server, as it sees them
    REPLICAS_SQL = (
        "SELECT application_name AS name, state, sync_state FROM pg_stat_replication "
        "ORDER BY 1, 2, 3"
    )

    @staticmethod
    def doctor_lines(f: dict, probes: list[dict]) -> list[str]:
        """Which replicas stream, and what a fit does if the server fails."""
        return [replica_line(f["replicas"])] if "replicas" in f else []

    def doctor_facts(self) -> dict:
        """Besides the settings and table sizes: the streaming replicas (``replicas``: name,
        state, sync_state each), whose failover gpcnn does not follow by itself."""
        facts = super().doctor_facts()
        with self.engine.connect() as conn:
            rows = conn.exec_driver_sql(self.REPLICAS_SQL).all()
        facts["replicas"] = [dict(row._mapping) for row in rows]
        return facts


def is_postgresql(facts: ServerFacts) -> bool:
    """Any server of the PostgreSQL family that is not a Greenplum one."""
    return not facts.gp_role


register_engine("postgresql", PostgresBackend, detects=is_postgresql)


def greenplum_like_keys(segments: int) -> list[int]:
    """Keys spaced by 3 from 2, the last shard's 0: K = 2 gives [2, 0], as Greenplum chose on 2
    primaries; K = 3 [2, 5, 0]. Shard i is the i-th key, whatever its value."""
    if segments == 1:
        return [2]
    return [2 + 3 * i for i in range(segments - 1)] + [0]


def bootstrap(url: str, admin_database: str, database: str) -> None:
    """A new cluster's first start: create ``database`` (connected to ``admin_database``, which
    initdb made) and plpython3u in it. Raises ``DatabaseError`` when plpython3u is missing."""
    from gpcnn.engines.functions import create_plpython

    admin_url = sa.make_url(url).set(database=admin_database)
    admin = sa.create_engine(admin_url, poolclass=sa.pool.NullPool, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            ensure_database(conn, database)
    finally:
        admin.dispose()
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as conn:
            create_plpython(conn)
    finally:
        engine.dispose()


def ensure_database(conn: sa.Connection, name: str) -> None:
    """CREATE DATABASE unless it exists (an autocommit connection: it cannot run in a
    transaction)."""
    found = conn.execute(
        sa.text("SELECT 1 FROM pg_database WHERE datname = :d"), {"d": name}
    ).scalar()
    if not found:
        conn.exec_driver_sql(f"CREATE DATABASE {conn.dialect.identifier_preparer.quote(name)}")


def replica_line(replicas: list[dict]) -> str:
    """PostgreSQL's streaming replicas, and what a fit does when the server fails."""
    if not replicas:
        return (
            "replicas: none streaming: a fit fails with the server and resumes once it is back "
            "(fit(table, resume=run_id))"
        )
    seen = ", ".join(f"{r['name'] or '?'} ({r['state']}, {r['sync_state']})" for r in replicas)
    return (
        f"replicas: {len(replicas)} streaming: {seen}; gpcnn does not follow a failover by "
        "itself: connect to the promoted server and resume there (fit(table, resume=run_id))"
    )
