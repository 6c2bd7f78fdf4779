"""Prediction in the database against plain Keras ``model.predict`` (issue 26, item 3).

    .venv/bin/python bench/predict.py [--repeats 7] [--batch 1000] [--out bench/results/predict.json]
    .venv/bin/python bench/predict.py --big 250 [--images 1000] [--out bench/results/predict-big.json]

Rounds: the 10,000 Fashion-MNIST test images (``models.small_cnn``, seeded weights) predicted into
a table by ``gpcnn.predict(..., output_table=...)`` (the whole call: the weights sent, the window
over the buffers, the rows inserted, the output renamed into place), K = 1 with 2 TF threads and
K = 2 with 1 thread per segment, against plain Keras ``model.predict(x, batch_size)`` in persistent
worker processes with 2 and with 1 TF thread (``bench/epoch.py``'s workers), and with 1 thread in
two processes at once, one half of the images each (the 2-core limit as measured). Every variant runs
once to warm up (TF, the model in the segment sessions of the pool), then ``--repeats`` rounds
each running every variant once, interleaved; medians, and the two targets as median ratios
within the run: K = 1 against ``predict`` with 2 threads (≤ 1.3), K = 2 against the 2-core limit,
one-thread ``predict`` ÷ 2 (≤ 1.3), and against the halves side by side; the load
(``os.getloadavg``) before and after.

``--big M``: one model of about M million weights (8x8x1 input, Dense(H, relu), Dense(10), the
model of ``bench/overhead.py``) predicts ``--images`` random images into a table at K = 2, once: the
weights reach the segments in chunks, as a training start (never one value); the seconds, the
client's peak memory, and whether every label matches local Keras.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from epoch import Worker, half, side_by_side

SCHEMA = "gpcnn_bench_predict"


def worker(threads: int) -> int:
    """Answer ``{"batch"}`` lines (with ``"half"``: of one half) with the seconds of one
    ``model.predict`` of the test images."""
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    from gpcnn.datasets import load_fashion_mnist
    from gpcnn.kernel import segment
    from gpcnn.models import small_cnn

    keras = segment.keras_module(threads=threads)
    x = segment.to_model_input(load_fashion_mnist().x_test[..., None])
    keras.utils.set_random_seed(0)
    model = small_cnn()
    print("ready", flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        images = half(x, request)
        started = time.perf_counter()
        model.predict(images, batch_size=int(request["batch"]), verbose=0)
        print(json.dumps(time.perf_counter() - started), flush=True)
    return 0


def rounds(db, repeats: int, batch: int) -> dict:
    import gpcnn
    from gpcnn.datasets import load_fashion_mnist
    from gpcnn.kernel import segment
    from gpcnn.models import small_cnn

    segment.keras_module().utils.set_random_seed(0)
    model = small_cnn()
    data = load_fashion_mnist()
    tables = {}
    for k in (1, 2):
        tables[k] = f"{SCHEMA}.test_k{k}"
        gpcnn.load_images(
            db, tables[k], data.x_test, data.y_test, segments=k, replace=True, progress=False
        )
    workers = {threads: Worker(threads, __file__) for threads in (1, 2)}
    pair = [workers[1], Worker(1, __file__)]

    def in_database(k: int, threads: int) -> float:
        started = time.perf_counter()
        out = f"{SCHEMA}.predicted_k{k}"
        gpcnn.predict(db, model, tables[k], output_table=out, replace=True,
                      threads_per_segment=threads)  # fmt: skip
        return time.perf_counter() - started

    variants = {
        "predict 2 threads": lambda: workers[2].seconds(batch=batch),
        "predict 1 thread": lambda: workers[1].seconds(batch=batch),
        "predict 1 thread, halves side by side": lambda: side_by_side(pair, batch=batch),
        "gpcnn K=1, 2 threads": lambda: in_database(1, 2),
        "gpcnn K=2, 1 thread each": lambda: in_database(2, 1),
    }
    times = {name: [] for name in variants}
    load_before = os.getloadavg()
    for round_ in range(repeats + 1):
        for name, run in variants.items():
            seconds = run()
            if round_:
                times[name].append(seconds)
            print(f"round {round_} {name}: {seconds:.3f} s", flush=True)
    for w in {*workers.values(), *pair}:
        w.close()
    medians = {name: statistics.median(values) for name, values in times.items()}
    return {
        "repeats": repeats,
        "batch": batch,
        "load_before": load_before,
        "load_after": os.getloadavg(),
        "medians": medians,
        "all": times,
        "k1_over_predict2": medians["gpcnn K=1, 2 threads"] / medians["predict 2 threads"],
        "k2_over_limit": medians["gpcnn K=2, 1 thread each"] / (medians["predict 1 thread"] / 2),
        "k2_over_side_by_side": medians["gpcnn K=2, 1 thread each"]
        / medians["predict 1 thread, halves side by side"],
    }


def big(db, million: float, images: int) -> dict:
    import numpy as np

    import gpcnn
    from gpcnn.kernel import segment, wire

    keras = segment.keras_module()
    keras.utils.set_random_seed(0)
    hidden = round((million * 1e6 - 10) / (64 + 1 + 10))  # 75 H + 10 weights
    layers = [keras.layers.Flatten(), keras.layers.Dense(hidden, activation="relu")]
    model = keras.Sequential([keras.Input((8, 8, 1)), *layers, keras.layers.Dense(10, "softmax")])
    weights = sum(wire.sizes(wire.manifest(model)))
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (images, 8, 8), dtype=np.uint8)
    y = rng.integers(0, 10, images)
    table, out = f"{SCHEMA}.big", f"{SCHEMA}.big_predicted"
    gpcnn.load_images(db, table, x, y, segments=2, num_classes=10, replace=True, progress=False)
    load_before = os.getloadavg()
    started = time.perf_counter()
    gpcnn.predict(db, model, table, output_table=out, replace=True, threads_per_segment=1)
    seconds = time.perf_counter() - started
    xs, _, ids = gpcnn.read_images(db, table, ids=True)
    local = np.argmax(model.predict(segment.to_model_input(xs), verbose=0), axis=1)
    with db.engine.connect() as conn:
        got = dict(conn.exec_driver_sql(f"SELECT id, class_value FROM {out}").all())
    return {
        "weights": int(weights),
        "images": images,
        "segments": 2,
        "seconds": seconds,
        "client_peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        "labels_match_keras": [got[int(i)] for i in ids] == local.tolist(),
        "load_before": load_before,
        "load_after": os.getloadavg(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--batch", type=int, default=1000, help="plain Keras predict's batch")
    parser.add_argument("--big", type=float, help="million weights: the one big prediction")
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args.worker)

    import gpcnn

    db = gpcnn.connect()
    gpcnn.install(db)
    if args.big:
        report = big(db, args.big, args.images)
        out = args.out or Path("bench/results/predict-big.json")
    else:
        report = rounds(db, args.repeats, args.batch)
        out = args.out or Path("bench/results/predict.json")
    out.write_text(json.dumps(report, indent=1))
    print(json.dumps({k: v for k, v in report.items() if k != "all"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
