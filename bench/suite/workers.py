"""Plain Keras in persistent worker processes, for the epoch and prediction benchmarks: TF's
thread count is fixed per process, so each thread count gets a process of its own, kept for the
whole run.

Run as ``python bench/suite/workers.py (fit|predict) THREADS``: it prints ``ready``, then answers
each JSON request line with the seconds of one epoch (``fit``: ``{"variant": "fit"|"loop",
"batch", "metrics"}``) or of one ``model.predict`` of the test images (``predict``:
``{"batch"}``); with ``"half": 0|1`` of that half of the images only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

LEARNING_RATE = 0.05


def half(array, request: dict):
    """The whole ``array``, or the first or second half of it for a request with ``"half"``."""
    if request.get("half") is None:
        return array
    middle = len(array) // 2
    return array[:middle] if request["half"] == 0 else array[middle:]


def serve(kind: str, threads: int) -> int:
    """Answer requests on stdin (the module's docstring) until it closes."""
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    from gpcnn.datasets import load_fashion_mnist
    from gpcnn.kernel import keras_setup, segment
    from gpcnn.models import small_cnn

    keras = keras_setup.keras_module(threads=threads)
    data = load_fashion_mnist()
    if kind == "fit":
        x, y = segment.to_model_input(data.x_train[..., None]), data.y_train.astype("int32")
    else:
        x, y = segment.to_model_input(data.x_test[..., None]), None
        keras.utils.set_random_seed(0)
        predictor = small_cnn()
    models = {}
    print("ready", flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        batch, xs = int(request["batch"]), half(x, request)
        started = time.perf_counter()
        if kind == "predict":
            predictor.predict(xs, batch_size=batch, verbose=0)
        else:
            ys, metrics = half(y, request), list(request["metrics"])
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


class Worker:
    """A persistent worker process (this file run as a script): a JSON request per line, seconds
    back."""

    def __init__(self, kind: str, threads: int) -> None:
        self.process = subprocess.Popen(
            [sys.executable, __file__, kind, str(threads)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        while self.process.stdout.readline().strip() != "ready":
            if self.process.poll() is not None:
                raise RuntimeError(f"the {kind} worker ended before it was ready")

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


def start(kind: str, database: str | None, schema: str):
    """What the epoch (``fit``) and prediction (``predict``) benchmarks start from: gpcnn
    installed, Fashion-MNIST's training (``fit``) or test split loaded at K = 1 and K = 2, and
    the workers: ``{2: two threads, 1: one thread}`` and a pair of one-thread workers for the
    halves side by side (the first of them shared). Returns (db, tables by K, workers, pair)."""
    import gpcnn
    from gpcnn.datasets import load_fashion_mnist

    db = gpcnn.connect(database)
    gpcnn.install(db)
    data = load_fashion_mnist()
    x, y = (data.x_train, data.y_train) if kind == "fit" else (data.x_test, data.y_test)
    tables = {}
    for k in (1, 2):
        tables[k] = f"{schema}.{kind}_k{k}"
        gpcnn.load_images(db, tables[k], x, y, segments=k, replace=True, progress=False)
    workers = {threads: Worker(kind, threads) for threads in (1, 2)}
    return db, tables, workers, [workers[1], Worker(kind, 1)]


def side_by_side(pair: list[Worker], **request) -> float:
    """The measured 2-core limit: two one-thread workers each running one half of the data at
    once; the seconds of the slower. Two TF processes on 2 cores do not always run at twice
    one's speed, which ``one thread ÷ 2`` assumes."""
    for index, w in enumerate(pair):
        w.send(half=index, **request)
    return max(w.receive() for w in pair)


if __name__ == "__main__":
    raise SystemExit(serve(sys.argv[1], int(sys.argv[2])))
