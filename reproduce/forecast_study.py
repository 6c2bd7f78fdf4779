"""Part k of the convergence study: ``gpcnn.forecast`` tested on configurations no calibration saw.

    .venv/bin/python reproduce/forecast_study.py forecast   # 1. pilots, forecasts and plans
    .venv/bin/python reproduce/forecast_study.py runs       # 2. every pilot continued to epoch 8
    .venv/bin/python reproduce/forecast_study.py score      # 3. the score, as a markdown table

Step 1 writes ``docs/img/study/k/forecasts.json`` and ``plans.json``, which are committed before
step 2 starts (docs/convergence.md, part k). Step 2 continues each setting's pilot and each
one-worker pilot with ``fit(table, resume=...)`` and writes ``runs/<name>.json`` (one history per
run); step 3 reads both. Every step is resumable: a stored pilot is reused by the forecast, a
finished run is read back, a half-done one continues. ``STUDY_SEEDS`` (default "0 1") limits the
seeds; ``STUDY_CONFIGS`` (e.g. "3 4") the configurations, in that order.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import gpcnn
from gpcnn import models
from gpcnn.data.mnist import load_fashion_mnist
from gpcnn.fit import runs
from gpcnn.fit.forecast.pilot_law import PILOT_EPOCHS
from gpcnn.fit.forecast.pilots import ONE_WORKER, pilot_table
from gpcnn.study.doc_numbers import MissingSource
from gpcnn.study.doc_sources import facts

OUT = Path("docs/img/study/k")
SCHEMA = "gpcnn_study"  # the study's functions and runs (reproduce/study.sh installs them)
TABLES = "study_k"  # the part's tables
EPOCHS = 8
TOLERANCE = 1.0
RATES = {"momentum": 0.01, "adam": 0.001}  # the sweep's (reproduce/learning_rates.py)


@dataclass(frozen=True)
class Config:
    """One configuration of part k's table (docs/convergence.md)."""

    number: int
    model: str
    optimizer: str
    segments: int
    alpha: float | None  # Dirichlet concentration of its table; None: IID
    merge: str
    merges_per_epoch: int = 1
    plan: bool = False

    @property
    def table(self) -> str:
        if self.alpha is None:
            return f"{TABLES}.fm_iid"  # dealt over 12; K = 6 pilots on IID copies
        return f"{TABLES}.fm_alpha{str(self.alpha).replace('.', '')}_k{self.segments}"

    def pilots(self, seed: int) -> dict[str, Any]:
        """What ``gpcnn.forecast`` and ``gpcnn.plan`` take besides the fit's parameters."""
        return {
            "epochs": EPOCHS,
            "segments": self.segments,
            "validation_table": f"{TABLES}.fm_test",
            "seed": seed,
        }

    def params(self) -> dict[str, Any]:
        return {
            "optimizer": models.optimizer(self.optimizer, RATES[self.optimizer]),
            "learning_rate": RATES[self.optimizer],
            "shuffle": True,
            "optimizer_state": "local",
            "merge": self.merge,
            "merges_per_epoch": self.merges_per_epoch,
        }


CONFIGS = (
    Config(1, "fedavg_cnn", "momentum", 6, None, "average"),
    Config(2, "fedavg_cnn", "momentum", 12, None, "bmuf"),
    Config(3, "small_cnn", "momentum", 6, None, "bmuf", 4),
    Config(4, "small_cnn", "momentum", 12, None, "average", plan=True),
    Config(5, "bn_cnn", "adam", 6, None, "average"),
    Config(6, "bn_cnn", "adam", 12, None, "bmuf"),
    Config(7, "bn_cnn", "momentum", 6, 0.3, "average"),
    Config(8, "bn_cnn", "momentum", 12, 0.3, "bmuf"),
    Config(9, "bn_cnn", "momentum", 6, 0.05, "average", plan=True),
    Config(10, "gn_cnn", "momentum", 12, 0.05, "average"),
)


def chosen(values: str | None, default: list[int]) -> list[int]:
    return [int(v) for v in values.split()] if values else default


def load_tables(db: gpcnn.Database) -> None:
    """Fashion-MNIST's train split, IID over 12 segments and once per skewed configuration (its own
    Dirichlet draw: the first seed from the configuration's number that leaves no segment empty),
    and its test split; each made once."""
    present = {str(t.table) for t in gpcnn.list_tables(db)}
    data = load_fashion_mnist()
    wanted = {f"{TABLES}.fm_test": (data.x_test, data.y_test, 12, None, 0)}
    wanted[f"{TABLES}.fm_iid"] = (data.x_train, data.y_train, 12, None, 0)
    for c in CONFIGS:
        if c.alpha is not None:
            wanted[c.table] = (data.x_train, data.y_train, c.segments, c.alpha, 100 * c.number)
    for name, (x, y, k, alpha, seed) in wanted.items():
        if name in present:
            continue
        while True:
            try:
                skewed = {"distribution": "label-skew", "skew": alpha} if alpha else {}
                gpcnn.load_images(db, name, x, y, segments=k, seed=seed, progress=False, **skewed)
                break
            except ValueError as error:
                if "without images" not in str(error):
                    raise
                seed += 1
        print(f"loaded {name} (K = {k}, alpha {alpha}, seed {seed})", flush=True)


def forecast_step(db: gpcnn.Database, configs: list[Config], seeds: list[int]) -> None:
    load_tables(db)
    OUT.mkdir(parents=True, exist_ok=True)
    found = read_json(OUT / "forecasts.json")
    for c in configs:
        for seed in seeds:
            key = f"{c.number}-s{seed}"
            if key in found:
                continue
            model = getattr(models, c.model)
            f = gpcnn.forecast(db, c.table, model, **c.pilots(seed), **c.params())
            found[key] = {"config": asdict(c), "seed": seed, **asdict(f)}
            write_json(OUT / "forecasts.json", found)
            print(f"{key}: {f.message()}", flush=True)
    plans = read_json(OUT / "plans.json")
    for c in configs:
        if c.plan and 0 in seeds and str(c.number) not in plans:
            params = {n: v for n, v in c.params().items() if n not in ONE_WORKER}
            model = getattr(models, c.model)
            p = gpcnn.plan(db, c.table, model, tolerance=TOLERANCE, **c.pilots(0), **params)
            plans[str(c.number)] = {
                "config": asdict(c),
                "text": p.text(),
                "chosen": None if p.chosen is None else plan_choice(p.chosen),
                "candidates": [plan_choice(x) | asdict(x.forecast) for x in p.candidates],
            }
            write_json(OUT / "plans.json", plans)
            print(p.text(), flush=True)


def plan_choice(candidate) -> dict[str, Any]:
    return {
        "merge": candidate.merge,
        "merges_per_epoch": candidate.merges_per_epoch,
        "redealt": candidate.redealt,
        "shared_sample": candidate.shared_sample,
        "meets": candidate.meets,
    }


def pilot_tables(
    db: gpcnn.Database, c: Config, seed: int, redealt: bool = False, shared: float = 0.0
):
    """(the setting's table, the one worker's table) as the forecast chose them."""
    info = gpcnn.describe_table(db, c.table)
    same = c.segments == info.segments and not redealt and not shared
    setting = info.table if same else pilot_table(info.table, c.segments, seed, shared)
    return str(setting), str(pilot_table(info.table, 1, seed))


def continue_run(
    db: gpcnn.Database, name: str, table: str, model: str, params: dict, seed: int
) -> None:
    """The pilot of ``params`` on ``table`` continued to epoch ``EPOCHS``, its history written
    to runs/<name>.json."""
    target = OUT / "runs" / f"{name}.json"
    if target.exists():
        return
    merges = int(params.get("merges_per_epoch", 1))
    est = gpcnn.GreenplumCNN(
        getattr(models, model),
        database=db,
        seed=seed,
        validation_table=f"{TABLES}.fm_test",
        verbose=0,
        iterations=PILOT_EPOCHS * merges,
        **params,
    )
    model_json = est._model(gpcnn.describe_table(db, table)).to_json()
    # a pilot cut off while it was being continued is left 'running': continue it too
    stored = est.stored_params()
    run_id, history = runs.finished_like(
        db,
        table,
        stored,
        model_json,
        1,
        validation_table=stored["validation_table"],
        unfinished_too=True,
    )
    if not run_id:
        raise SystemExit(f"{name}: no pilot stored for {table}: run the forecast step first")
    if len(history) < EPOCHS * merges:
        with est.set_params(iterations=EPOCHS * merges) as fitting:
            fitting.fit(table, resume=run_id)
        history = list(fitting.history_)
    target.parent.mkdir(parents=True, exist_ok=True)
    write_json(target, {"table": table, "run_id": run_id, "history": history})
    print(f"{name}: epoch {EPOCHS} val_accuracy {history[-1]['val_accuracy']:.4f}", flush=True)


def runs_step(db: gpcnn.Database, configs: list[Config], seeds: list[int]) -> None:
    plans = read_json(OUT / "plans.json")
    for c in configs:
        for seed in seeds:
            setting, single = pilot_tables(db, c, seed)
            alone = c.params() | ONE_WORKER
            continue_run(db, f"{c.number}-s{seed}", setting, c.model, c.params(), seed)
            continue_run(db, f"{c.number}-single-s{seed}", single, c.model, alone, seed)
        plan = plans.get(str(c.number))
        if plan and 0 in seeds:
            # the plan's choice; where none met the tolerance, its nearest candidate, to check
            # that it indeed ends outside
            picked = plan["chosen"] or min(plan["candidates"], key=lambda x: x["high"])
            params = c.params() | {
                "merge": picked["merge"],
                "merges_per_epoch": picked["merges_per_epoch"],
            }
            setting, _ = pilot_tables(db, c, 0, picked["redealt"], picked["shared_sample"])
            continue_run(db, f"{c.number}-plan-s0", setting, c.model, params, 0)


def score_step() -> None:
    """The score as docs/convergence.md renders it (``gpcnn.study.doc_forecast``)."""
    fact = facts(Path("."))
    print(fact("forecast/score").strip())
    print(f"\nintervals held: {fact('forecast/held')}")
    said = {
        "mean absolute error, IID tables (points)": "forecast/mae/iid",
        "mean absolute error, skewed tables (points)": "forecast/mae/skewed",
        "root-mean-square error of each seed, skewed tables (points)": "forecast/rms/skewed",
        "the pilots' seconds against the run's": "forecast/cost",
    }
    for label, key in said.items():
        try:
            print(f"{label}: {fact(key)}")
        except MissingSource as missing:
            print(f"{label}: {missing}")


def read_json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def write_json(path: Path, value: dict) -> None:
    path.write_text(json.dumps(value, indent=1, sort_keys=True) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("step", choices=("forecast", "runs", "score"))
    step = parser.parse_args().step
    if step == "score":
        score_step()
        return
    by_number = {c.number: c for c in CONFIGS}
    wanted = chosen(os.environ.get("STUDY_CONFIGS"), list(by_number))
    configs = [by_number[n] for n in wanted]  # in the order given
    seeds = chosen(os.environ.get("STUDY_SEEDS"), [0, 1])
    db = gpcnn.connect(schema=SCHEMA)
    gpcnn.install(db)
    (forecast_step if step == "forecast" else runs_step)(db, configs, seeds)


if __name__ == "__main__":
    main()
