"""What the segments' model cache saves a prediction (issue 26, item 3): compile options with the
optimizer's numbered name, as before 17384cc (a new cache key per call, so every call rebuilt and
retraced the model on each segment), against the shipped options, interleaved in one process.

    .venv/bin/python bench/model_cache.py [--rounds 9] [--out bench/results/model-cache-ab.json]

Each round predicts the 10,000 Fashion-MNIST test images (``models.small_cnn``) into a table at
K = 1 (2 TF threads) and K = 2 (1 thread each) with each kind of options; the first round warms
up and is dropped. Prints and writes the medians and every round's seconds.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import statistics
import time
from pathlib import Path

import gpcnn
from gpcnn.datasets import load_fashion_mnist
from gpcnn.fit import compiling, direct_prediction
from gpcnn.kernel import segment
from gpcnn.models import small_cnn

SCHEMA = "gpcnn_bench_model_cache"
SHIPPED = compiling.compile_options
_numbers = itertools.count()


def numbered(*args) -> compiling.CompileOptions:
    """The shipped options with the optimizer named as Keras numbers new ones (sgd_0, sgd_1, ...)."""
    options = SHIPPED(*args)
    config = {**options.optimizer["config"], "name": f"sgd_{next(_numbers)}"}
    return dataclasses.replace(options, optimizer={**options.optimizer, "config": config})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--out", type=Path, default=Path("bench/results/model-cache-ab.json"))
    args = parser.parse_args(argv)
    db = gpcnn.connect()
    gpcnn.install(db)
    segment.keras_module().utils.set_random_seed(0)
    model, data = small_cnn(), load_fashion_mnist()
    tables = {}
    for k in (1, 2):
        tables[k] = f"{SCHEMA}.test_k{k}"
        gpcnn.load_images(
            db, tables[k], data.x_test, data.y_test, segments=k, replace=True, progress=False
        )
    kinds = {"numbered name (before)": numbered, "no name (shipped)": SHIPPED}
    times = {(kind, k): [] for kind in kinds for k in (1, 2)}
    for round_ in range(args.rounds):
        for kind, options in kinds.items():
            direct_prediction.compiling.compile_options = options
            for k, threads in ((1, 2), (2, 1)):
                started = time.perf_counter()
                gpcnn.predict(db, model, tables[k], output_table=f"{SCHEMA}.predicted",
                              replace=True, threads_per_segment=threads)  # fmt: skip
                if round_:
                    times[(kind, k)].append(time.perf_counter() - started)
    direct_prediction.compiling.compile_options = SHIPPED
    report = {
        f"{kind}, K={k}": {"median": statistics.median(values), "rounds": values}
        for (kind, k), values in times.items()
    }
    args.out.write_text(json.dumps(report, indent=1))
    for name, entry in report.items():
        print(f"{name}: median {entry['median']:.3f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
