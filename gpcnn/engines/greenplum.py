"""Greenplum 7 / Apache Cloudberry: DISTRIBUTED BY (__dist_key__), one key per primary segment."""

from __future__ import annotations

import sqlalchemy as sa

from .base import Backend


class GreenplumBackend(Backend):
    kind = "greenplum"

    def default_segments(self) -> int:
        with self.engine.connect() as conn:
            return int(
                conn.execute(
                    sa.text(
                        "SELECT count(*) FROM gp_segment_configuration "
                        "WHERE role = 'p' AND content >= 0"
                    )
                ).scalar()
            )

    def probe_segments(self, threads: int | None = None) -> list[dict]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.text(
                    f"SELECT gp_segment_id, {self.qschema}.probe(:threads) "
                    "FROM gp_dist_random('gp_id') ORDER BY 1"
                ),
                {"threads": threads},
            ).all()
        return self._decode_probes(rows)
