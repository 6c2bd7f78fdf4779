"""The statements on gpcnn's runs and their stored vectors, in SQLAlchemy Core, as one ``Catalog``.

The tables (their shape: ``shapes``; older shapes: ``migrations``; the catalogs of image and
prediction tables: ``table_records``): ``runs``, ``run_iterations`` (each iteration's metrics),
``checkpoints`` (stored vectors in chunks: an iteration's model, rule state and optimizer state,
and each segment's next start for rules that keep per-segment models) and ``transfers`` (the
vectors one statement sends to the segments, in chunks the query joins; on Greenplum replicated,
so every segment reads them locally). No value is bigger than a chunk, and weights reach the
server by binary COPY, never inside statement text. What comes back are typed records, vectors as
float32 arrays.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import sqlalchemy as sa

from gpcnn.engines import migrations, shapes
from gpcnn.engines.backend import Backend
from gpcnn.engines.copying import write_chunks, write_streamed_chunks
from gpcnn.engines.results import assemble
from gpcnn.engines.run_records import Checkpoint, Run, RunSummary, SegmentStart, StoredPart
from gpcnn.engines.shapes import RUN_PARTS, SEGMENT_PARTS, tables
from gpcnn.engines.transfers import EVERY_KEY, sweep_transfers
from gpcnn.result_key import result_key

RUN_STATUSES = ("running", "finished", "stopped_early", "failed", "interrupted")
# a run that stopped on purpose is never continued by itself
RESUMABLE = ("running", "failed", "interrupted")
CHECKPOINT_PREFIX = (
    ("run_id", "bigint"),
    ("iteration", "integer"),
    ("part", "text"),
    ("__dist_key__", "integer"),
)


def reclaim(
    backend: Backend, names: Iterable[str] = shapes.CHUNKED, give_back: bool = False
) -> None:
    """VACUUM gpcnn's chunk tables (with their TOAST), each in a statement of its own outside any
    transaction, so that the space of deleted checkpoints and transfers is reused without waiting
    for autovacuum (off on Greenplum 7, and slow to reach TOAST rows). Rows that a running
    statement may still see are kept for the next call. ``give_back``: also return empty pages at
    the end of a file to the system, which needs a moment's exclusive lock: VACUUM waits up to 5 s
    for it while a training statement reads a checkpoint, so a fit's own calls do not. A role
    that does not own the tables gets the server's warning, not an error."""
    options = "" if give_back else " (TRUNCATE false)"
    with backend.autocommit_connection() as conn:
        for name in names:
            conn.exec_driver_sql(f"VACUUM{options} {shapes.qualified(backend, name)}")


@dataclass(frozen=True)
class Catalog:
    """gpcnn's tables in the backend's schema, through an open connection whose transaction the
    caller owns (``Catalog(conn, db.backend)``)."""

    conn: sa.Connection
    backend: Backend

    @property
    def tables(self) -> shapes.Tables:
        return tables(self.backend.schema)

    def ensure_tables(self) -> None:
        """Create the tables, or migrate an older shape, inside the caller's transaction; and
        sweep the transfers of clients that died (every fit and install starts here)."""
        migrations.ensure_tables(self.conn, self.backend)
        sweep_transfers(self.conn, self.backend.schema)

    def shape(self) -> int:
        """The shape version found in the schema (0: no tables yet)."""
        return migrations.found_version(self.conn, self.backend)

    # -- runs ------------------------------------------------------------------------------------

    def create_run(self, table: str, params: dict, model_json: str) -> int:
        """A new ``running`` run; its id."""
        from gpcnn.version import __version__

        t = self.tables.runs
        return self.conn.execute(
            t.insert()
            .values(
                table_name=table,
                params=json.dumps(params),
                result_key=result_key(params),
                model_json=model_json,
                gpcnn_version=__version__,
                status="running",
                updated_at=sa.func.now(),
            )
            .returning(t.c.run_id)
        ).scalar_one()

    def _durable(self) -> None:
        """This transaction's commit returns once its WAL is on disk, whatever the server's
        ``synchronous_commit``; the WAL before it (earlier commits) is flushed with it."""
        # Off (the embedded cluster's setting), a crash lost committed iterations.
        self.conn.exec_driver_sql("SET LOCAL synchronous_commit = on")

    def set_run_status(self, run_id: int, status: str, error: str | None = None) -> None:
        """The run's status (and error), durable once committed (``_durable``)."""
        if status not in RUN_STATUSES:
            raise ValueError(f"status {status!r}: one of {RUN_STATUSES}")
        t = self.tables.runs
        self._durable()
        self.conn.execute(
            t.update()
            .where(t.c.run_id == run_id)
            .values(status=status, error=error, updated_at=sa.func.now())
        )

    def run(self, run_id: int) -> Run | None:
        t = self.tables.runs
        row = self.conn.execute(sa.select(t).where(t.c.run_id == run_id)).first()
        if row is None:
            return None
        return Run(
            run_id=int(row.run_id),
            table=row.table_name,
            params=json.loads(row.params),
            result_key=row.result_key,
            model_json=row.model_json,
            status=row.status,
            error=row.error,
        )

    def iterations(self, run_id: int) -> list[dict]:
        """The run's iteration rows (metrics), in order."""
        t = self.tables.run_iterations
        query = sa.select(t.c.metrics).where(t.c.run_id == run_id).order_by(t.c.iteration)
        return [json.loads(m) for m in self.conn.execute(query).scalars()]

    def insert_iteration(self, run_id: int, row: dict) -> None:
        """The iteration's metrics: from now on its checkpoint counts (``last_checkpoint``). Its
        transaction's commit waits for the WAL to reach the disk, whatever the server's
        ``synchronous_commit``: a commit that returned survives a crash, with all that was
        committed before it (the checkpoint, the run)."""
        self._durable()
        self.conn.execute(
            self.tables.run_iterations.insert().values(
                run_id=run_id, iteration=row["iteration"], metrics=json.dumps(row)
            )
        )

    def newest_resumable(self, table: str, params: dict) -> tuple[int, int] | None:
        """(run_id, stored iterations) of the newest run of ``table`` whose result-changing
        parameters equal ``params`` and that did not finish or stop on purpose."""
        t = self.tables
        row = self.conn.execute(
            sa.select(t.runs.c.run_id, self._iteration_count())
            .where(
                t.runs.c.table_name == table,
                t.runs.c.result_key == result_key(params),
                t.runs.c.status.in_(RESUMABLE),
            )
            .order_by(t.runs.c.run_id.desc())
            .limit(1)
        ).first()
        return None if row is None else (int(row[0]), int(row[1]))

    def _iteration_count(self):
        it, runs = self.tables.run_iterations, self.tables.runs
        return sa.select(sa.func.count()).where(it.c.run_id == runs.c.run_id).scalar_subquery()

    def run_summaries(self, run_ids: Sequence[int] | None = None) -> list[RunSummary]:
        """One summary per run (of ``run_ids``, or all), in id order."""
        t = self.tables
        it, c = t.run_iterations, t.checkpoints
        counts = (
            sa.select(it.c.run_id, sa.func.count().label("iterations"))
            .group_by(it.c.run_id)
            .subquery()
        )
        sizes = (
            sa.select(
                c.c.run_id,
                sa.func.count(sa.distinct(c.c.iteration))
                .filter(c.c.part.in_(RUN_PARTS))
                .label("checkpoints"),
                sa.func.sum(sa.func.octet_length(c.c.data)).label("stored_bytes"),
            )
            .group_by(c.c.run_id)
            .subquery()
        )
        query = (
            sa.select(
                t.runs.c.run_id,
                t.runs.c.table_name,
                t.runs.c.status,
                t.runs.c.error,
                t.runs.c.params,
                t.runs.c.created_at,
                t.runs.c.updated_at,
                sa.func.coalesce(counts.c.iterations, 0).label("iterations"),
                sa.func.coalesce(sizes.c.checkpoints, 0).label("checkpoints"),
                sa.func.coalesce(sizes.c.stored_bytes, 0).label("stored_bytes"),
            )
            .select_from(
                t.runs.outerjoin(counts, counts.c.run_id == t.runs.c.run_id).outerjoin(
                    sizes, sizes.c.run_id == t.runs.c.run_id
                )
            )
            .order_by(t.runs.c.run_id)
        )
        if run_ids is not None:
            query = query.where(t.runs.c.run_id.in_(list(run_ids)))
        return [
            RunSummary(
                run_id=int(r.run_id),
                table=r.table_name,
                status=r.status,
                error=r.error,
                params=json.loads(r.params),
                created_at=r.created_at,
                updated_at=r.updated_at,
                iterations=int(r.iterations),
                checkpoints=int(r.checkpoints),
                stored_bytes=int(r.stored_bytes),
            )
            for r in self.conn.execute(query)
        ]

    def delete_runs(self, run_ids: Sequence[int]) -> int:
        """Delete runs with their iterations and checkpoints; the runs deleted."""
        t, ids = self.tables, list(run_ids)
        for table in (t.checkpoints, t.run_iterations):
            self.conn.execute(table.delete().where(table.c.run_id.in_(ids)))
        return self.conn.execute(t.runs.delete().where(t.runs.c.run_id.in_(ids))).rowcount

    # -- checkpoints -------------------------------------------------------------------------------

    def _write_checkpoints(self, vectors: Iterable[tuple[tuple, np.ndarray]]) -> None:
        table_sql = shapes.qualified(self.backend, "checkpoints")
        write_chunks(self.conn, self.backend, table_sql, CHECKPOINT_PREFIX, vectors)

    def store_checkpoint(
        self, run_id: int, iteration: int, vectors: dict[str, np.ndarray | None]
    ) -> None:
        """An iteration's checkpoint (``RUN_PARTS`` -> vector or None), replacing any left by an
        attempt at the same iteration that stopped before its row was written."""
        self._forget_checkpoint(run_id, iteration)
        self._write_checkpoints(
            ((run_id, iteration, part, EVERY_KEY), vector)
            for part, vector in vectors.items()
            if vector is not None
        )

    def store_streamed_checkpoint(
        self, run_id: int, iteration: int, chunks: Iterable[np.ndarray]
    ) -> None:
        """An iteration's checkpoint that is its model alone, its chunks given as they are made
        (the average as it arrives), replacing any left as ``store_checkpoint`` does."""
        self._forget_checkpoint(run_id, iteration)
        table_sql = shapes.qualified(self.backend, "checkpoints")
        values = (run_id, iteration, "weights", EVERY_KEY)
        write_streamed_chunks(self.conn, self.backend, table_sql, CHECKPOINT_PREFIX, values, chunks)

    def _forget_checkpoint(self, run_id: int, iteration: int) -> None:
        c = self.tables.checkpoints
        self.conn.execute(c.delete().where(c.c.run_id == run_id, c.c.iteration == iteration))

    def replace_segment_starts(
        self,
        run_id: int,
        iteration: int,
        starts: dict[int, tuple[np.ndarray, np.ndarray | None]],
    ) -> None:
        """Each key's next start (weights, optimizer state or None) replaces the previous ones."""
        c = self.tables.checkpoints
        self.conn.execute(c.delete().where(c.c.run_id == run_id, c.c.part.in_(SEGMENT_PARTS)))
        self._write_checkpoints(
            ((run_id, iteration, part, key), vector)
            for key, pair in starts.items()
            for part, vector in zip(SEGMENT_PARTS, pair, strict=True)
            if vector is not None
        )

    def prune_checkpoints(self, run_id: int, keep: Sequence[int], up_to: int) -> int:
        """Delete the run's checkpoints of every iteration up to ``up_to`` not in ``keep``; the
        rows deleted. Later ones are left alone: the next iteration may be storing its own."""
        c = self.tables.checkpoints
        return self.conn.execute(
            c.delete().where(
                c.c.run_id == run_id,
                c.c.part.in_(RUN_PARTS),
                c.c.iteration <= up_to,
                c.c.iteration.not_in(list(keep)),
            )
        ).rowcount

    def _vectors(self, query) -> dict[tuple[str, int], np.ndarray]:
        """(part, key) -> the vector of its chunk rows (rows: part, key, chunk, data)."""
        parts: dict[tuple[str, int], dict[int, memoryview]] = {}
        for part, key, chunk, data in self.conn.execute(query):
            parts.setdefault((part, int(key)), {})[int(chunk)] = data
        return {
            (part, key): assemble(chunks, f"stored vector {part} of key {key}")
            for (part, key), chunks in parts.items()
        }

    def checkpoint(self, run_id: int, iteration: int) -> dict[str, np.ndarray]:
        """part -> vector of one stored iteration (empty if its checkpoint was not kept)."""
        c = self.tables.checkpoints
        query = sa.select(c.c.part, c.c["__dist_key__"], c.c.chunk, c.c.data).where(
            c.c.run_id == run_id, c.c.iteration == iteration, c.c.part.in_(RUN_PARTS)
        )
        return {part: vector for (part, _), vector in self._vectors(query).items()}

    def last_checkpoint(self, run_id: int) -> Checkpoint | None:
        """The newest stored checkpoint whose iteration row exists, or None."""
        c, it = self.tables.checkpoints, self.tables.run_iterations
        latest = self.conn.execute(
            sa.select(sa.func.max(c.c.iteration))
            .select_from(
                c.join(it, (it.c.run_id == c.c.run_id) & (it.c.iteration == c.c.iteration))
            )
            .where(c.c.run_id == run_id, c.c.part == "weights")
        ).scalar()
        if latest is None:
            return None
        return Checkpoint(int(latest), self.checkpoint(run_id, int(latest)))

    def segment_starts(self, run_id: int) -> dict[int, SegmentStart]:
        """Each key's stored next start, in key order."""
        c = self.tables.checkpoints
        query = sa.select(c.c.part, c.c["__dist_key__"], c.c.chunk, c.c.data).where(
            c.c.run_id == run_id, c.c.part.in_(SEGMENT_PARTS)
        )
        found = self._vectors(query)
        weights, optimizer = SEGMENT_PARTS
        return {
            key: SegmentStart(found[weights, key], found.get((optimizer, key)))
            for part, key in sorted(found, key=lambda pk: pk[1])
            if part == weights
        }

    def stored_parts(self, run_id: int) -> list[StoredPart]:
        """What the run stores, one record per part, in part order."""
        c = self.tables.checkpoints
        rows = self.conn.execute(
            sa.select(
                c.c.part,
                sa.func.array_agg(sa.distinct(c.c.iteration)),
                sa.func.count(),
                sa.func.sum(sa.func.octet_length(c.c.data)),
            )
            .where(c.c.run_id == run_id)
            .group_by(c.c.part)
            .order_by(c.c.part)
        )
        return [
            StoredPart(part, sorted(iterations), int(chunks), int(size))
            for part, iterations, chunks, size in rows
        ]
