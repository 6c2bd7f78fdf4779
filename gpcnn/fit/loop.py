"""The Keras-style loop of one fit: a run started (or resumed), then one iteration per epoch to
callbacks, with the learning rate the client's optimizer sets, validation, progress and the run's
status; the segment sessions held for the whole call.

``initialize`` creates or checks the run; ``run`` holds the sessions, starts ``Training`` from the
start weights or the stored run, and iterates until ``total`` or a callback's ``stop_training``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpcnn.data.label_skew import skew_warning
from gpcnn.data.tables import ImageTable, describe
from gpcnn.engines import Database
from gpcnn.engines.install import ensure_installed
from gpcnn.engines.sessions import SegmentSessions
from gpcnn.fit import runs
from gpcnn.fit.database_errors import TrainingError, database_call
from gpcnn.fit.diagnostics import flat_row
from gpcnn.fit.schedule import Slice
from gpcnn.fit.training import Plan, Training
from gpcnn.kernel import wire
from gpcnn.kernel.keras_setup import keras_module

BATCH_HOOKS = ("on_train_batch_begin", "on_train_batch_end", "on_batch_begin", "on_batch_end")


class HeldSessions:
    """The segment sessions of one call (``fit``, ``evaluate``, ``predict``; a call inside one,
    such as a callback's ``evaluate``, uses its caller's): taken from the process's pool of idle
    sessions, given back at the end, closed on an error (a statement may have been cancelled
    mid-way)."""

    def __init__(self) -> None:
        self.sessions: SegmentSessions | None = None

    @contextlib.contextmanager
    def __call__(
        self, db: Database, segments: int, threads: int | None
    ) -> Iterator[SegmentSessions]:
        if self.sessions is not None:
            yield self.sessions
            return
        self.sessions = db.backend.open_sessions(segments, threads)
        try:
            yield self.sessions
        except BaseException:
            self.sessions.close()
            raise
        else:
            self.sessions.release()
        finally:
            self.sessions = None


def described(db: Database, table) -> ImageTable:
    """The image table a fit trains on (``describe`` parses and resolves its name), gpcnn's
    functions installed first."""
    ensure_installed(db)
    return describe(db, table)


@dataclass
class Start:
    """What a run starts from: a new run's weights (``run`` takes them out, so that only the rule
    keeps them), or its stored state."""

    run_id: int
    weights: np.ndarray | None = None
    stored: runs.StoredRun | None = None


def initialize(
    db: Database,
    info: ImageTable,
    model_json: str,
    manifest: list[dict],
    params: dict,
    resume: int | None,
    source: Any,
) -> Start:
    """A new run starting from the weights of the Keras model ``source``, or the stored run
    ``resume`` (checked: the same table and model, an iteration stored)."""
    if resume is None:
        weights = wire.flatten(source.get_weights())
        return Start(runs.create_run(db, str(info.table), params, model_json), weights=weights)
    stored = runs.load_run(db, resume)
    if stored.weights is None:
        raise ValueError(f"run {resume} stored no iteration yet: start a new fit")
    if stored.params.get("merge") == "hopper" and params.get("merge") != "hopper":
        raise ValueError(
            f"run {resume} is one configuration of a model-hopper search: continue it with "
            "gpcnn.fit_multiple(..., resume=<the search's run ids>)"
        )
    if stored.table != str(info.table):
        raise ValueError(f"run {resume} trained {stored.table}, not {info.table}")
    if stored.weights.size != sum(wire.sizes(manifest)):
        raise ValueError(f"run {resume} trained another model: resume it with the same one")
    return Start(resume, stored=stored)


def run(
    plan: Plan,
    start: Start,
    *,
    model: Any,
    history: list[dict],
    held: HeldSessions,
    callbacks: Sequence[Any] | None,
    verbose: int,
    total: int,
) -> None:
    """Iterations ``len(history) + 1`` to ``total``: each row appended to ``history``, the merged
    weights into ``model`` (the callbacks' model), the run's status stored at the end."""
    from gpcnn.fit.progress import default_callbacks

    db, options, first = plan.db, plan.options, len(history) + 1
    rates = LearningRates(model, options.batch_size, plan.local_epochs, plan.slices)
    # a label-skewed table's segments differ by design: its skew warning speaks for them
    skewed = skew_warning(plan.info) is not None
    defaults = default_callbacks(
        plan.run_id, verbose, first, total, history, not skewed, plan.early
    )
    model.stop_training = False
    hooks = keras_module().callbacks.CallbackList(
        [*defaults, *(callbacks or [])], model=model, epochs=total, verbose=0, steps=None
    )
    with held(db, plan.info.segments, options.threads) as sessions:
        training = Training(plan, sessions)
        status = "finished"
        try:
            if start.stored is not None:
                training.restore(start.stored)
                runs.set_status(db, plan.run_id, "running")
            else:
                weights, start.weights = start.weights, None
                assert weights is not None  # a new run starts from weights, a resumed one stored
                training.start(weights)
                del weights  # the rule keeps them, and replaces them at the first merge
            wire.set_model_weights(model, plan.rule.model())
            hooks.on_train_begin()
            for iteration in range(first, total + 1):
                hooks.on_epoch_begin(iteration - 1)
                rate = rates.at(iteration)
                row = database_call(f"iteration {iteration}", training.step, iteration, rate)
                wire.set_model_weights(model, plan.rule.model())
                history.append(row)
                hooks.on_epoch_end(iteration - 1, logs=_logs(row))
                if model.stop_training:
                    status = "stopped_early"
                    break
            training.wait()
        except TrainingError as e:
            _record_failure(db, plan.run_id, e)
            raise e.continued(_resume_hint(plan.run_id, history)) from None
        except BaseException as e:
            _record_failure(db, plan.run_id, e)
            raise
        finally:
            training.close()
            for callback in defaults:
                getattr(callback, "close", lambda: None)()
    runs.set_status(db, plan.run_id, status)
    hooks.on_train_end(logs=_logs(history[-1]) if history else None)


class LearningRates:
    """What the segments set before an iteration, from the client's optimizer: the step of its
    ``LearningRateSchedule`` (the batches the busiest segment trained so far), so the schedule
    continues across merges, or the rate that callbacks may have changed on the model."""

    def __init__(self, model: Any, batch_size: int, epochs: int, slices: Iterable[Slice]) -> None:
        keras = keras_module()
        self.model = model
        rate = getattr(model.optimizer, "_learning_rate", None)
        schedules = keras.optimizers.schedules
        self.schedule = rate if isinstance(rate, schedules.LearningRateSchedule) else None
        self.steps = max(max(p.batches(int(batch_size), int(epochs))) for p in slices)

    def at(self, iteration: int) -> dict:
        if self.schedule is not None:
            return {"optimizer_step": int((iteration - 1) * self.steps)}
        rate = keras_module().ops.convert_to_numpy(self.model.optimizer.learning_rate)
        return {"learning_rate": float(rate)}


def check_callbacks(callbacks: Sequence[Any] | None) -> None:
    """Refuse, before any work, a callback that acts per batch: the batches run inside the
    segments, out of its reach."""
    keras = keras_module()
    for callback in callbacks or []:
        hooks = _batch_hooks(keras, callback)
        if hooks:
            raise ValueError(
                f"{type(callback).__name__} acts per batch ({', '.join(hooks)}), but the "
                "batches run inside the segments: gpcnn calls the epoch hooks only, one "
                "epoch per iteration (TensorBoard with update_freq='epoch' and no profiling, "
                "ModelCheckpoint with save_freq='epoch' are fine)"
            )


def _batch_hooks(keras, callback) -> list[str]:
    """The per-batch hooks a callback really uses (Keras's own that only log per epoch, as
    configured, use none)."""
    callbacks = keras.callbacks
    if isinstance(callback, callbacks.TensorBoard):
        epochal = callback.update_freq == "epoch" and not getattr(callback, "_stop_batch", 0)
        return [] if epochal else ["update_freq or profile_batch"]
    if isinstance(callback, callbacks.ModelCheckpoint):
        return [] if callback.save_freq == "epoch" else ["save_freq"]
    base = callbacks.Callback
    return [
        hook
        for hook in BATCH_HOOKS
        if getattr(type(callback), hook) is not getattr(base, hook) or hook in vars(callback)
    ]


def _logs(row: dict) -> dict:
    """The iteration's numbers, as Keras callbacks read logs (the epoch is their argument:
    ``epoch`` and ``iteration`` would collide with ModelCheckpoint's ``{epoch}``); each segment's
    diagnostics flat, as ``<name>_segment_<key>`` (``diagnostics.flat_row``)."""
    return {
        k: v
        for k, v in flat_row(row).items()
        if k not in ("epoch", "iteration")
        and isinstance(v, int | float)
        and not isinstance(v, bool)
    }


def _record_failure(db: Database, run_id: int, error: BaseException) -> None:
    """The run's status after an exception: ``interrupted`` by Ctrl-C (or another exit), else
    ``failed``; the server may be gone, and that error wins."""
    status = "failed" if isinstance(error, Exception) else "interrupted"
    with contextlib.suppress(Exception):  # unreachable: the run stays "running", resumable
        runs.set_status(db, run_id, status, f"{type(error).__name__}: {error}"[:2000])


def _resume_hint(run_id: int, history: list[dict]) -> str:
    if not history:
        return f"run {run_id} stored no iteration: start a new fit"
    last = history[-1]["iteration"]
    return f"run {run_id} keeps iteration {last}: fit(table, resume={run_id}) continues it"
