"""Benchmark ``epoch``: one epoch of Fashion-MNIST with gpcnn against plain Keras."""

from __future__ import annotations

import statistics

from .base import Benchmark, Context, Outcome, Table, ratio_target
from .workers import LEARNING_RATE, side_by_side, start

SCHEMA = "gpcnn_bench_epoch"
METRICS = {"accuracy": ["accuracy"], "none": []}
K1, K2 = "gpcnn K=1, 2 threads", "gpcnn K=2, 1 thread each"
FIT2, FIT1, HALVES = "fit 2 threads", "fit 1 thread", "fit 1 thread, halves side by side"
K1_LIMIT, K2_LIMIT = 1.05, 1.10


def run(context: Context) -> Outcome:
    from gpcnn.estimator import GreenplumCNN
    from gpcnn.fit import runs
    from gpcnn.models import small_cnn

    db, tables, workers, pair = start("fit", context.database, SCHEMA)

    def gpcnn_epoch(k: int, threads: int, batch: int, metrics: list[str]) -> float:
        est = GreenplumCNN(
            small_cnn(),
            metrics=metrics,
            iterations=1,
            batch_size=batch,
            optimizer="sgd",
            learning_rate=LEARNING_RATE,
            threads_per_segment=threads,
            seed=0,
            database=db,
            verbose=0,
        )
        with est:
            est.fit(tables[k])
        runs.delete_runs(db, [est.run_id_])
        return est.history_[-1]["seconds"]

    variants = {
        FIT2: lambda b, m: workers[2].seconds(variant="fit", batch=b, metrics=m),
        FIT1: lambda b, m: workers[1].seconds(variant="fit", batch=b, metrics=m),
        HALVES: lambda b, m: side_by_side(pair, variant="fit", batch=b, metrics=m),
        "train_on_batch loop 2 threads": lambda b, m: workers[2].seconds(
            variant="loop", batch=b, metrics=m
        ),
        K1: lambda b, m: gpcnn_epoch(1, 2, b, m),
        K2: lambda b, m: gpcnn_epoch(2, 1, b, m),
    }
    cases = [(b, m) for b in context["batches"] for m in context["metrics"]]
    times = {f"batch {b}, metrics {m}": {name: [] for name in variants} for b, m in cases}
    for round_ in range(context["rounds"] + 1):  # round 0 warms every variant up
        for batch, metrics in cases:
            for name, measure in variants.items():
                seconds = measure(batch, METRICS[metrics])
                if round_:
                    times[f"batch {batch}, metrics {metrics}"][name].append(seconds)
                print(
                    f"round {round_} batch {batch} metrics {metrics} {name}: {seconds:.2f} s",
                    flush=True,
                )
    for w in {*workers.values(), *pair}:
        w.close()
    db.close()
    return outcome(times)


def outcome(times: dict[str, dict[str, list[float]]]) -> Outcome:
    """Tables and targets from each case's variants' seconds per round."""
    rows, targets = [], []
    for case, variants in times.items():
        medians = {name: statistics.median(values) for name, values in variants.items()}
        k1 = medians[K1] / medians[FIT2]
        k2 = medians[K2] / (medians[FIT1] / 2)
        rows.append(
            [
                case,
                *medians.values(),
                f"{k1:.2f}",
                f"{k2:.2f}",
                f"{medians[K2] / medians[HALVES]:.2f}",
            ]
        )
        targets.append(
            ratio_target(f"{case}: K = 1 ≤ {K1_LIMIT}× `fit` with 2 threads", k1, K1_LIMIT)
        )
        targets.append(
            ratio_target(
                f"{case}: K = 2 ≤ {K2_LIMIT}× the 2-core limit (`fit` 1 thread ÷ 2)", k2, K2_LIMIT
            )
        )
    names = list(next(iter(times.values())))
    table = Table(
        "Seconds per epoch, medians over the rounds; ratios of medians.",
        ["case", *names, "K=1 ÷ fit 2 thr.", "K=2 ÷ (fit 1 thr. ÷ 2)", "K=2 ÷ halves"],
        rows,
    )
    return Outcome([table], targets, {"seconds": times})


BENCHMARK = Benchmark(
    name="epoch",
    title="An epoch against plain Keras",
    question="How long does an epoch take in the database, against plain Keras on the same cores?",
    method=(
        "One epoch of the 60,000 Fashion-MNIST training images, `models.small_cnn`, plain SGD "
        "0.05, no shuffle. Plain Keras runs in persistent worker processes (`fit` with 2 and "
        "with 1 TF thread, one-thread `fit` in two processes at once on one half each — the "
        "2-core limit as measured — and a `train_on_batch` loop with 2 threads, what a segment "
        "runs); gpcnn with K = 1 and 2 TF threads and K = 2 with 1 thread per segment, one "
        "iteration = one epoch (the iteration's `seconds`). Each is compiled with the accuracy "
        "(gpcnn's default, computed on every batch) or the loss alone (`none`). Every variant "
        "is warmed up once, then each round runs every variant once."
    ),
    defaults={"batches": [32, 100], "metrics": ["accuracy", "none"], "rounds": 5},
    quick={"batches": [100], "metrics": ["none"], "rounds": 1},
    run=run,
)
