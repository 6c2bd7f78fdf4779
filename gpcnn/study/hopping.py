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

from gpcnn.data.tables import describe
from gpcnn.engines import Database
from gpcnn.estimator import fit_multiple
from gpcnn.estimator.named_models import MODELS, OPTIMIZERS, optimizer
from gpcnn.kernel import keras_setup
from gpcnn.study import report
from gpcnn.study.experiments import RULES, _tables, run_one
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
    allowed = [rule for rule in RULES if rule not in ("single", "sync")]
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
        db, train, configs, epochs=first.iterations, validation_table=test, resume=resume,
        on_start=lambda ids: ids_file.write_text(json.dumps(ids)),
        shuffle=first.shuffle, seed=first.seed, verbose=0,
    )  # fmt: skip
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
    rows = [
        {"configuration": _name(spec), **row}
        for spec in runs[HOPPER]
        for row in report.collect(folder(out, spec), (*RULES, HOPPER))
    ]
    report.write_csv(rows, out / "history.csv")
    histories = {
        (method, i): json.loads((folder(out, spec) / "runs" / f"{spec.name}.json").read_text())[
            "history"
        ]
        for method, specs in runs.items()
        for i, spec in enumerate(specs)
    }
    text = _report(runs, histories, target)
    (out / "report.md").write_text(text)
    _figure(runs, histories, out / "mop_vs_merge.png")
    return text


def _label(spec: RunSpec) -> str:
    return f"{spec.optimizer} lr={spec.learning_rate:g} batch={spec.batch_size}"


def _report(runs, histories, target: float | None) -> str:
    methods = list(runs)
    first = runs[HOPPER][0]
    epochs = [e for e in report.REPORT_EPOCHS if e <= first.iterations]
    if first.iterations not in epochs:
        epochs.append(first.iterations)
    lines = [
        f"# Part h: MOP against the merge ({first.dataset}, {first.model}, K = {first.segments})",
        "",
        "Validation accuracy per configuration at equal epochs: the model hopper (each model "
        "trained on one segment per hop, rotating, no merge) against the same configurations "
        f"trained one after another with {', '.join(methods[1:])}.",
        "",
        "| configuration | epoch | " + " | ".join(methods) + " |",
        "|---|---|" + "---|" * len(methods),
    ]
    for i, spec in enumerate(runs[HOPPER]):
        for e in epochs:
            cells = [report.at_epoch(histories[m, i], e, "val_accuracy") for m in methods]
            shown = " | ".join("—" if c is None else f"{c:.4f}" for c in cells)
            lines.append(f"| {_label(spec)} | {e} | {shown} |")
    if target is not None:
        lines += _per_configuration(
            f"Epochs to {target:g} validation accuracy:", runs, methods,
            lambda m, i: "never" if (r := report.epochs_to(histories[m, i], target)) is None
            else f"{r:g}",
        )  # fmt: skip
    last = range(max(1, first.iterations - 4), first.iterations + 1)
    lines += _per_configuration(
        f"Mean validation accuracy of epochs {last[0]}–{last[-1]}:", runs, methods,
        lambda m, i: f"{sum(report.at_epoch(histories[m, i], e, 'val_accuracy') for e in last) / len(last):.4f}",  # noqa: E501
    )  # fmt: skip
    lines += ["", "| method | best configuration | its accuracy | selection wall s |"]
    lines += ["|---|---|---|---|"]
    best = {}
    for m in methods:
        finals = [histories[m, i][-1]["val_accuracy"] for i in range(len(runs[m]))]
        best[m] = max(range(len(finals)), key=lambda i: (finals[i], -i))
        wall = _wall(m, [histories[m, i] for i in range(len(runs[m]))])
        spec = runs[m][best[m]]
        lines.append(f"| {m} | {_label(spec)} | {finals[best[m]]:.4f} | {wall:.0f} |")
    same = len(set(best.values())) == 1
    lines += ["", f"Same best configuration under every method: {'yes' if same else 'no'}."]
    if target is not None:
        lines += ["", f"Best configuration's time to {target:g} validation accuracy:", ""]
        for m in methods:
            history = histories[m, best[m]]
            reached = report.epochs_to(history, target)
            if reached is None:
                lines.append(f"- {m}: not reached in {len(history)} epochs")
                continue
            seconds = sum(r["seconds"] for r in history if r["epoch"] <= reached)
            lines.append(f"- {m}: epoch {reached:g}, {seconds:.0f} s of its training")
    lines += [
        "",
        "Under the hopper all configurations train together, so an epoch's seconds are those of "
        "all of them; one after another, the selection's wall time is the sum of the runs. "
        "Cerebro-DS (Nakandala et al., VLDB 2020) reports that MOP reaches sequential-SGD "
        "accuracy while model averaging learns much slower; compare the columns above.",
    ]
    return "\n".join(lines) + "\n"


def _wall(method: str, histories: Sequence[list[dict]]) -> float:
    """Seconds of the whole selection: the hopper's epochs are shared by every configuration."""
    if method == HOPPER:
        return sum(r["seconds"] for r in histories[0])
    return sum(r["seconds"] for h in histories for r in h)


def _figure(runs, histories, path: Path) -> None:
    from matplotlib.figure import Figure

    configs = runs[HOPPER]
    fig = Figure(figsize=(4 * len(configs), 3.2))
    axes = fig.subplots(1, len(configs), squeeze=False)[0]
    for i, (ax, spec) in enumerate(zip(axes, configs, strict=True)):
        for m in runs:
            h = histories[m, i]
            label = "model hopper" if m == HOPPER else f"K = {spec.segments}, {m}"
            ax.plot([r["epoch"] for r in h], [r.get("val_accuracy") for r in h], label=label)
        ax.set_title(_label(spec), fontsize=9)
        ax.set_xlabel("epoch")
    axes[0].set_ylabel("validation accuracy")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def _per_configuration(title: str, runs, methods, cell) -> list[str]:
    """A titled table with a row per configuration and a column per method, ``cell(method, i)``."""
    lines = ["", title, "", "| configuration | " + " | ".join(methods) + " |"]
    lines.append("|---|" + "---|" * len(methods))
    for i, spec in enumerate(runs[HOPPER]):
        lines.append(f"| {_label(spec)} | " + " | ".join(cell(m, i) for m in methods) + " |")
    return lines
