"""What each key of a marked number (``gpcnn.study.doc_numbers``) computes from the early warning a
fit logs (``gpcnn.fit.forecast``: the gap to one worker at epoch 15 as a line in the mean drift ratio
of epochs 1 to 3), fitted and scored on the study's runs with the diagnostics, as the study's
early-warning script does: each run's early drift ratio against its gap to part a's one worker at
epoch 15, in points; a 3-epoch rerun takes its final accuracy from the run of the same name in
``FINALS``. PARTS are ``+``-joined (``j.early+i``).

``warning/line``, ``warning/stated``
    the line a fit logs, and its stated error (its leave-one-out error when it was fitted).
``warning/fit/PARTS/WHICH/FORM``
    ``gpcnn.fit.forecast.gap_law.fit_early_warning`` over the runs of PARTS, WHICH ``all``, ``iid`` or
    ``skewed``; FORM ``runs``, ``spearman``, ``line`` or ``error`` (leave-one-out, points).
``warning/WHAT/PARTS``
    the logged line scored on the runs of PARTS: WHAT ``rms`` (the root-mean-square miss),
    ``within`` (how many within the stated error), ``runs``, ``spearman``, ``under`` (the range of
    the misses where it forecast too little, 0 decimals), ``table`` (per setting, each seed's drift
    ratio, forecast, measured gap and miss: a Markdown table).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

from gpcnn.fit.forecast import early_warning, gap_law
from gpcnn.study import report
from gpcnn.study.doc_numbers import MissingSource
from gpcnn.study.doc_results import Results

FINAL_EPOCH, EARLY_EPOCHS = 15.0, 3.0
FINALS = ("a", "f", "c", "g")  # the 15-epoch runs that 3-epoch reruns repeat


@dataclass(frozen=True)
class Point:
    """One run: its first history row, early drift ratio and gap to one worker (points)."""

    first: dict
    drift: float
    gap: float

    @property
    def miss(self) -> float:
        return self.gap - early_warning.line_gap(self.drift)


def points(results: Results, parts: str) -> list[Point]:
    """Every run of ``parts`` with the diagnostics, in the parts' order."""
    single = statistics.fmean(results.values("a", "single-k1", FINAL_EPOCH))
    finals = {
        h[0]["run"]: report.at_epoch(h, FINAL_EPOCH, "val_accuracy")
        for part in FINALS
        for histories in results.part(part).values()
        for h in histories
    }
    found = []
    for part in parts.split("+"):
        for histories in results.part(part).values():
            for h in (h for h in histories if h[0].get("drift_ratio") is not None):
                final = report.at_epoch(h, FINAL_EPOCH, "val_accuracy") or finals.get(h[0]["run"])
                if final is None:
                    raise MissingSource(f"{h[0]['run']}: no final accuracy in {', '.join(FINALS)}")
                early = statistics.fmean(r["drift_ratio"] for r in h if r["epoch"] <= EARLY_EPOCHS)
                found.append(Point(h[0], early, 100 * (single - final)))
    if not found:
        raise MissingSource(f"{parts}: no run with the diagnostics")
    return found


def line(intercept: float, slope: float) -> str:
    return f"{intercept:+.2f} + {slope:.2f} × drift".replace("-", "−").removeprefix("+")


def _fit(results: Results, parts: str, which: str, form: str) -> str:
    chosen = [
        p
        for p in points(results, parts)
        if which == "all" or (which == "skewed") == (p.first.get("skew") is not None)
    ]
    fit = gap_law.fit_early_warning([p.drift for p in chosen], [p.gap for p in chosen])
    texts = {
        "runs": lambda: str(fit.runs),
        "spearman": lambda: f"{fit.rank_correlation:.2f}",
        "line": lambda: line(fit.intercept, fit.slope),
        "error": lambda: f"{fit.leave_one_out_error:.2f}",
    }
    if form not in texts:
        raise MissingSource(f"warning/fit: no form {form!r}: {', '.join(texts)}")
    return texts[form]()


def label(first: dict) -> str:
    """A run's setting in words: its rule, merges per epoch, model, options, skew and K."""
    words = f"`{first['merge']}`"
    if (first.get("merges_per_epoch") or 1) > 1:
        words += f" at {first['merges_per_epoch']:g} merges"
    if first.get("model") == "gn-cnn":
        words += ", GroupNorm (`gn-cnn`)"
    if first.get("merge_options"):
        words += " " + first["merge_options"].replace("mu", "μ = ", 1)
    if first.get("skew") is not None:
        words += f", α = {first['skew']:g}"
    return words + f", K = {first['segments']:g}"


def _table(found: list[Point]) -> str:
    rows: dict[str, list[Point]] = {}
    for p in found:
        rows.setdefault(label(p.first), []).append(p)
    lines = [
        "| setting (each seed) | early drift ratio | forecast gap | measured gap | miss "
        "(measured − forecast) |",
        "|---|---|---|---|---|",
    ]
    for name, runs in rows.items():
        cells = [
            ", ".join(f"{p.drift:.3f}" for p in runs),
            ", ".join(f"{early_warning.line_gap(p.drift):.2f}" for p in runs),
            ", ".join(f"{p.gap:.2f}" for p in runs),
            ", ".join(f"{p.miss:+.2f}" for p in runs),
        ]
        lines.append(f"| {name} | " + " | ".join(cells).replace("-", "−") + " |")
    return "\n\n" + "\n".join(lines) + "\n\n"


def _scored(results: Results, what: str, parts: str | None = None) -> str:
    if what == "line":
        return line(early_warning.INTERCEPT, early_warning.SLOPE)
    if what == "stated":
        return f"{early_warning.ERROR:.2f}"
    if parts is None:
        raise MissingSource(f"warning/{what}: name the parts it is scored on")
    found = points(results, parts)
    misses = [p.miss for p in found]
    texts = {
        "rms": lambda: f"{statistics.fmean(m * m for m in misses) ** 0.5:.2f}",
        "within": lambda: f"{sum(abs(m) <= early_warning.ERROR for m in misses)} of {len(misses)}",
        "runs": lambda: str(len(misses)),
        "spearman": lambda: (
            f"{gap_law.spearman([p.drift for p in found], [p.gap for p in found]):.2f}"
        ),
        "under": lambda: f"{min(m for m in misses if m > 0):.0f}–{max(misses):.0f}",
        "table": lambda: _table(found),
    }
    if what not in texts:
        raise MissingSource(f"warning: no {what!r}: line, stated, fit, {', '.join(texts)}")
    return texts[what]()


def _warning(results: Results, what: str, *arguments: str) -> str:
    return _fit(results, *arguments) if what == "fit" else _scored(results, what, *arguments)


COMPUTATIONS: dict[str, Callable[..., str]] = {"warning": _warning}
