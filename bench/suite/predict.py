"""Benchmark ``predict``: prediction into a table against plain Keras ``model.predict``."""

from __future__ import annotations

import statistics
import time

from .base import Benchmark, Context, Outcome, Table, ratio_target
from .workers import side_by_side, start

SCHEMA = "gpcnn_bench_predict"
K1, K2 = "gpcnn K=1, 2 threads", "gpcnn K=2, 1 thread each"
P2, P1, HALVES = "predict 2 threads", "predict 1 thread", "predict 1 thread, halves side by side"
LIMIT = 1.3


def run(context: Context) -> Outcome:
    import gpcnn
    from gpcnn.kernel import keras_setup
    from gpcnn.models import small_cnn

    db, tables, workers, pair = start("predict", context.database, SCHEMA)
    keras_setup.keras_module().utils.set_random_seed(0)
    model = small_cnn()
    batch = context["batch"]

    def in_database(k: int, threads: int) -> float:
        started = time.perf_counter()
        gpcnn.predict(
            db,
            model,
            tables[k],
            output_table=f"{SCHEMA}.predicted_k{k}",
            replace=True,
            threads_per_segment=threads,
        )
        return time.perf_counter() - started

    variants = {
        P2: lambda: workers[2].seconds(batch=batch),
        P1: lambda: workers[1].seconds(batch=batch),
        HALVES: lambda: side_by_side(pair, batch=batch),
        K1: lambda: in_database(1, 2),
        K2: lambda: in_database(2, 1),
    }
    times = {name: [] for name in variants}
    for round_ in range(context["rounds"] + 1):  # round 0 warms every variant up
        for name, measure in variants.items():
            seconds = measure()
            if round_:
                times[name].append(seconds)
            print(f"round {round_} {name}: {seconds:.3f} s", flush=True)
    for w in {*workers.values(), *pair}:
        w.close()
    db.close()
    return outcome(times)


def outcome(times: dict[str, list[float]]) -> Outcome:
    """Tables and targets from each variant's seconds per round."""
    medians = {name: statistics.median(values) for name, values in times.items()}
    k1 = medians[K1] / medians[P2]
    k2 = medians[K2] / (medians[P1] / 2)
    table = Table(
        "Seconds per call (the 10,000 test images), every round and the median.",
        ["variant", "rounds (s)", "median s"],
        [
            [name, " ".join(f"{s:.2f}" for s in values), medians[name]]
            for name, values in times.items()
        ],
    )
    targets = [
        ratio_target(f"K = 1 ≤ {LIMIT}× `predict` with 2 threads", k1, LIMIT),
        ratio_target(f"K = 2 ≤ {LIMIT}× the 2-core limit (`predict` 1 thread ÷ 2)", k2, LIMIT),
    ]
    ratios = {
        "k1_over_predict2": k1,
        "k2_over_limit": k2,
        "k2_over_side_by_side": medians[K2] / medians[HALVES],
    }
    return Outcome([table], targets, {"seconds": times, "ratios": ratios})


BENCHMARK = Benchmark(
    name="predict",
    title="Prediction against plain Keras",
    question="How long does predicting a table take in the database, against plain Keras?",
    method=(
        "The 10,000 Fashion-MNIST test images, `models.small_cnn` with seeded weights, "
        "predicted into a table by `gpcnn.predict(..., output_table=...)` (the whole call: the "
        "weights sent, the window over the buffers, the rows inserted, the output renamed into "
        "place) at K = 1 with 2 TF threads and K = 2 with 1 thread per segment, against "
        "`model.predict(x, batch_size)` in persistent worker processes with 2 and 1 TF threads, "
        "and one-thread `predict` in two processes at once on one half each. Every variant is "
        "warmed up once (TF, the model in the segment sessions of the pool), then each round "
        "runs every variant once."
    ),
    defaults={"batch": 1000, "rounds": 7},
    quick={"rounds": 1},
    run=run,
)
