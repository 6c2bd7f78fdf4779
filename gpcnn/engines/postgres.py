"""PostgreSQL: one LIST partition per segment, one persistent session per segment (DESIGN.md)."""

from __future__ import annotations

import sqlalchemy as sa

from .base import Backend


class PostgresBackend(Backend):
    kind = "postgresql"

    def server_cpu_count(self) -> int:
        return int(self.probe_segments()[0]["cpu_count"] or 1)

    def default_segments(self) -> int:
        return max(2, self.server_cpu_count())

    def probe_segments(self, threads: int | None = None) -> list[dict]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.text(f"SELECT -1, {self.qschema}.probe(:threads)"), {"threads": threads}
            ).all()
        return self._decode_probes(rows)
