"""What each key of a marked number (``gpcnn.study.doc_numbers``) computes from a setting's
accuracies (``gpcnn.study.doc_results``). A key is a computation and its arguments, separated by
``/``. Every statistic is ``gpcnn.study.report``'s: the mean over seeds, the difference of two
settings' means with its standard error, and the study's rule, *real* only when the difference
exceeds twice that standard error, else *within noise*.

``acc/PART/SETTING/EPOCH``
    mean validation accuracy over the seeds, 4 decimals.
``cell/PART/SETTING/EPOCH``
    mean ± sd over the seeds (``report.cell``: 4 decimals; the mean alone for one seed).
``metric/PART/SETTING/EPOCH/METRIC[/DIGITS]``, ``pct/PART/SETTING/EPOCH``
    the mean over seeds of a history column (``val_loss``, ``loss``, ...), 2 decimals unless
    given; the mean validation accuracy in percent, 1 decimal.
``seed/PART/SETTING/EPOCH/INDEX[/DIGITS]``
    one seed's validation accuracy (INDEX in the seeds' order, from 0), 4 decimals unless given.
``seedgaps/PART/SETTING/REFERENCE/EPOCH``
    each seed's accuracy minus the reference's same seed, in points, 1 decimal each.
``wgap/PART/SETTING/REFERENCE/FIRST/LAST``
    the difference of the two settings' ``window`` means, in points, its size with 1 decimal.
``each/PART/SETTING/EPOCH``, ``sd/PART/SETTING/EPOCH``
    each seed's validation accuracy in the seeds' order, 4 decimals; their sd in points, 1 decimal.
``window/PART/SETTING/FIRST/LAST``
    the mean over seeds of each seed's mean accuracy over epochs FIRST to LAST, 4 decimals.
``gap/PART/SETTING/REFERENCE/EPOCH/FORM``
    the setting's mean validation accuracy minus the reference's, in points (× 100), as FORM:
    ``pts`` its size with 1 decimal, ``pts2`` with 2, ``pm`` signed with ± twice the standard
    error (2 decimals), ``pmv`` that and the verdict in brackets, ``verdict`` the rule's word,
    ``says`` "within noise of" or "X points below" / "above" (1 decimal: the verdict decides
    which), ``se2`` twice the standard error and ``upper`` the gap's size plus that (1 decimal).
``spread/PART/EPOCH/SETTING+SETTING+...``
    the largest minus the smallest of the settings' mean accuracies, in points, 1 decimal.
``epochs/PART/SETTING/TARGET``
    mean epochs to TARGET validation accuracy over the seeds that reached it, 1 decimal.
``reach/PART/SETTING/TARGET``
    epochs to TARGET, mean ± sd over the seeds that reach it (1 decimal), and how many do.
``runs/PART``, ``seeds/PART/SETTING``
    how many runs the part's history holds; how many seeds the setting has.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

from gpcnn.study import report
from gpcnn.study.doc_numbers import MissingSource
from gpcnn.study.doc_results import Results


def points(value: float, digits: int = 1) -> str:
    """A difference in points, as its size (the prose says which way)."""
    return f"{abs(value):.{digits}f}"


def signed(value: float, digits: int = 2) -> str:
    return f"{value:+.{digits}f}".replace("-", "−")


def gap_text(diff: float, se: float | None, verdict: str, form: str) -> str:
    """One difference of means (in points) in the ``form`` the key asks for."""
    if form == "pts":
        return points(diff)
    if form == "pts2":
        return points(diff, 2)
    if form == "verdict":
        return verdict
    if form == "pm":
        return signed(diff) + ("" if se is None else f" ± {2 * se:.2f}")
    if form == "pmv":
        return f"{gap_text(diff, se, verdict, 'pm')} ({verdict})"
    if form in ("se2", "upper") and se is not None:  # twice the standard error; the gap's far end
        return f"{2 * se:.1f}" if form == "se2" else f"{abs(diff) + 2 * se:.1f}"
    if form == "says":
        if verdict == "within noise":
            return "within noise of"
        return f"{points(diff)} points {'below' if diff < 0 else 'above'}"
    raise MissingSource(f"no form {form!r}: pts, pts2, pm, pmv, verdict, says, se2 or upper")


def _gap(results: Results, part, setting, reference, epoch, form) -> str:
    epoch = float(epoch)
    diff, se, verdict = report.difference(
        results.values(part, setting, epoch), results.values(part, reference, epoch)
    )
    return gap_text(100 * diff, None if se is None else 100 * se, verdict, form)


def _acc(results: Results, part, setting, epoch) -> str:
    return f"{statistics.fmean(results.values(part, setting, float(epoch))):.4f}"


def _cell(results: Results, part, setting, epoch) -> str:
    return report.cell(results.values(part, setting, float(epoch)))


def _metric(results: Results, part, setting, epoch, metric, digits="2") -> str:
    value = statistics.fmean(results.values(part, setting, float(epoch), metric))
    return f"{value:.{int(digits)}f}"


def _seed(results: Results, part, setting, epoch, index, digits="4") -> str:
    return f"{results.values(part, setting, float(epoch))[int(index)]:.{int(digits)}f}"


def _seed_gaps(results: Results, part, setting, reference, epoch) -> str:
    """Each seed's gain over the reference's same seed, in points (1 decimal)."""
    pairs = zip(
        results.values(part, setting, float(epoch)),
        results.values(part, reference, float(epoch)),
        strict=True,
    )
    return ", ".join(f"{100 * (a - b):.1f}" for a, b in pairs)


def _window_gap(results: Results, part, setting, reference, first, last) -> str:
    mean = float(_window(results, part, setting, first, last))
    return points(100 * (mean - float(_window(results, part, reference, first, last))))


def _pct(results: Results, part, setting, epoch) -> str:
    return f"{100 * statistics.fmean(results.values(part, setting, float(epoch))):.1f}"


def _each(results: Results, part, setting, epoch) -> str:
    return ", ".join(f"{v:.4f}" for v in results.values(part, setting, float(epoch)))


def _sd(results: Results, part, setting, epoch) -> str:
    return f"{100 * statistics.stdev(results.values(part, setting, float(epoch))):.1f}"


def _window(results: Results, part, setting, first, last) -> str:
    """The mean over seeds of each seed's mean accuracy over epochs ``first`` to ``last``."""
    epochs = range(int(first), int(last) + 1)
    means = [
        statistics.fmean(results.values(part, setting, e)[i] for e in epochs)
        for i in range(len(results.setting(part, setting)))
    ]
    return f"{statistics.fmean(means):.4f}"


def _spread(results: Results, part, epoch, settings) -> str:
    means = [statistics.fmean(results.values(part, s, float(epoch))) for s in settings.split("+")]
    return points(100 * (max(means) - min(means)))


def _epochs(results: Results, part, setting, target) -> str:
    found = [report.epochs_to(h, float(target)) for h in results.setting(part, setting)]
    reached = [e for e in found if e is not None]
    if not reached:
        raise MissingSource(f"{part}:{setting} never reaches {target}")
    return f"{statistics.fmean(reached):.1f}"


def _reach(results: Results, part, setting, target) -> str:
    """Epochs to ``target``, mean ± sd over the seeds that reach it, and how many do."""
    found = [report.epochs_to(h, float(target)) for h in results.setting(part, setting)]
    reached = [e for e in found if e is not None]
    counted = f"({len(reached)} of {len(found)})"
    return f"{report.cell(reached, 1)} {counted}" if reached else f"never {counted}"


def _runs(results: Results, part) -> str:
    return str(sum(len(histories) for histories in results.part(part).values()))


def _seeds(results: Results, part, setting) -> str:
    return str(len(results.setting(part, setting)))


COMPUTATIONS: dict[str, Callable[..., str]] = {
    "acc": _acc,
    "cell": _cell,
    "each": _each,
    "seed": _seed,
    "seedgaps": _seed_gaps,
    "wgap": _window_gap,
    "metric": _metric,
    "pct": _pct,
    "sd": _sd,
    "window": _window,
    "gap": _gap,
    "spread": _spread,
    "epochs": _epochs,
    "reach": _reach,
    "runs": _runs,
    "seeds": _seeds,
}
