"""Study part h, MOP against the merge: the same configurations trained at once by the model hopper
(``gpcnn.fit_multiple``) and one after another with merge rules at K segments; per-configuration
validation accuracy at equal epochs, the wall time of each selection and until its best
configuration reaches the target, and whether both pick the same best configuration.

Resumable like the other parts: each configuration has a folder ``DIR/<optimizer>-lr<rate>-b<batch>``
whose ``runs/<name>.json`` are its finished runs (the hopper's with merge ``hopper``); the hopper's
run ids for each seed are kept in ``DIR/hopper-runs.json`` (seed 0; ``hopper-runs-s<seed>.json``
for the others) before it trains, so a killed study continues them from their last stored epoch.
Then ``DIR/history.csv`` (a ``configuration`` column), ``DIR/report.md`` (means over the seeds, and
the hopper's difference from each merge with the study's 2·SE rule) and ``DIR/mop_vs_merge.png``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import numpy as np

from gpcnn.data.tables import describe
from gpcnn.engines import Database
from gpcnn.estimator import fit_multiple
from gpcnn.estimator.named_models import MODELS, OPTIMIZERS, optimizer
from gpcnn.kernel import keras_setup
from gpcnn.study import report
from gpcnn.study.experiments import STUDY_RULES, _tables, run_one
from gpcnn.study.specs import RunSpec

HOPPER = "hopper"


def folder(out: Path, spec: RunSpec) -> Path:
    """Where one configuration's runs live (``RunSpec`` names carry no learning rate or batch)."""
    return out / _name(spec)


def _name(spec: RunSpec) -> str:
    return f"{spec.optimizer}-lr{spec.learning_rate:g}-b{spec.batch_size}"


def parse_configurations(text: str) -> list[tuple[str, float, int]]:
    """``optimizer:learning_rate:batch_size`` items, comma-separated."""
    configs = []
    for item in (p.strip() for p in text.split(",") if p.strip()):
        try:
            name, rate, batch = item.split(":")
            config = (name, float(rate), int(batch))
        except ValueError:
            raise ValueError(
                f"configuration {item!r}: write optimizer:learning_rate:batch_size, "
                "e.g. momentum:0.01:32"
            ) from None
        if name not in OPTIMIZERS:
            raise ValueError(f"configuration {item!r}: optimizer one of {', '.join(OPTIMIZERS)}")
        configs.append(config)
    if not configs:
        raise ValueError("give at least one configuration")
    return configs


def plan(
    dataset: str,
    configurations: Sequence[tuple[str, float, int]],
    merges: Sequence[str],
    segments: int,
    epochs: int,
    seeds: Sequence[int] = (0,),
    **common,
) -> dict[str, list[RunSpec]]:
    """Method (``hopper`` and each merge rule) -> one spec per seed and configuration, seed by
    seed, the configurations in order within each."""
    allowed = [rule for rule in STUDY_RULES if rule not in ("single", "sync")]
    bad = [rule for rule in merges if rule not in allowed]
    if bad:
        raise ValueError(f"merges {bad}: choose rules of the database, {', '.join(allowed)}")
    return {
        method: [
            RunSpec(
                dataset,
                method,
                segments,
                1,
                epochs,
                optimizer=name,
                learning_rate=rate,
                batch_size=batch,
                seed=seed,
                **common,
            )
            for seed in seeds
            for name, rate, batch in configurations
        ]
        for method in (HOPPER, *merges)
    }


def run_hopper(db: Database, specs: Sequence[RunSpec], out: Path, *, path=None, progress=True):
    """The configurations under the hopper (specs of one seed), each from the same start weights
    as its merged runs (the model built after the seed is set, as ``run_one`` does)."""
    files = [folder(out, spec) / "runs" / f"{spec.name}.json" for spec in specs]
    if all(f.exists() for f in files):
        return
    for f in files:
        f.parent.mkdir(parents=True, exist_ok=True)
    train, test = _tables(db, specs[0], path, {})
    info = describe(db, train)
    seed = specs[0].seed
    ids_file = out / ("hopper-runs.json" if seed == 0 else f"hopper-runs-s{seed}.json")
    resume = json.loads(ids_file.read_text()) if ids_file.exists() else None
    configs = []
    for spec in specs:
        keras_setup.keras_module().utils.set_random_seed(spec.seed)
        configs.append(
            {
                "model": MODELS[spec.model](info.image_shape, info.num_classes),
                "optimizer": optimizer(spec.optimizer, spec.learning_rate),
                "learning_rate": spec.learning_rate,
                "batch_size": spec.batch_size,
            }
        )
    first = specs[0]
    estimators = fit_multiple(
        db,
        train,
        configs,
        epochs=first.iterations,
        validation_table=test,
        resume=resume,
        on_start=lambda ids: ids_file.write_text(json.dumps(ids)),
        shuffle=first.shuffle,
        seed=first.seed,
        verbose=0,
    )
    for spec, est, done in zip(specs, estimators, files, strict=True):
        done.write_text(json.dumps({"spec": asdict(spec), "history": est.history_}, indent=1))
    if progress:
        print(f"hopper: {len(specs)} configurations, {first.iterations} epochs")


def run_part(
    db: Database,
    runs: dict[str, list[RunSpec]],
    out: str | Path,
    *,
    path=None,
    progress: bool = True,
    target: float | None = None,
) -> str:
    """Every method's runs (reused when finished), then history.csv, report.md, the figure."""
    out = Path(out)
    for seed in dict.fromkeys(spec.seed for spec in runs[HOPPER]):
        seeded = [spec for spec in runs[HOPPER] if spec.seed == seed]
        run_hopper(db, seeded, out, path=path, progress=progress)
    for method, specs in runs.items():
        if method != HOPPER:
            for spec in specs:
                run_one(db, spec, folder(out, spec), path=path, progress=progress)
    configurations = {_name(spec): _label(spec) for spec in runs[HOPPER]}
    rows = [
        {"configuration": name, **row}
        for name in configurations
        for row in report.collect(out / name, (*STUDY_RULES, HOPPER))
    ]
    report.write_csv(rows, out / "history.csv")
    histories: dict[tuple[str, str], list[list[dict]]] = {}
    for method, specs in runs.items():
        for spec in specs:
            done = json.loads((folder(out, spec) / "runs" / f"{spec.name}.json").read_text())
            histories.setdefault((method, _name(spec)), []).append(done["history"])
    text = _report(runs, configurations, histories, target)
    (out / "report.md").write_text(text)
    _figure(runs, configurations, histories, out / "mop_vs_merge.png")
    return text


def _label(spec: RunSpec) -> str:
    return f"{spec.optimizer} lr={spec.learning_rate:g} batch={spec.batch_size}"


def _report(runs, configurations: dict[str, str], histories, target: float | None) -> str:
    """report.md: every cell a mean over the seeds (± their sd with more than one)."""
    methods = list(runs)
    first = runs[HOPPER][0]
    seeds = sorted({spec.seed for spec in runs[HOPPER]})
    epochs = [e for e in report.REPORT_EPOCHS if e <= first.iterations]
    if first.iterations not in epochs:
        epochs.append(first.iterations)

    def values(method: str, name: str, epoch: float) -> list[float]:
        found = (report.at_epoch(h, epoch, "val_accuracy") for h in histories[method, name])
        return [v for v in found if v is not None]

    def accuracy(history: list[dict], epoch: float) -> float:
        """A finished run's validation accuracy at ``epoch``: the runs validate every epoch."""
        value = report.at_epoch(history, epoch, "val_accuracy")
        assert value is not None
        return value

    lines = [
        f"# Part h: MOP against the merge ({first.dataset}, {first.model}, K = {first.segments})",
        "",
        "Validation accuracy per configuration at equal epochs: the model hopper (each model "
        "trained on one segment per hop, rotating, no merge) against the same configurations "
        f"trained one after another with {', '.join(methods[1:])}. "
        + (
            f"Seeds {', '.join(map(str, seeds))}: each cell is the mean over them ± their "
            "standard deviation."
            if len(seeds) > 1
            else f"One seed ({seeds[0]})."
        ),
        "",
        "| configuration | epoch | " + " | ".join(methods) + " |",
        "|---|---|" + "---|" * len(methods),
    ]
    for name, label in configurations.items():
        for e in epochs:
            shown = " | ".join(report.cell(values(m, name, e)) or "—" for m in methods)
            lines.append(f"| {label} | {e} | {shown} |")
    last = first.iterations
    lines += _per_configuration(
        f"The hopper against each merge at epoch {last} (points, the difference of the means "
        "± twice its standard error, and the study's verdict):",
        configurations,
        methods[1:],
        lambda m, name: _difference(values(HOPPER, name, last), values(m, name, last)),
    )
    if target is not None:
        lines += _per_configuration(
            f"Epochs to {target:g} validation accuracy (each seed's):",
            configurations,
            methods,
            lambda m, name: ", ".join(
                "never" if (r := report.epochs_to(h, target)) is None else f"{r:g}"
                for h in histories[m, name]
            ),
        )
    window = range(max(1, last - 4), last + 1)
    lines += _per_configuration(
        f"Mean validation accuracy of epochs {window[0]}–{window[-1]}:",
        configurations,
        methods,
        lambda m, name: report.cell(
            [sum(accuracy(h, e) for e in window) / len(window) for h in histories[m, name]]
        ),
    )
    lines += ["", "| method | best configuration | its accuracy | selection wall s |"]
    lines += ["|---|---|---|---|"]
    best = {}
    for m in methods:
        best[m] = max(configurations, key=lambda name: sum(values(m, name, last)))
        wall = [
            _wall(m, [histories[m, name][i] for name in configurations]) for i in range(len(seeds))
        ]
        finals = report.cell(values(m, best[m], last))
        lines.append(f"| {m} | {configurations[best[m]]} | {finals} | {report.cell(wall, 0)} |")
    same = len(set(best.values())) == 1
    lines += ["", f"Same best configuration under every method: {'yes' if same else 'no'}."]
    if target is not None:
        lines += ["", f"Best configuration's time to {target:g} validation accuracy:", ""]
        for m in methods:
            reached = [
                (epoch, sum(r["seconds"] for r in h if r["epoch"] <= epoch))
                for h in histories[m, best[m]]
                if (epoch := report.epochs_to(h, target)) is not None
            ]
            if not reached:
                lines.append(f"- {m}: not reached in {last} epochs")
                continue
            when = report.cell([e for e, _ in reached], 1)
            seconds = report.cell([s for _, s in reached], 0)
            lines.append(
                f"- {m}: epoch {when}, {seconds} s of its training "
                f"({len(reached)} of {len(seeds)} seeds reached it)"
            )
    lines += [
        "",
        "Under the hopper all configurations train together, so an epoch's seconds are those of "
        "all of them; one after another, the selection's wall time is the sum of the runs. "
        "Cerebro-DS (Nakandala et al., VLDB 2020) reports that MOP reaches sequential-SGD "
        "accuracy while model averaging learns much slower; compare the columns above.",
    ]
    return "\n".join(lines) + "\n"


def _difference(a: list[float], b: list[float]) -> str:
    """mean(a) − mean(b) in points, ± 2·SE, and the verdict (``report.difference``)."""
    diff, se, verdict = report.difference(a, b)
    bar = "" if se is None else f" ± {200 * se:.2f}"
    return f"{100 * diff:+.2f}{bar} ({verdict})"


def _wall(method: str, histories: Sequence[list[dict]]) -> float:
    """Seconds of the whole selection: the hopper's epochs are shared by every configuration."""
    if method == HOPPER:
        return sum(r["seconds"] for r in histories[0])
    return sum(r["seconds"] for h in histories for r in h)


def _figure(runs, configurations: dict[str, str], histories, path: Path) -> None:
    """Validation accuracy per epoch, a panel per configuration: each method's mean over the
    seeds, with a band of ± one sd where there are several."""
    from matplotlib.figure import Figure

    segments = runs[HOPPER][0].segments
    fig = Figure(figsize=(4 * len(configurations), 3.2))
    axes = fig.subplots(1, len(configurations), squeeze=False)[0]
    for ax, (name, label) in zip(axes, configurations.items(), strict=True):
        for m in runs:
            first = histories[m, name][0]
            epochs = [r["epoch"] for r in first]
            per_seed = np.array([[r["val_accuracy"] for r in h] for h in histories[m, name]])
            mean = per_seed.mean(axis=0)
            line = "model hopper" if m == HOPPER else f"K = {segments}, {m}"
            (drawn,) = ax.plot(epochs, mean, label=line)
            if len(per_seed) > 1:
                sd = per_seed.std(axis=0, ddof=1)
                ax.fill_between(epochs, mean - sd, mean + sd, color=drawn.get_color(), alpha=0.2)
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("epoch")
    axes[0].set_ylabel("validation accuracy")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def _per_configuration(title: str, configurations: dict[str, str], methods, cell) -> list[str]:
    """A titled table with a row per configuration and a column per method,
    ``cell(method, configuration name)``."""
    lines = ["", title, "", "| configuration | " + " | ".join(methods) + " |"]
    lines.append("|---|" + "---|" * len(methods))
    for name, label in configurations.items():
        lines.append(f"| {label} | " + " | ".join(cell(m, name) for m in methods) + " |")
    return lines
