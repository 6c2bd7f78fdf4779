"""PostgreSQL: one LIST partition per segment, one persistent session per segment (docs/design.md)."""

from __future__ import annotations

import sqlalchemy as sa

from gpcnn.engines.base import Backend, text_safe


class PostgresBackend(Backend):
    kind = "postgresql"
    partitioned = True

    def server_cpu_count(self) -> int:
        return int(self.probe_segments()[0]["cpu_count"] or 1)

    def default_segments(self) -> int:
        return max(2, self.server_cpu_count())

    def probe_segments(self, threads: int | None = None) -> list[dict]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.text(f"SELECT -1, {text_safe(self.qschema)}.probe(:threads)"),
                {"threads": threads},
            ).all()
        return self._decode_probes(rows)

    def choose_keys(self, conn: sa.Connection, segments: int) -> list[int]:
        """0..K-1; through a ``dispatch="statement"`` handle Greenplum-like keys instead (see
        ``greenplum_like_keys``), so the suite runs Greenplum's path with keys that are neither
        0..K-1 nor in order, as Greenplum's are."""
        if self.dispatch == "statement":
            return greenplum_like_keys(segments)
        return list(range(segments))

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

    def default_threads(self, segments: int) -> int:
        return max(1, self.server_cpu_count() // max(1, segments))


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
