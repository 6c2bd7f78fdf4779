"""One epoch of Fashion-MNIST (60,000 images, ``models.small_cnn``, plain SGD): plain Keras
against gpcnn, in one run, repetitions interleaved (issues 12 and 26).

    .venv/bin/python bench/epoch.py [--repeats 7] [--batches 32 100] [--metrics accuracy none]
        [--out bench/epoch.json]

Variants, per batch size: Keras ``fit`` with 2 and with 1 TensorFlow thread, ``fit`` with 1 thread
in two processes at once on one half of the images each (the 2-core limit as measured), a
``train_on_batch`` loop with 2 threads (what a segment runs), gpcnn K = 1 with 2 threads and K = 2
with 1 thread per segment (one iteration = one epoch, ``merges_per_epoch=1``), each compiled with
the loss and accuracy (``accuracy``, gpcnn's default: it computes them for every batch) and with
the loss alone (``none``: ``metrics=()``), so that what the metric costs each side shows. They run in two
worker processes (TF's thread count is fixed per process), kept for the whole run; every variant
is warmed up once (tracing, TF and the model in the backends) before round 1. Each round runs
every variant once; the report gives medians and, per batch size and metrics, the two targets as
median ratios within the run: K = 1 against ``fit`` with 2 threads and the same metrics
(≤ 1.05), K = 2 against the 2-core limit, one-thread ``fit`` ÷ 2 (≤ 1.10), and against the
halves side by side; and the load (``os.getloadavg``) before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SCHEMA = "gpcnn_bench_epoch"
LEARNING_RATE = 0.05
METRICS = {"accuracy": ["accuracy"], "none": []}


def worker(threads: int) -> int:
    """Answer ``{"variant", "batch", "metrics"}`` lines with the seconds of one epoch, TF on
    ``threads``."""
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    from gpcnn.datasets import load_fashion_mnist
    from gpcnn.kernel import segment
    from gpcnn.models import small_cnn

    keras = segment.keras_module(threads=threads)
    data = load_fashion_mnist()
    x = segment.to_model_input(data.x_train[..., None] if data.x_train.ndim == 3 else data.x_train)
    y = data.y_train.astype("int32")
    models = {}
    print("ready", flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        batch, metrics = int(request["batch"]), list(request["metrics"])
        xs, ys = half(x, request), half(y, request)
        model = models.get((batch, *metrics))
        if model is None:
            keras.utils.set_random_seed(0)
            model = models[(batch, *metrics)] = small_cnn()
            model.compile(
                keras.optimizers.SGD(LEARNING_RATE),
                "sparse_categorical_crossentropy",
                metrics=metrics,
            )
        started = time.perf_counter()
        if request["variant"] == "fit":
            model.fit(xs, ys, batch_size=batch, epochs=1, shuffle=False, verbose=0)
        else:
            for start in range(0, len(xs), batch):
                model.train_on_batch(xs[start : start + batch], ys[start : start + batch])
        print(json.dumps(time.perf_counter() - started), flush=True)
    return 0


def half(array, request: dict):
    """The whole ``array``, or the first or second half of it for a request with ``"half"``."""
    if request.get("half") is None:
        return array
    middle = len(array) // 2
    return array[:middle] if request["half"] == 0 else array[middle:]


class Worker:
    """A persistent ``script --worker threads`` process: a JSON request per line, seconds back
    (``bench/predict.py`` runs its plain Keras this way too)."""

    def __init__(self, threads: int, script: str = __file__) -> None:
        self.process = subprocess.Popen(
            [sys.executable, script, "--worker", str(threads)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        while self.process.stdout.readline().strip() != "ready":
            pass

    def seconds(self, **request) -> float:
        self.send(**request)
        return self.receive()

    def send(self, **request) -> None:
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()

    def receive(self) -> float:
        return float(self.process.stdout.readline())

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait()


def side_by_side(pair: list[Worker], **request) -> float:
    """The measured 2-core limit: two one-thread workers each running one half of the data at
    once; the seconds of the slower. Two TF processes on these 2 cores do not always run at twice
    one's speed, which ``one thread ÷ 2`` assumes."""
    for index, w in enumerate(pair):
        w.send(half=index, **request)
    return max(w.receive() for w in pair)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--batches", type=int, nargs="+", default=[32, 100])
    parser.add_argument(
        "--metrics", nargs="+", choices=sorted(METRICS), default=["accuracy", "none"]
    )
    parser.add_argument("--out", type=Path, default=Path("bench/epoch.json"))
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args.worker)

    import gpcnn
    from gpcnn.datasets import load_fashion_mnist
    from gpcnn.estimator import GreenplumCNN
    from gpcnn.fit import runs
    from gpcnn.models import small_cnn

    db = gpcnn.connect()
    gpcnn.install(db)
    data = load_fashion_mnist()
    tables = {}
    for k in (1, 2):
        tables[k] = f"{SCHEMA}.train_k{k}"
        gpcnn.load_images(
            db, tables[k], data.x_train, data.y_train, segments=k, replace=True, progress=False
        )
    workers = {threads: Worker(threads) for threads in (1, 2)}
    pair = [workers[1], Worker(1)]

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
        "fit 2 threads": lambda b, m: workers[2].seconds(variant="fit", batch=b, metrics=m),
        "fit 1 thread": lambda b, m: workers[1].seconds(variant="fit", batch=b, metrics=m),
        "fit 1 thread, halves side by side": lambda b, m: side_by_side(
            pair, variant="fit", batch=b, metrics=m
        ),
        "train_on_batch loop 2 threads": lambda b, m: workers[2].seconds(
            variant="loop", batch=b, metrics=m
        ),
        "gpcnn K=1, 2 threads": lambda b, m: gpcnn_epoch(1, 2, b, m),
        "gpcnn K=2, 1 thread each": lambda b, m: gpcnn_epoch(2, 1, b, m),
    }
    cases = [(b, m) for b in args.batches for m in args.metrics]
    times = {(name, case): [] for name in variants for case in cases}
    load_before = os.getloadavg()
    for round_ in range(args.repeats + 1):
        for batch, metrics in cases:
            for name, run in variants.items():
                seconds = run(batch, METRICS[metrics])
                if round_:
                    times[(name, (batch, metrics))].append(seconds)
                print(
                    f"round {round_} batch {batch} metrics {metrics} {name}: {seconds:.2f} s",
                    flush=True,
                )
    for w in {*workers.values(), *pair}:
        w.close()
    report = {
        "repeats": args.repeats,
        "load_before": load_before,
        "load_after": os.getloadavg(),
        "cases": {},
    }
    for case in cases:
        medians = {name: statistics.median(times[(name, case)]) for name in variants}
        report["cases"][f"batch {case[0]}, metrics {case[1]}"] = {
            "medians": medians,
            "all": {name: times[(name, case)] for name in variants},
            "k1_over_fit2": medians["gpcnn K=1, 2 threads"] / medians["fit 2 threads"],
            "k2_over_limit": medians["gpcnn K=2, 1 thread each"] / (medians["fit 1 thread"] / 2),
            "k2_over_side_by_side": medians["gpcnn K=2, 1 thread each"]
            / medians["fit 1 thread, halves side by side"],
        }
    args.out.write_text(json.dumps(report, indent=1))
    print(
        json.dumps(
            {c: {k: v for k, v in r.items() if k != "all"} for c, r in report["cases"].items()},
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
