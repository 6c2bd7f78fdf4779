"""One fit's iterations: what each segment starts from, the aggregate query, the merge rule.

Per iteration: the rule says what every segment starts from (one model for all, or each its own),
sent through ``transfers`` (or read from the checkpoint just stored, when that is the start) and
joined by key in the query; the ``train`` aggregate runs on every
segment over this iteration's slice of its buffers; the result is either the image-weighted
average (merged chunk by chunk) or each segment's model; the rule makes the next model, stored
as a chunked checkpoint. When the next start is that model, the checkpoint is stored at once and
the validation and the next iteration read it; else it is stored in the background, with the
iteration's row and what a resume needs in one transaction, while the next iteration trains.
The retention rule's delete of older checkpoints, with the VACUUM that reuses their space, runs
in the background too.
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from gpcnn.data.tables import ImageTable, buffer_counts
from gpcnn.engines import Database
from gpcnn.engines.catalog import Catalog, reclaim
from gpcnn.engines.sessions import SegmentSessions
from gpcnn.engines.transfers import EVERY_KEY, StoredStart
from gpcnn.fit import rules
from gpcnn.fit.errors import TrainingError, database_call, once_more_if_lost
from gpcnn.kernel import averaging, wire
from gpcnn.kernel.protocol import SegmentOptions


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


@dataclass(frozen=True)
class Slice:
    """The buffers of every key that one iteration trains on (× local epochs)."""

    first: list[int]
    stop: list[int]
    expected: list[int]
    sizes: list[list[int]]  # each key's buffers' image counts (one pass)

    def batches(self, batch_size: int, epochs: int) -> list[int]:
        """Mini-batches each key trains in this slice (a buffer's last batch may be short)."""
        return [epochs * sum(math.ceil(n / batch_size) for n in key) for key in self.sizes]


@dataclass(frozen=True)
class Schedule:
    """Which slice each iteration trains and the epoch it has reached after it: ``counts[e]``
    merges in epoch e + 1, the last count repeating (post-local SGD, Lin et al. 2020:
    ``[8, 8, 1]`` merges 8 times per epoch for 2 epochs, then once per epoch)."""

    counts: tuple[int, ...]
    cuts: dict[int, list[Slice]]  # the slices of each count
    epochs: int  # local epochs per iteration

    def at(self, iteration: int) -> tuple[Slice, float]:
        i, epoch = iteration - 1, 0
        for m in self.counts[:-1]:
            if i < m:
                return self.cuts[m][i], (epoch + (i + 1) / m) * self.epochs
            i, epoch = i - m, epoch + 1
        m = self.counts[-1]
        return self.cuts[m][i % m], (epoch + (i + 1) / m) * self.epochs

    def __iter__(self):
        return (part for cut in self.cuts.values() for part in cut)


def plan_slices(
    db: Database, info: ImageTable, merges_per_epoch: int | Sequence[int], epochs: int
) -> Schedule:
    """Cut each key's buffers, in order, into ``merges_per_epoch`` consecutive groups (a list:
    the count of each epoch, the last repeating)."""
    counts = (
        (int(merges_per_epoch),)
        if isinstance(merges_per_epoch, int | np.integer)
        else tuple(int(m) for m in merges_per_epoch)
    )
    buffers = buffer_counts(db, info)
    fewest = min(len(b) for b in buffers.values())
    if fewest < max(counts):
        raise ValueError(
            f"merges_per_epoch={max(counts)}, but a segment of {info.table} has only {fewest} "
            "buffers: reload the table with a smaller buffer_size"
        )
    return Schedule(counts, {m: _cut(info, buffers, m, epochs) for m in counts}, epochs)


def _cut(info: ImageTable, buffers: dict, merges: int, epochs: int) -> list[Slice]:
    groups = {k: np.array_split(np.arange(len(b)), merges) for k, b in buffers.items()}
    slices = []
    for j in range(merges):
        first, stop, expected, sizes = [], [], [], []
        for key in info.keys:
            part = [buffers[key][i] for i in groups[key][j]]
            first.append(part[0][0])
            stop.append(part[-1][0] + 1)
            expected.append(sum(n for _, n in part) * epochs)
            sizes.append([n for _, n in part])
        slices.append(Slice(first, stop, expected, sizes))
    return slices


def evaluate_table(
    db: Database,
    sessions: SegmentSessions,
    info: ImageTable,
    model_json: str,
    options: SegmentOptions,
    weights: bytes | np.ndarray | StoredStart,
) -> dict:
    """Image-weighted loss and metrics of ``weights`` (or of a stored checkpoint's model) over a
    whole table, in the database."""
    params = {"model": model_json, "options": options.replace(image_shape=info.image_shape)}
    vector = wire.from_bytes(weights) if isinstance(weights, bytes) else weights
    metrics = database_call(
        "evaluation",
        db.backend.run_evaluation,
        sessions,
        info.table.sql(db.backend),
        params,
        info.keys,
        vector,
    )
    return {k: float(v) for k, v in metrics.items()}


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


class Training:
    """The state of one fit between iterations."""

    def __init__(
        self,
        *,
        db: Database,
        sessions: SegmentSessions,
        info: ImageTable,
        run_id: int,
        model_json: str,
        options: SegmentOptions,
        manifest: list[dict],
        rule: rules.MergeRule,
        slices: Schedule,
        local_epochs: int,
        validation,  # a fit.validation.Validation
        retention: Retention | None = None,
    ) -> None:
        self.db, self.backend, self.sessions, self.info = db, db.backend, sessions, info
        self.run_id, self.model_json = run_id, model_json
        self.options = options.replace(**rule.in_database())  # FedProx's mu, SCAFFOLD's flag
        self.rule, self.slices, self.local_epochs = rule, slices, local_epochs
        self.validation = validation
        self.retention = retention or DEFAULT_RETENTION
        self.rows: list[dict] = []  # the run's history so far (what retention decides on)
        self.weight_count = sum(wire.sizes(manifest))
        self.policy = options.optimizer_state
        # Each segment needs its own start when the rule keeps per-segment models or each
        # segment keeps its optimizer state ("local").
        self.per_segment = rule.per_segment or self.policy == "local"
        self.shared_optimizer: np.ndarray | None = None
        self.segment_optimizers: dict[int, np.ndarray | None] = {k: None for k in info.keys}
        # The checkpoint just stored, when it is exactly the next start (see ``_store``).
        self.stored_start: StoredStart | None = None
        # What follows an iteration in the background, one at a time, overlapping the next:
        # the retention rule's delete, and before it, where nothing reads it sooner, the
        # checkpoint with its row (``_store``).
        self._pruner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpcnn-retention")
        self._pruning: Future | None = None
        self._reading_model = False  # the pending job still reads the model's vector
        self._dead = 0  # vectors' worth of rows deleted since the last VACUUM (an upper bound)

    # -- start / resume ---------------------------------------------------------------------

    def start(self, weights: np.ndarray) -> None:
        self.rule.start(weights, self.info.keys)
        if self.per_segment:
            with self.db.begin() as conn:
                Catalog(conn, self.backend).replace_segment_starts(
                    self.run_id, 0, self._segment_starts()
                )

    def starts(self) -> dict[int, np.ndarray]:
        """What each segment starts this iteration from: weights, then the optimizer state when
        one is sent; one vector for all keys (``EVERY_KEY``) unless each has its own."""
        if not self.per_segment:
            vector = self.rule.sent(self.info.keys)
            if self.shared_optimizer is not None:
                vector = np.concatenate([vector, self.shared_optimizer])
            return {EVERY_KEY: np.asarray(vector, dtype=np.float32)}
        starts = {}
        for key, (weights, optimizer) in self._segment_starts().items():
            parts = [weights, *([] if optimizer is None else [optimizer])]
            if self.rule.corrects:  # SCAFFOLD's c - c_i ends the start
                parts.append(self.rule.correction(key))
            vector = parts[0] if len(parts) == 1 else np.concatenate(parts)
            starts[key] = np.asarray(vector, dtype=np.float32)
        return starts

    def restore(self, stored) -> None:
        """Continue from a ``runs.StoredRun``."""
        self.rows = list(stored.iterations)
        segments = {k: start.weights for k, start in stored.segment_starts.items()}
        self.rule.restore(stored.weights, stored.rule_state, segments)
        if stored.optimizer is not None:
            self.shared_optimizer = stored.optimizer
        self.segment_optimizers.update(
            {k: start.optimizer for k, start in stored.segment_starts.items()}
        )

    def _segment_starts(self) -> dict[int, tuple[np.ndarray, np.ndarray | None]]:
        sent = self.rule.sent(self.info.keys)
        starts = {}
        for key in self.info.keys:
            weights = sent[key] if isinstance(sent, dict) else sent
            optimizer = (
                self.segment_optimizers.get(key)
                if self.policy == "local"
                else self.shared_optimizer
            )
            starts[key] = (weights, optimizer)
        return starts

    # -- one iteration ----------------------------------------------------------------------

    def step(self, iteration: int, rate: dict) -> dict:
        """Train, merge, evaluate and store iteration ``iteration`` at learning ``rate`` (its
        ``learning_rate`` or ``optimizer_step``); return its history row."""
        started = time.perf_counter()
        part, epoch = self.slices.at(iteration)
        params = {
            "model": self.model_json,
            "epochs": self.local_epochs,
            "keys": list(self.info.keys),
            "first": part.first,
            "stop": part.stop,
            "expected": part.expected,
        }
        starts = self.stored_start or self.starts()
        first = None if isinstance(starts, StoredStart) else next(iter(starts.values()))
        weights_and_correction = self.weight_count * (1 + self.rule.corrects)
        sent_optimizer = first is not None and first.size > weights_and_correction
        params["options"] = self.options.for_iteration(
            iteration=iteration, optimizer_sent=sent_optimizer, **rate
        )
        merged_in_db = not (self.rule.per_segment or self.policy == "local")
        overlapped = self._next_start_if_stored(iteration) is None
        # The checkpoint that is the average alone is written as the average arrives.
        streamed = (
            CheckpointStream(self.db, self.run_id, iteration)
            if merged_in_db and not overlapped and self._stores_average()
            else None
        )
        try:
            result = database_call(
                "training",
                self.backend.run_training,
                self.sessions,
                self.info.table.sql(self.backend),
                params,
                self.info.keys,
                starts,
                merged_in_db,
                self.rule.average_buffer() if merged_in_db and self._model_unread() else None,
                None if streamed is None else streamed.add,
            )
            db_seconds = time.perf_counter() - started
            metrics, average, segments, controls = self._decode(result, merged_in_db)
            if metrics["images"] != sum(part.expected):
                raise TrainingError(
                    f"iteration {iteration}: the segments trained on {metrics['images']} images, "
                    f"expected {sum(part.expected)} (was {self.info.table} changed since loading?)"
                )
            if not np.isfinite(average).all():
                raise TrainingError(
                    f"iteration {iteration} produced non-finite weights (diverged): lower the "
                    "learning rate"
                )
        except BaseException:
            if streamed is not None:
                streamed.abort()
            raise
        counts = dict(zip(self.info.keys, part.expected, strict=True))
        if self.rule.corrects:
            self.rule.update(average, segments, counts, controls=controls)
        else:
            self.rule.update(average, segments, counts)
        model = self.rule.model()
        vectors = self._checkpoint_vectors(model)
        # Stored now when the next start or the validation reads it; else with its row, later.
        if overlapped:
            stored = None
        elif streamed is not None and streamed.started:
            stored = self._streamed_checkpoint(streamed, iteration)
        else:
            stored = self._store_checkpoint(iteration, vectors)
        row = {
            "iteration": iteration,
            "epoch": epoch,
            "images": int(metrics.pop("images")),
            **{k: float(v) for k, v in metrics.items()},
            **self._validation(model, stored, segments, iteration),
            "db_seconds": db_seconds,
        }
        row["seconds"] = time.perf_counter() - started
        self._store(row, vectors if overlapped else None)
        return row

    def _decode(self, result, merged_in_db: bool):
        """(train metrics, averaged weights, each segment's weights or None, each segment's new
        control variate or None); optimizer parts of the vectors go to the optimizer-state
        policy."""
        if merged_in_db:
            metrics, vector = dict(result.metrics), result.vector
            average, optimizer = vector[: self.weight_count], vector[self.weight_count :]
            if self.policy == "average":
                self.shared_optimizer = optimizer.copy()
            return metrics, average, None, None
        decoded, controls = result.per_key, None
        if self.rule.corrects:  # SCAFFOLD's c_i+ ends each vector
            controls = {k: v[-self.weight_count :] for k, (_, v) in decoded.items()}
            decoded = {k: (m, v[: -self.weight_count]) for k, (m, v) in decoded.items()}
        counts = [m["images"] for m, _ in decoded.values()]
        metrics = {
            name: sum(m[name] * m["images"] for m, _ in decoded.values()) / sum(counts)
            for name in next(iter(decoded.values()))[0]
        }
        metrics["images"] = sum(counts)
        segments = {k: v[: self.weight_count] for k, (_, v) in decoded.items()}
        average = averaging.weighted_average(list(segments.values()), counts)
        if self.policy == "local":
            self.segment_optimizers = {
                k: v[self.weight_count :].copy() for k, (_, v) in decoded.items()
            }
        elif self.policy == "average":
            self.shared_optimizer = averaging.weighted_average(
                [v[self.weight_count :] for _, v in decoded.values()], counts
            )
        return metrics, average, segments, controls

    def _validation(
        self, model: np.ndarray, stored: StoredStart | None, segments: dict | None, iteration: int
    ) -> dict:
        values = self.validation.evaluate(self.sessions, model, stored, iteration)
        if values is None:
            return {}
        row = {f"val_{k}": v for k, v in values.items() if k != "images"}
        if isinstance(self.rule, rules.NoMerge):
            # K workers that never merge: their own curves, their mean, and the one-shot average.
            per_key = {
                k: self.validation.evaluate(self.sessions, w, None, iteration)
                for k, w in segments.items()
            }
            row = {f"{name}_average": v for name, v in row.items()}
            for name in values:
                if name == "images":
                    continue
                for key, v in per_key.items():
                    row[f"val_{name}_segment_{key}"] = v[name]
                row[f"val_{name}"] = float(np.mean([v[name] for v in per_key.values()]))
        return row

    def _checkpoint_vectors(self, model: np.ndarray) -> dict[str, np.ndarray | None]:
        """The iteration's checkpoint: model, rule and optimizer state (``RUN_PARTS``)."""
        return {
            "weights": model,
            "rule_state": self.rule.state(),
            "optimizer": self.shared_optimizer,
        }

    def _store_checkpoint(self, iteration: int, vectors: dict) -> StoredStart:
        """The iteration's checkpoint, committed before the validation and the next start,
        which read the model from it instead of from a transfer of their own. Until its row
        follows (``_store``), no resume sees it, and a resume's rerun replaces it."""
        with self.db.begin() as conn:
            Catalog(conn, self.backend).store_checkpoint(self.run_id, iteration, vectors)
        return StoredStart(self.run_id, iteration, self.weight_count)

    def _stores_average(self) -> bool:
        """Whether the checkpoint is the iteration's average alone: a rule whose next model is
        that average (``average_buffer``), no rule state, no optimizer state in the vectors."""
        return self.policy == "reset" and self.rule.average_buffer() is not None

    def _streamed_checkpoint(self, streamed: CheckpointStream, iteration: int) -> StoredStart:
        """The checkpoint written while the average arrived, once whole and committed: what is
        left of its COPY after the streams ended (``_store_checkpoint``'s contract)."""
        database_call(f"storing the checkpoint of iteration {iteration}", streamed.finish)
        return StoredStart(self.run_id, iteration, self.weight_count)

    def _store(self, row: dict, vectors: dict | None) -> None:
        """The iteration's row and each segment's next start, in one transaction, after its
        checkpoint; then the retention rule's delete of older checkpoints. All of it in the
        background, overlapping the next iteration, when the checkpoint (``vectors``) is not
        stored yet: a rule that sends its start anyway gains the checkpoint's COPY (the row
        then commits with its checkpoint, in one transaction). Else only the delete: deleting a
        100 MB checkpoint's TOAST rows took 0.13-0.34 s in line
        (bench/results/retention-overlap-ab.txt). Either way a resume never lacks the checkpoint
        it needs, a background error stops the fit before another row is stored, and a delete
        that never ran leaves only checkpoints that the next one removes."""
        self.wait()  # the previous iteration's: its error stops the fit before this row is stored
        self.rows.append(row)
        iteration = row["iteration"]
        starts = self._segment_starts() if self.per_segment else None
        keep = sorted(self.retention.keep(self.rows))
        if vectors is None:
            self._commit(row, None, starts)
        self.stored_start = self._next_start_if_stored(iteration)
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

    def _model_unread(self) -> bool:
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
        keys = len(self.info.keys)
        self._dead += 2 * keys + 1 if self.per_segment else 2
        if self._dead >= len(keep) + (keys if self.per_segment else 0):
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

    def _next_start_if_stored(self, iteration: int) -> StoredStart | None:
        """The checkpoint of ``iteration`` as the next start, when every segment starts from
        exactly the model stored there (one vector for all, no optimizer state sent). Retention
        always keeps the last checkpoint."""
        if self.per_segment or self.shared_optimizer is not None or not self.rule.sends_model():
            return None
        return StoredStart(self.run_id, iteration, self.weight_count)
