"""What seeding costs the next training batch (issue 12): ``keras.utils.set_random_seed`` calls
``tf.random.set_seed``, which clears TensorFlow's kernel cache, so the next ``train_on_batch``
instantiates and optimizes the train step again. The segments seed Keras's SeedGenerators, Python
and NumPy instead (``segment.seed_everything``).

    .venv/bin/python bench/tf_seed.py [--repeats 7]

Per model (a 1M-weight dense model, the BatchNorm CNN), one TF thread, batch 32: the median time
of one ``train_on_batch`` right after each way of seeding, the ways interleaved; then whether
the weights after three seeded batches from the same start are bit-identical with and without
TensorFlow's global seed (the BatchNorm CNN has Dropout, whose masks the seeding fixes).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np

from gpcnn import models
from gpcnn.kernel import segment, wire

keras = segment.keras_module(threads=1)


def dense_1m():
    return keras.Sequential(
        [
            keras.Input((8, 8, 1)),
            keras.layers.Flatten(),
            keras.layers.Dense(13_333, activation="relu"),
            keras.layers.Dense(10, activation="softmax"),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    built = {"dense 1M": dense_1m(), "bn-cnn": models.build("bn-cnn", (28, 28, 1), 10)}
    for name, model in built.items():
        model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
        rng = np.random.default_rng(0)
        x = rng.random((32, *model.input_shape[1:])).astype("float32")
        y = rng.integers(0, 10, 32)
        model.train_on_batch(x, y)  # trace
        ways = {
            "no seeding": lambda: None,
            "keras.utils.set_random_seed": lambda: keras.utils.set_random_seed(1),
            "segment.seed_everything": lambda m=model: segment.seed_everything(m, 1, 1, 0),
        }
        times: dict[str, list[float]] = {way: [] for way in ways}
        for _ in range(args.repeats):
            for way, seed in ways.items():
                seed()
                started = time.perf_counter()
                model.train_on_batch(x, y)
                times[way].append(time.perf_counter() - started)
        for way, values in times.items():
            print(f"{name}: {way}: {1000 * statistics.median(values):.1f} ms")
    print(
        f"bn-cnn: weights bit-identical without TF's global seed: {same_weights(built['bn-cnn'])}"
    )


def same_weights(model) -> bool:
    """Three batches from the same weights and optimizer state, seeded as the segments do, with
    and without ``tf.random.set_seed`` (via ``keras.utils.set_random_seed``) before it."""
    rng = np.random.default_rng(1)
    x = rng.random((96, *model.input_shape[1:])).astype("float32")
    y = rng.integers(0, 10, 96)
    start = wire.vector_of(list(model.weights))
    slots = [v.numpy() for v in model.optimizer.variables]
    trained = []
    for with_tf_seed in (True, False):
        wire.set_model_weights(model, start)
        for var, value in zip(model.optimizer.variables, slots, strict=True):
            var.assign(value)
        if with_tf_seed:
            keras.utils.set_random_seed(7)
        segment.seed_everything(model, 7, 1, 0)
        for batch in range(3):
            model.train_on_batch(x[32 * batch : 32 * (batch + 1)], y[32 * batch : 32 * (batch + 1)])
        trained.append(wire.vector_of(list(model.weights)))
    return bool(np.array_equal(*trained))


if __name__ == "__main__":
    main()
