"""What a fit tells while it runs, as Keras callbacks that every fit adds before the user's: the
``gpcnn`` logger's line per iteration, the early warning once epoch 3 ends
(``forecast.early_warning``), a warning for a segment far from the others (``outliers``), the
progress bar (``verbose=1``) and Keras's line per epoch (``verbose=2``). Imported when a fit
starts: it imports Keras."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from gpcnn.fit.forecast.early_warning import EARLY_EPOCHS, EarlyBasis, early_message
from gpcnn.fit.outliers import outliers
from gpcnn.kernel.keras_setup import keras_module

PROGRESS_KEYS = ("loss", "accuracy", "val_loss", "val_accuracy")
LOG = logging.getLogger("gpcnn")
if TYPE_CHECKING:  # the same class; at run time it comes after keras_module's settings
    from keras.callbacks import Callback
    from tqdm.auto import tqdm
else:
    Callback = keras_module().callbacks.Callback


def shown(logs: dict) -> dict:
    """The numbers a progress line shows, four decimals."""
    return {k: f"{logs[k]:.4f}" for k in PROGRESS_KEYS if k in logs}


class LogLines(Callback):
    """One ``INFO`` line per iteration on the ``gpcnn`` logger."""

    def __init__(self, run_id: int, total: int) -> None:
        super().__init__()
        self.run_id, self.total = run_id, total

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        assert logs is not None  # Keras's CallbackList passes a dict
        LOG.info("run %s iteration %d/%d: %s", self.run_id, epoch + 1, self.total, shown(logs))


class EarlyWarning(Callback):
    """The early warning, once, at the iteration that ends epoch 3: an ``INFO`` line on the
    ``gpcnn`` logger, and a printed line with ``verbose=2`` (not a ``WARNING``: the study and
    model searches run settings that are meant to lag, and their terminals stay quiet)."""

    def __init__(self, run_id: int, history: list[dict], verbose: int, basis: EarlyBasis) -> None:
        super().__init__()
        # the fit's own list: each row is in it before this hook runs
        self.run_id, self.history, self.verbose, self.basis = run_id, history, verbose, basis

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        before = self.history[-2]["epoch"] if len(self.history) > 1 else 0.0
        if not before < EARLY_EPOCHS <= self.history[-1]["epoch"]:
            return
        if (message := early_message(self.history, self.basis)) is None:
            return
        LOG.info("run %s: %s", self.run_id, message)
        if self.verbose == 2:
            print(f"Early warning: {message}")


class SegmentCheck(Callback):
    """A ``WARNING`` on the ``gpcnn`` logger the first time a segment's loss or step is far from
    the other segments' (``outliers``), once per segment and measure in a fit."""

    def __init__(self, history: list[dict]) -> None:
        super().__init__()
        self.history = history  # the fit's own list: each row is in it before this hook runs
        self.told: set[tuple[int, str]] = set()

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        row = self.history[-1]
        for found in outliers(row.get("per_segment") or []):
            if (found.key, found.measure) not in self.told:
                self.told.add((found.key, found.measure))
                LOG.warning("%s", found.message(row["iteration"]))


class ProgressBar(Callback):
    """A tqdm bar over the iterations this call runs; ``close`` ends it, whatever ended the fit."""

    def __init__(self, run_id: int, first: int, total: int) -> None:
        super().__init__()
        self.run_id, self.first, self.total = run_id, first, total
        self.bar: tqdm | None = None

    def on_train_begin(self, logs: dict | None = None) -> None:
        from tqdm.auto import tqdm

        self.bar = tqdm(total=self.total - self.first + 1, desc=f"run {self.run_id}", unit="it")

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        # on_train_begin made the bar; Keras's CallbackList passes a dict
        assert self.bar is not None and logs is not None
        self.bar.update(1)
        self.bar.set_postfix(shown(logs))

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class IterationLines(Callback):
    """Keras's ``verbose=2``: one printed line per iteration."""

    def __init__(self, total: int) -> None:
        super().__init__()
        self.total = total

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        assert logs is not None  # Keras's CallbackList passes a dict
        values = " - ".join(f"{k}: {v}" for k, v in shown(logs).items())
        print(f"Iteration {epoch + 1}/{self.total} - {logs['seconds']:.1f}s - {values}")


def default_callbacks(
    run_id: int,
    verbose: int,
    first: int,
    total: int,
    history: list[dict],
    check_segments: bool = True,
    early: EarlyBasis | None = None,
) -> list:
    """The callbacks of a fit running iterations ``first`` to ``total``, by ``verbose``;
    ``history``: the fit's rows, which the loop appends to; ``check_segments``: whether a
    segment far from the others is warned of (not on a table whose skew was warned of);
    ``early``: what the early warning stands on (None: these iterations do not end epoch 3)."""
    callbacks: list = [LogLines(run_id, total)]
    if early is not None:
        callbacks.append(EarlyWarning(run_id, history, verbose, early))
    if check_segments:
        callbacks.append(SegmentCheck(history))
    if verbose == 1 and total >= first:
        callbacks.append(ProgressBar(run_id, first, total))
    if verbose == 2:
        callbacks.append(IterationLines(total))
    return callbacks
