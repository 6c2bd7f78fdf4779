"""One fit's iterations: what each segment starts from, the training statement, the merge rule.

Per iteration: the rule says what every segment starts from (one model for all, or each its own),
sent through ``transfers`` (or read from the checkpoint just stored, when that is the start) and
joined by key in the query; the ``train`` aggregate runs on every
segment over this iteration's slice of its buffers (``schedule``); the result is either the
image-weighted average (merged chunk by chunk) or each segment's model; the rule makes the next
model, stored as a chunked checkpoint. When the next start is that model, the checkpoint is
stored at once and the validation and the next iteration read it; else it is stored in the
background, with the iteration's row and what a resume needs in one transaction, while the next
iteration trains (``storage``). Start and trained vectors are cut and joined by their named
layout (``gpcnn.kernel.layout``): weights, optimizer state, the extras of the rule's local steps.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpcnn.data.tables import ImageTable
from gpcnn.engines import Database, TrainingCall
from gpcnn.engines.catalog import Catalog
from gpcnn.engines.sessions import SegmentSessions
from gpcnn.engines.transfers import EVERY_KEY, StoredStart
from gpcnn.fit import rules
from gpcnn.fit.database_errors import TrainingError, database_call
from gpcnn.fit.diagnostics import Diagnostics
from gpcnn.fit.forecast.early_warning import EarlyBasis
from gpcnn.fit.schedule import Schedule
from gpcnn.fit.storage import DEFAULT_RETENTION, CheckpointStream, IterationStore, Retention
from gpcnn.kernel import averaging, local_steps, wire
from gpcnn.kernel.layout import OPTIMIZER, WEIGHTS, model_layout
from gpcnn.kernel.protocol import SegmentOptions


@dataclass(frozen=True, kw_only=True)
class Plan:
    """What one fit trains: its run, table, model, options, rule and slices, and its validation
    (a ``fit.validation.Validation``); ``Training`` is built from it."""

    db: Database
    info: ImageTable
    run_id: int
    model_json: str
    options: SegmentOptions
    manifest: list[dict]
    rule: rules.MergeRule
    slices: Schedule
    local_epochs: int
    validation: Any
    early: EarlyBasis | None = None  # the early warning's, when these iterations end epoch 3


class Training:
    """The state of one fit between iterations: the ``plan``'s, trained in ``sessions``."""

    def __init__(
        self, plan: Plan, sessions: SegmentSessions, retention: Retention | None = None
    ) -> None:
        db, info, rule, options = plan.db, plan.info, plan.rule, plan.options
        self.db, self.backend, self.sessions, self.info = db, db.backend, sessions, info
        self.run_id, self.model_json = plan.run_id, plan.model_json
        self.options = options.with_local_steps(rule.in_database())
        self.rule, self.slices, self.local_epochs = rule, plan.slices, plan.local_epochs
        self.validation = plan.validation
        self.weight_count = sum(wire.sizes(plan.manifest))
        steps = [name for name, _ in self.options.local_steps]
        self.start_layout = model_layout(self.weight_count, local_steps.sends(steps))
        self.result_layout = model_layout(self.weight_count, local_steps.returns(steps))
        self.policy = options.optimizer_state
        # Each segment starts from a vector of its own when it keeps a model of its own (the
        # rule's ``per_segment``) or its own optimizer state ("local").
        self.own_starts = rule.per_segment or self.policy == "local"
        self.shared_optimizer: np.ndarray | None = None
        self.segment_optimizers: dict[int, np.ndarray | None] = {k: None for k in info.keys}
        # The checkpoint just stored, when it is exactly the next start (see ``_store``).
        self.stored_start: StoredStart | None = None
        self.storage = IterationStore(
            db,
            plan.run_id,
            retention or DEFAULT_RETENTION,
            len(info.keys),
            self.own_starts,
            self.weight_count,
        )

    @property
    def rows(self) -> list[dict]:
        """The run's history so far (what retention decides on)."""
        return self.storage.rows

    # -- start / resume ---------------------------------------------------------------------

    def start(self, weights: np.ndarray) -> None:
        self.rule.start(weights, self.info.keys)
        if self.own_starts:
            with self.db.begin() as conn:
                Catalog(conn, self.backend).replace_segment_starts(
                    self.run_id, 0, self._segment_starts()
                )

    def starts(self) -> dict[int, np.ndarray]:
        """What each segment starts this iteration from (``start_layout``): weights, then the
        optimizer state when one is sent, then the extras of the rule's local steps; one vector
        for all keys (``EVERY_KEY``) unless each has its own."""
        if not self.own_starts:
            weights = self.rule.sent(self.info.keys)
            assert not isinstance(weights, dict)  # only a per_segment rule sends one per key
            sent = {WEIGHTS: weights, OPTIMIZER: self.shared_optimizer}
            return {EVERY_KEY: self.start_layout.join(sent)}
        return {
            key: self.start_layout.join(
                {WEIGHTS: weights, OPTIMIZER: optimizer, **self.rule.start_extras(key)}
            )
            for key, (weights, optimizer) in self._segment_starts().items()
        }

    def restore(self, stored) -> None:
        """Continue from a ``runs.StoredRun``."""
        self.storage.rows = list(stored.iterations)
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
        sent_optimizer = first is not None and self.start_layout.sizes(first.size)[OPTIMIZER] > 0
        params["options"] = self.options.for_iteration(
            iteration=iteration, optimizer_sent=sent_optimizer, **rate
        )
        merged_in_db = not (self.rule.needs_segments or self.policy == "local")
        # The merge's step is measured against the start's weights (``Diagnostics``).
        reference = self.rule.sent(self.info.keys) if merged_in_db else None
        assert not isinstance(reference, dict)  # only a per_segment rule sends one per key
        overlapped = self._next_start_if_stored(iteration) is None
        # The checkpoint that is the average alone is written as the average arrives.
        streamed = (
            CheckpointStream(self.db, self.run_id, iteration)
            if merged_in_db and not overlapped and self._stores_average()
            else None
        )
        try:
            call = TrainingCall(
                table=self.info.table,
                params=params,
                keys=self.info.keys,
                starts=starts,
                merged=merged_in_db,
                into=(
                    self.rule.average_buffer()
                    if merged_in_db and self.storage.model_unread()
                    else None
                ),
                on_chunk=None if streamed is None else streamed.add,
                reference=reference,
            )
            result = database_call("training", self.backend.run_training, self.sessions, call)
            db_seconds = time.perf_counter() - started
            metrics, average, segments, extras = self._decode(result, merged_in_db)
            diagnostics = self._diagnostics(result, segments, average)
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
        steps = dict(
            zip(
                self.info.keys,
                part.batches(self.options.batch_size, self.local_epochs),
                strict=True,
            )
        )
        self.rule.merge(average, segments, counts, steps, **extras)
        model = self.rule.model()
        vectors = self._checkpoint_vectors(model)
        # Stored now when the next start or the validation reads it; else with its row, later.
        if overlapped:
            stored = None
        elif streamed is not None and streamed.started:
            stored = self.storage.streamed(streamed, iteration)
        else:
            stored = self.storage.checkpoint(iteration, vectors)
        row = {
            "iteration": iteration,
            "epoch": epoch,
            "images": int(metrics.pop("images")),
            **{k: float(v) for k, v in metrics.items()},
            **self._validation(model, stored, segments, iteration),
            "db_seconds": db_seconds,
            **diagnostics.row(),
        }
        row["seconds"] = time.perf_counter() - started
        self._store(row, vectors if overlapped else None)
        return row

    def _decode(self, result, merged_in_db: bool):
        """(train metrics, averaged weights, each segment's weights or None, the extras of the
        rule's local steps by name, each segment's); the optimizer parts of the vectors
        (``result_layout``) go to the optimizer-state policy."""
        if merged_in_db:
            metrics = dict(result.metrics)
            parts = self.result_layout.split(result.vector)
            if self.policy == "average":
                self.shared_optimizer = parts[OPTIMIZER].copy()
            return metrics, parts[WEIGHTS], None, {}
        decoded = {k: (m, self.result_layout.split(v)) for k, (m, v) in result.per_key.items()}
        extras = {
            name: {k: parts[name] for k, (_, parts) in decoded.items()}
            for name in self.result_layout.names()
            if name not in (WEIGHTS, OPTIMIZER)
        }
        counts = [m["images"] for m, _ in decoded.values()]
        metrics = {
            name: sum(m[name] * m["images"] for m, _ in decoded.values()) / sum(counts)
            for name in next(iter(decoded.values()))[0]
        }
        metrics["images"] = sum(counts)
        segments = {k: parts[WEIGHTS] for k, (_, parts) in decoded.items()}
        average = averaging.weighted_average(list(segments.values()), counts)
        if self.policy == "local":
            self.segment_optimizers = {k: p[OPTIMIZER].copy() for k, (_, p) in decoded.items()}
        elif self.policy == "average":
            self.shared_optimizer = averaging.weighted_average(
                [p[OPTIMIZER] for _, p in decoded.values()], counts
            )
        return metrics, average, segments, extras

    def _diagnostics(self, result, segments: dict | None, average) -> Diagnostics:
        """The iteration's ``Diagnostics``: from each segment's vectors when they came back, else
        from the segments' steps and the merge's. The starts are the weights the rule sent (one
        vector for all keys, or one per key), whatever form the statement took them in."""
        if segments is None:
            return Diagnostics.from_steps(result.segments, result.merged_step2)
        sent = self.rule.sent(self.info.keys)
        start_weights = {k: sent[k] if isinstance(sent, dict) else sent for k in self.info.keys}
        return Diagnostics.from_vectors(result.segments, start_weights, segments, average)

    def _validation(
        self, model: np.ndarray, stored: StoredStart | None, segments: dict | None, iteration: int
    ) -> dict:
        values = self.validation.evaluate(self.sessions, model, stored, iteration)
        if values is None:
            return {}
        row = {f"val_{k}": v for k, v in values.items() if k != "images"}
        if self.rule.validates_segments:
            assert segments is not None  # such a rule needs each segment's model back
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

    def _stores_average(self) -> bool:
        """Whether the checkpoint is the iteration's average alone: a rule whose next model is
        that average (``average_buffer``), no rule state, no optimizer state in the vectors."""
        return self.policy == "reset" and self.rule.average_buffer() is not None

    def _store(self, row: dict, vectors: dict | None) -> None:
        """The iteration's row, each segment's next start and the retention rule's delete
        (``IterationStore.record``: in the background, with the checkpoint ``vectors`` when it is
        not stored yet); the next start is then that checkpoint, when it is the model sent."""
        starts = self._segment_starts() if self.own_starts else None
        self.storage.record(row, vectors, starts)
        self.stored_start = self._next_start_if_stored(row["iteration"])

    def wait(self) -> None:
        """Wait for the background job still running; its error, if any, is raised here."""
        self.storage.wait()

    def close(self) -> None:
        """Let a background job still running finish, whatever ended the fit."""
        self.storage.close()

    def _next_start_if_stored(self, iteration: int) -> StoredStart | None:
        """The checkpoint of ``iteration`` as the next start, when every segment starts from
        exactly the model stored there (one vector for all, no optimizer state sent). Retention
        always keeps the last checkpoint."""
        if self.own_starts or self.shared_optimizer is not None or not self.rule.sends_model():
            return None
        return StoredStart(self.run_id, iteration, self.weight_count)
