"""Figures of a convergence study: loss and accuracy against iterations and against epochs.

``figures(rows, rules)`` builds them from history rows (as in ``history.csv``), so the data behind
every line can be checked against the CSV; ``rules`` orders and colours the merge rules.
``write_figures`` saves them as PNG. Figures are plain ``matplotlib.figure.Figure`` objects: drawing
never changes the pyplot backend of a notebook or script.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from matplotlib.figure import Figure

PANELS = (
    ("loss", "training loss"),
    ("val_loss", "validation loss"),
    ("val_accuracy", "validation accuracy"),
)


def _runs(rows: Sequence[dict]) -> dict[str, list[dict]]:
    runs: dict[str, list[dict]] = {}
    for row in rows:
        runs.setdefault(row["run"], []).append(row)
    for history in runs.values():
        history.sort(key=lambda r: r["iteration"])
    return runs


def _groups(runs: dict[str, list[dict]], rules: Sequence[str]) -> dict[str, list[str]]:
    """Figure name -> the runs it compares (the issue's figures a–d), per dataset."""
    meta = {name: history[0] for name, history in runs.items()}
    groups: dict[str, list[str]] = {}
    for dataset in sorted({m["dataset"] for m in meta.values()}):
        mine = {n: m for n, m in meta.items() if m["dataset"] == dataset}
        m1 = min(m["merges_per_epoch"] for m in mine.values())
        at_m1 = {n: m for n, m in mine.items() if m["merges_per_epoch"] == m1}
        ks = sorted({int(m["segments"]) for m in at_m1.values() if m["merge"] != "single"})
        single = [n for n, m in at_m1.items() if m["merge"] == "single"]
        for k in ks:
            groups[f"{dataset}_merge_vs_nomerge_k{k}"] = single + [
                n
                for n, m in at_m1.items()
                if m["segments"] == k and m["merge"] in ("none", "average")
            ]
        if ks:
            k = min(ks, key=lambda v: abs(v - 4))
            groups[f"{dataset}_rules_k{k}"] = single + [
                n for n, m in at_m1.items() if m["segments"] == k and m["merge"] != "single"
            ]
            k_most = k
        groups[f"{dataset}_average_by_k"] = single + sorted(
            (n for n, m in at_m1.items() if m["merge"] == "average"),
            key=lambda n: at_m1[n]["segments"],
        )
        if len({m["merges_per_epoch"] for m in mine.values()}) > 1 and ks:
            groups[f"{dataset}_merges_per_epoch"] = sorted(
                (n for n, m in mine.items() if m["merge"] == "single" or m["segments"] == k_most),
                key=lambda n: (rules.index(mine[n]["merge"]), mine[n]["merges_per_epoch"]),
            )
    return {name: members for name, members in groups.items() if members}


def figures(rows: Sequence[dict], rules: Sequence[str]) -> dict[str, Figure]:
    """Every figure, against iterations (``name``) and against epochs (``name_epochs``)."""
    rules = list(rules)
    runs = _runs(rows)
    out = {}
    for name, members in _groups(runs, rules).items():
        by_frequency = len({runs[n][0]["merges_per_epoch"] for n in members}) > 1
        for x, suffix in (("iteration", ""), ("epoch", "_epochs")):
            fig = Figure(figsize=(15, 4.2))
            axes = fig.subplots(1, len(PANELS))
            for ax, (metric, title) in zip(axes, PANELS, strict=True):
                for run in members:
                    points = [(r[x], r[metric]) for r in runs[run] if r.get(metric) is not None]
                    if points:
                        xs, ys = zip(*points, strict=True)
                        style = _style(runs[run][0], by_frequency, rules)
                        ax.plot(xs, ys, label=run, **style)
                ax.set_title(title)
                ax.set_xlabel("epochs of data seen" if x == "epoch" else "iteration (merges)")
                ax.grid(alpha=0.3)
            axes[-1].legend(fontsize=7)
            fig.suptitle(name.replace("_", " "))
            fig.tight_layout()
            out[name + suffix] = fig
    return out


def _style(meta: dict, by_frequency: bool, rules: list[str]) -> dict:
    """Markers; where a figure compares merge frequencies, one colour per rule and a dashed
    line for more than one merge per epoch, so each rule's pair reads at a glance."""
    style = {"marker": "o", "markersize": 3}
    if by_frequency:
        style["color"] = f"C{rules.index(meta['merge'])}"
        style["linestyle"] = "-" if meta["merges_per_epoch"] == 1 else "--"
        style["markersize"] = 2
    return style


def write_figures(rows: Sequence[dict], out: str | Path, rules: Sequence[str]) -> list[Path]:
    """Save every figure as ``out/<name>.png``; returns the paths."""
    paths = []
    for name, fig in figures(rows, rules).items():
        path = Path(out) / f"{name}.png"
        fig.savefig(path, dpi=90)
        paths.append(path)
    return paths
