"""Storing a fit's iterations: which checkpoints retention keeps, the checkpoint streamed while the
average arrives, and each iteration's checkpoint, row, next starts and pruning, in the background
where nothing reads them sooner (``IterationStore``)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from gpcnn.engines import Database
from gpcnn.engines.catalog import Catalog, reclaim
from gpcnn.engines.transfers import StoredStart
from gpcnn.fit.database_errors import TrainingError, database_call, once_more_if_lost


@dataclass(frozen=True)
class Retention:
    """Which iterations keep their checkpoint (model, rule and optimizer state): the last (all a
    resume needs), the best by validation loss (by training loss without validation) and every
    ``every``-th; every iteration keeps its metrics."""

    every: int = 10

    def keep(self, rows: Sequence[dict]) -> set[int]:
        if not rows:
            return set()
        score = "val_loss" if all("val_loss" in r for r in rows) else "loss"
        best = min(rows, key=lambda r: (r[score], r["iteration"]))
        kept = {rows[-1]["iteration"], best["iteration"]}
        return kept | {r["iteration"] for r in rows if r["iteration"] % self.every == 0}


DEFAULT_RETENTION = Retention()


class CheckpointStream:
    """An iteration's checkpoint written by binary COPY, on a connection and in a thread of its
    own, while its chunks arrive (``add``: the average's chunks in order, from
    ``StreamingAverage``): the COPY overlaps the training statement's result streams instead of
    following them. Committed by ``finish`` once the last chunk is in; ``abort`` rolls it back.
    The thread starts with the first chunk: a statement merged in the database sends none."""

    _END = object()

    def __init__(self, db: Database, run_id: int, iteration: int) -> None:
        self.db, self.run_id, self.iteration = db, run_id, iteration
        self._chunks: queue.Queue = queue.Queue()
        self._writer: threading.Thread | None = None
        self._error: BaseException | None = None
        self._aborted = False

    @property
    def started(self) -> bool:
        return self._writer is not None

    def add(self, chunk: int, values: np.ndarray) -> None:
        if self._writer is None:
            self._writer = threading.Thread(
                target=self._write, name="gpcnn-checkpoint", daemon=True
            )
            self._writer.start()
        self._chunks.put(values)  # a view of the average: read before the next one is written

    def _given(self):
        while (values := self._chunks.get()) is not self._END:
            yield values
        if self._aborted:
            raise TrainingError(f"the checkpoint of iteration {self.iteration} was abandoned")

    def _write(self) -> None:
        try:
            with self.db.begin() as conn:
                Catalog(conn, self.db.backend).store_streamed_checkpoint(
                    self.run_id, self.iteration, self._given()
                )
        except BaseException as e:  # raised by finish()
            self._error = e

    def finish(self) -> None:
        """Wait for the COPY and its commit; its error, if any, is raised here."""
        assert self._writer is not None  # finished only once started (the fit checks ``started``)
        self._chunks.put(self._END)
        self._writer.join()
        if self._error is not None:
            raise self._error

    def abort(self) -> None:
        """Roll the checkpoint back (the iteration failed); no error of its own is raised."""
        if self._writer is not None:
            self._aborted = True
            self._chunks.put(self._END)
            self._writer.join()


class IterationStore:
    """One run's stored iterations: its rows so far (what retention decides on), and what
    follows an iteration in the background, one job at a time, overlapping the next: the
    retention rule's delete, and before it, where nothing reads it sooner, the checkpoint with
    its row (``record``)."""

    def __init__(
        self,
        db: Database,
        run_id: int,
        retention: Retention,
        keys: int,
        own_starts: bool,
        weight_count: int,
    ) -> None:
        self.db, self.backend, self.run_id, self.retention = db, db.backend, run_id, retention
        # each segment's next start is stored beside the model (per-segment rows to prune)
        self.keys, self.own_starts, self.weight_count = keys, own_starts, weight_count
        self.rows: list[dict] = []
        self._pruner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpcnn-retention")
        self._pruning: Future | None = None
        self._reading_model = False  # the pending job still reads the model's vector
        self._dead = 0  # vectors' worth of rows deleted since the last VACUUM (an upper bound)

    def checkpoint(self, iteration: int, vectors: dict) -> StoredStart:
        """The iteration's checkpoint, committed before the validation and the next start,
        which read the model from it instead of from a transfer of their own. Until its row
        follows (``record``), no resume sees it, and a resume's rerun replaces it."""
        with self.db.begin() as conn:
            Catalog(conn, self.backend).store_checkpoint(self.run_id, iteration, vectors)
        return StoredStart(self.run_id, iteration, self.weight_count)

    def streamed(self, streamed: CheckpointStream, iteration: int) -> StoredStart:
        """The checkpoint written while the average arrived, once whole and committed: what is
        left of its COPY after the streams ended (``checkpoint``'s contract)."""
        database_call(f"storing the checkpoint of iteration {iteration}", streamed.finish)
        return StoredStart(self.run_id, iteration, self.weight_count)

    def record(self, row: dict, vectors: dict | None, starts) -> None:
        """The iteration's row and each segment's next start (``starts``), in one transaction,
        after its checkpoint; then the retention rule's delete of older checkpoints. All of it
        in the background, overlapping the next iteration, when the checkpoint (``vectors``) is
        not stored yet: a rule that sends its start anyway gains the checkpoint's COPY (the row
        then commits with its checkpoint, in one transaction). Else only the delete: deleting a
        100 MB checkpoint's TOAST rows took 0.13-0.34 s in line (an A/B run, in git history
        before ce358ee: bench/results/retention-overlap-ab.txt). Either way a resume never lacks
        the checkpoint it needs, a background error stops the fit before another row is stored, and a delete
        that never ran leaves only checkpoints that the next one removes."""
        self.wait()  # the previous iteration's: its error stops the fit before this row is stored
        self.rows.append(row)
        iteration = row["iteration"]
        keep = sorted(self.retention.keep(self.rows))
        if vectors is None:
            self._commit(row, None, starts)
        self._reading_model = vectors is not None
        self._pruning = self._pruner.submit(
            self._after_iteration, row, vectors, starts, keep, iteration
        )

    def _after_iteration(self, row, vectors, starts, keep: list[int], iteration: int) -> None:
        if vectors is not None:
            database_call(f"storing iteration {iteration}", self._commit, row, vectors, starts)
        # Deleting what retention discards, and reclaiming it, may run twice.
        database_call("the retention rule", once_more_if_lost, self._prune, keep, iteration)

    def _commit(self, row: dict, vectors: dict | None, starts) -> None:
        """The row (with the checkpoint, when given, and each segment's next start), in one
        transaction: from its commit on, a resume continues from this iteration."""
        with self.db.begin() as conn:
            catalog = Catalog(conn, self.backend)
            if vectors is not None:
                catalog.store_checkpoint(self.run_id, row["iteration"], vectors)
            catalog.insert_iteration(self.run_id, row)
            if starts is not None:
                catalog.replace_segment_starts(self.run_id, row["iteration"], starts)

    def model_unread(self) -> bool:
        """Whether the model's vector may be overwritten (the next average written into it):
        no background job still reads it."""
        pending = self._pruning
        return pending is None or not self._reading_model or pending.done()

    def _prune(self, keep: list[int], up_to: int) -> None:
        """Delete what retention discards; once the rows deleted since the last VACUUM (a pruned
        checkpoint and a transfer per iteration, each key's start and its transfer for
        per-segment rules) are as many vectors as the live ones, reclaim their space: dead rows
        would otherwise grow without bound where autovacuum is off or lags, and a VACUUM per
        iteration would cost more than it needs to (1-1.4 s at 25M weights, scanning the whole
        new checkpoint). So the tables stay within about twice their live bytes, plus the rows a
        running statement still sees."""
        with self.db.begin() as conn:
            Catalog(conn, self.backend).prune_checkpoints(self.run_id, keep, up_to)
        keys = self.keys
        self._dead += 2 * keys + 1 if self.own_starts else 2
        if self._dead >= len(keep) + (keys if self.own_starts else 0):
            reclaim(self.backend)
            self._dead = 0

    def wait(self) -> None:
        """Wait for the background job still running (a checkpoint and its row, the retention
        rule's delete); its error, if any, is raised here."""
        pending, self._pruning = self._pruning, None
        if pending is not None:
            pending.result()

    def close(self) -> None:
        """Let a background job still running finish, whatever ended the fit (its error is not
        raised: another one is on its way, or ``wait`` has raised it already)."""
        self._pruner.shutdown(wait=True)
