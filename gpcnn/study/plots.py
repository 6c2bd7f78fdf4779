"""Figures of a convergence study: loss and accuracy against iterations and against epochs, and
the diagnostics (the drift ratio, and each segment's training loss) against epochs.

``figures(rows, rules)`` builds them from history rows (as in ``history.csv``), so the data behind
every line can be checked against the CSV; ``rules`` orders and colours the merge rules.
``write_figures`` saves them as PNG. Figures are plain ``matplotlib.figure.Figure`` objects: drawing
never changes the pyplot backend of a notebook or script.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from gpcnn.fit.diagnostics import flat_row
from gpcnn.fit.rules import RULES

PANELS = (
    ("loss", "training loss"),
    ("val_loss", "validation loss"),
    ("val_accuracy", "validation accuracy"),
)


def _settings(rows: Sequence[dict]) -> dict[str, list[list[dict]]]:
    """Setting -> its runs' histories (one per seed), each in iteration order."""
    grouped: dict[str, dict[str, list[dict]]] = {}
    for row in rows:
        setting = row.get("setting", row["run"])
        grouped.setdefault(setting, {}).setdefault(row["run"], []).append(row)
    return {
        setting: [sorted(h, key=lambda r: r["iteration"]) for h in runs.values()]
        for setting, runs in grouped.items()
    }


def _family(meta: dict) -> tuple[str, ...]:
    """What a figure holds fixed besides the dataset: one worker has no skew and no optimizer
    state policy, so it joins every family of its model, optimizer and order."""
    common = (
        meta.get("model", "small-cnn"),
        meta.get("optimizer", "sgd"),
        str(meta.get("shuffle")),
    )
    if meta["merge"] == "single":
        return common
    return (*common, meta.get("optimizer_state", "reset"), str(meta.get("skew")))


def _family_name(family: tuple[str, ...]) -> str:
    """What a figure's name adds for a family other than the default one."""
    model, opt, shuffle, *rest = family
    parts = [model if model != "small-cnn" else "", opt if opt != "sgd" else ""]
    parts.append("shuffled" if shuffle == "True" else "")
    if rest:
        state, skew = rest
        parts += [
            f"os-{state}" if state != "reset" else "",
            f"skew{skew}" if skew != "None" else "",
        ]
    return "".join(f"_{p}" for p in parts if p)


def _groups(settings: dict[str, list[list[dict]]], rules: Sequence[str]) -> dict[str, list[str]]:
    """Figure name -> the settings it compares (the issue's figures a–d), per dataset and family
    (model, optimizer, order, optimizer-state policy, skew)."""
    meta = {name: histories[0][0] for name, histories in settings.items()}
    groups: dict[str, list[str]] = {}
    families = {_family(m) for m in meta.values() if m["merge"] != "single"}
    for dataset in sorted({m["dataset"] for m in meta.values()}):
        for family in sorted(families, key=str):
            mine = {
                n: m
                for n, m in meta.items()
                if m["dataset"] == dataset and _family(m) == family[: len(_family(m))]
            }
            if all(m["merge"] == "single" for m in mine.values()):
                continue
            _family_groups(groups, f"{dataset}{_family_name(family)}", mine, rules)
    return {name: members for name, members in groups.items() if members}


def _family_groups(groups: dict, prefix: str, mine: dict[str, dict], rules: Sequence[str]) -> None:
    m1 = min(m["merges_per_epoch"] for m in mine.values())
    at_m1 = {n: m for n, m in mine.items() if m["merges_per_epoch"] == m1}
    ks = sorted({int(m["segments"]) for m in at_m1.values() if m["merge"] != "single"})
    single = [n for n, m in at_m1.items() if m["merge"] == "single"]
    for k in ks:
        groups[f"{prefix}_merge_vs_nomerge_k{k}"] = single + [
            n for n, m in at_m1.items() if m["segments"] == k and m["merge"] in ("none", "average")
        ]
    if not ks:
        return
    k_most = min(ks, key=lambda v: abs(v - 4))
    groups[f"{prefix}_rules_k{k_most}"] = single + [
        n for n, m in at_m1.items() if m["segments"] == k_most and m["merge"] != "single"
    ]
    groups[f"{prefix}_average_by_k"] = single + sorted(
        (n for n, m in at_m1.items() if m["merge"] == "average"),
        key=lambda n: at_m1[n]["segments"],
    )
    if len({m["merges_per_epoch"] for m in mine.values()}) > 1:
        groups[f"{prefix}_merges_per_epoch"] = sorted(
            (n for n, m in mine.items() if m["merge"] == "single" or m["segments"] == k_most),
            key=lambda n: (rules.index(mine[n]["merge"]), mine[n]["merges_per_epoch"]),
        )


def _series(histories: list[list[dict]], x: str, metric: str):
    """x values, the mean over seeds, and the sd (None with one seed), where every seed has it."""
    by_x: dict[float, list[float]] = {}
    for history in histories:
        for row in history:
            if row.get(metric) is not None:
                by_x.setdefault(row[x], []).append(row[metric])
    xs = [v for v in sorted(by_x) if len(by_x[v]) == len(histories)]
    means = np.array([np.mean(by_x[v]) for v in xs])
    sds = np.array([np.std(by_x[v], ddof=1) for v in xs]) if len(histories) > 1 else None
    return xs, means, sds


def _rule_words(merge: str) -> str:
    """A rule in a legend: its registered words (``gpcnn.fit.rules.register_rule``); the study's
    ``sync`` in words too; else its name."""
    if merge == "sync":
        return "synchronous"
    return RULES[merge].words if merge in RULES else merge


def _label(meta: dict, by_frequency: bool) -> str:
    """What a curve is, in words ('one worker', 'K = 4, average', 'K = 4, never merged'), with
    the rule's options given and a schedule of merges, and the merge frequency where a figure
    compares frequencies."""
    if meta["merge"] == "single":
        words = "one worker"
    else:
        words = f"K = {int(meta['segments'])}, {_rule_words(meta['merge'])}"
    if meta.get("merge_options"):
        words += f" {meta['merge_options']}"
    if meta.get("scale_lr"):
        words += ", learning rate × K"
    if meta.get("early_merges"):
        early = str(meta["early_merges"]).replace("-", ", ")
        words += f", merges per epoch {early}, then {int(meta['merges_per_epoch'])}"
    elif by_frequency:
        m = int(meta["merges_per_epoch"])
        words += f", {m} merge{'' if m == 1 else 's'} per epoch"
    return words


def _labels(settings: dict[str, list[list[dict]]], members: Sequence[str], by_frequency: bool):
    """Setting -> its legend label; the setting's name is added where words alone repeat."""
    labels = {n: _label(settings[n][0][0], by_frequency) for n in members}
    repeated = {label for label in labels.values() if list(labels.values()).count(label) > 1}
    return {n: f"{label} ({n})" if label in repeated else label for n, label in labels.items()}


def figures(rows: Sequence[dict], rules: Sequence[str]) -> dict[str, Figure]:
    """Every figure, against iterations (``name``) and against epochs (``name_epochs``); a
    setting run with several seeds is its mean with a band of ± one standard deviation. Each
    curve's label says what it is (``_label``); its gid is the setting's name. Where the runs
    have diagnostics, ``name_diagnostics`` too (``diagnostics_figure``)."""
    rules = list(rules)
    settings = _settings(rows)
    out = {}
    for name, members in _groups(settings, rules).items():
        by_frequency = len({settings[n][0][0]["merges_per_epoch"] for n in members}) > 1
        labels = _labels(settings, members, by_frequency)
        for x, suffix in (("iteration", ""), ("epoch", "_epochs")):
            fig = Figure(figsize=(15, 4.2))
            axes = fig.subplots(1, len(PANELS))
            for ax, (metric, title) in zip(axes, PANELS, strict=True):
                for setting in members:
                    xs, means, sds = _series(settings[setting], x, metric)
                    if not xs:
                        continue
                    style = _style(settings[setting][0][0], by_frequency, rules)
                    (line,) = ax.plot(xs, means, label=labels[setting], gid=setting, **style)
                    if sds is not None:
                        ax.fill_between(
                            xs,
                            means - sds,
                            means + sds,
                            color=line.get_color(),
                            alpha=0.2,
                            linewidth=0,
                        )
                ax.set_title(title)
                ax.set_xlabel("epochs of data seen" if x == "epoch" else "iteration (merges)")
                ax.grid(alpha=0.3)
            axes[-1].legend(fontsize=7)
            fig.suptitle(name.replace("_", " "))
            fig.tight_layout()
            out[name + suffix] = fig
        diagnosed = [n for n in members if _diagnosed(settings, [n])]
        if diagnosed:
            fig = diagnostics_figure({n: settings[n] for n in diagnosed}, labels)
            fig.suptitle(f"{name.replace('_', ' ')}: diagnostics")
            fig.tight_layout()  # again: the title takes room above the panels' own
            out[name + "_diagnostics"] = fig
    return out


def diagnostics_figure(
    histories: dict[str, list[list[dict]]], labels: dict[str, str] | None = None, x: str = "epoch"
) -> Figure:
    """The drift ratio (spread of the segment models / merged step; mean over seeds, ± one sd)
    and each segment's training loss (the first seed's: one thin line per segment, in its
    setting's colour) against ``x``, for settings' histories (name -> one history per seed; rows
    flat, ``loss_segment_<key>``, or with ``per_segment``)."""
    fig = Figure(figsize=(11, 4.2))
    drift, losses = fig.subplots(1, 2)
    for i, (name, runs) in enumerate(histories.items()):
        runs = [[flat_row(row) for row in history] for history in runs]
        color, label = f"C{i % 10}", (labels or {}).get(name, name)
        xs, means, sds = _series(runs, x, "drift_ratio")
        if xs:
            drift.plot(xs, means, color=color, marker="o", markersize=3, label=label, gid=name)
            if sds is not None:
                drift.fill_between(
                    xs, means - sds, means + sds, color=color, alpha=0.2, linewidth=0
                )
        segments = sorted(
            {k for row in runs[0] for k in row if k.startswith("loss_segment_")},
            key=lambda k: int(k.rsplit("_", 1)[1]),
        )
        for j, column in enumerate(segments):
            xs, means, _ = _series(runs[:1], x, column)
            losses.plot(
                xs,
                means,
                color=color,
                linewidth=0.8,
                alpha=0.8,
                label=label if j == 0 else None,
                gid=f"{name}/{column}",
            )
    drift.set_title("drift ratio (spread / merged step)")
    losses.set_title("training loss of each segment")
    for ax in (drift, losses):
        ax.set_xlabel("epochs of data seen" if x == "epoch" else "iteration (merges)")
        ax.grid(alpha=0.3)
    losses.legend(fontsize=7)
    fig.tight_layout()
    return fig


def _diagnosed(settings: dict[str, list[list[dict]]], members: Sequence[str]) -> bool:
    return any("drift_ratio" in row for n in members for h in settings[n] for row in h)


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
