"""A fit's history drawn: ``plot_history`` (loss and accuracy against epoch with the segments'
losses as a band, and the drift ratio on its own panel) and ``live_plot``, a Keras callback that
redraws it as the fit runs (in a notebook, or into an image file)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpcnn.engines import Database
from gpcnn.fit import runs
from gpcnn.kernel.keras_setup import keras_module

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def _rows(source: Any, database: Database | str | None) -> tuple[list[dict], str]:
    """The history's rows and the figure's title, from an estimator, rows or a run id."""
    if isinstance(source, int):
        return runs.show_run(database, source)["history"], f"Run {source}"
    rows = getattr(source, "history_", source)
    run_id = getattr(source, "run_id_", None)
    return list(rows), ("Fit" if run_id is None else f"Run {run_id}")


def _series(rows: Sequence[dict], key: str) -> tuple[list[float], list[float]]:
    points = [(r["epoch"], r[key]) for r in rows if r.get(key) is not None]
    return [e for e, _ in points], [v for _, v in points]


def plot_history(
    source: Any, database: Database | str | None = None, *, metric: str = "accuracy"
) -> Figure:
    """Draw a fit's history: loss, ``metric`` and the drift ratio against epoch.

    Parameters
    ----------
    source : GreenplumCNN, sequence of dict or int
        A fitted estimator, its ``history_`` (rows of one iteration each), or a stored run's id.
    database : Database, str or None
        Where a run id is stored (None: the default database); unused otherwise.
    metric : str, default "accuracy"
        The metric of the second panel (training and validation).

    Returns
    -------
    matplotlib.figure.Figure
        Two panels (loss; ``metric``), a third for the drift ratio when the fit recorded one.
        The shaded band is the range of the segments' training losses, lowest to highest.

    Examples
    --------
    >>> fig = gpcnn.plot_history(est)  # doctest: +SKIP
    >>> fig.savefig("history.png")  # doctest: +SKIP
    """
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError(
            "plot_history draws with matplotlib: pip install 'gpcnn[study]'"
        ) from None
    rows, title = _rows(source, database)
    if not rows:
        raise ValueError("the history is empty: fit first, or name a run with stored iterations")
    drift = any(r.get("drift_ratio") is not None for r in rows)
    fig = Figure(figsize=(4.2 * (3 if drift else 2), 3.6), layout="constrained")
    axes = fig.subplots(1, 3 if drift else 2)
    fig.suptitle(f"{title}: loss, {metric} and drift of the segments by epoch")
    for ax, key, words in ((axes[0], "loss", "loss"), (axes[1], metric, metric)):
        for prefix, label in (("", "training"), ("val_", "validation")):
            xs, ys = _series(rows, prefix + key)
            if xs:
                ax.plot(xs, ys, marker="o" if prefix else None, markersize=3, label=label)
        ax.set_title(words.capitalize())
        ax.set_xlabel("epoch (passes over the data)")
        ax.set_ylabel(words)
    segments = [r for r in rows if r.get("per_segment")]
    if segments:
        losses = [
            [s["loss"] for s in r["per_segment"] if s.get("loss") is not None] for r in segments
        ]
        kept = [(r["epoch"], ls) for r, ls in zip(segments, losses, strict=True) if ls]
        axes[0].fill_between(
            [e for e, _ in kept],
            [min(ls) for _, ls in kept],
            [max(ls) for _, ls in kept],
            alpha=0.25,
            label="segments' losses (lowest to highest)",
        )
    for ax in axes[:2]:
        ax.legend(fontsize="small")
    if drift:
        xs, ys = _series(rows, "drift_ratio")
        axes[2].plot(xs, ys, color="tab:red")
        axes[2].set_title("Drift ratio")
        axes[2].set_xlabel("epoch (passes over the data)")
        axes[2].set_ylabel("segments' spread / merged step")
    return fig


def live_plot(estimator: Any, path: str | Path | None = None, **plot_options: Any) -> Any:
    """A Keras callback that redraws ``plot_history(estimator)`` after every iteration.

    Parameters
    ----------
    estimator : GreenplumCNN
        The estimator whose ``fit`` gets the callback (its ``history_`` is drawn).
    path : str or pathlib.Path, optional
        An image file written after every iteration (e.g. ``history.png``). None: the figure
        is shown in the notebook, in place, and nothing happens outside one.
    **plot_options
        Passed to ``plot_history`` (``metric``).

    Returns
    -------
    keras.callbacks.Callback

    Examples
    --------
    >>> est.fit("fm.train", callbacks=[gpcnn.live_plot(est)])  # doctest: +SKIP
    """
    keras = keras_module()

    # Keras's Callback is reached only once keras_module() has set TensorFlow up: no static type
    class LivePlot(keras.callbacks.Callback):  # type: ignore[name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.handle: Any = None

        def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
            figure = plot_history(estimator, **plot_options)
            if path is not None:
                figure.savefig(path)
                return
            try:
                from IPython import get_ipython
                from IPython.display import display
            except ImportError:
                return
            if get_ipython() is None:
                return
            if self.handle is None:
                self.handle = display(figure, display_id=True)
            else:
                self.handle.update(figure)

    return LivePlot()
