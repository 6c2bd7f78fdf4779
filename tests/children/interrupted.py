"""Calls that the parent interrupts with SIGINT, as Ctrl-C does (run by tests/test_interrupts.py):
prints "ready" once TensorFlow is imported, then for each line on stdin (a JSON command) runs it
and prints one JSON line: the exception that reached this process (its type name; none if the call
ended) and what the call made. Evaluate and predict first take segment sessions that have
imported TensorFlow (a server process checks for a cancel between buffers, not in an import),
and print "warm" then. Commands: ``fit`` (``iterations``; ``resume``), ``evaluate``,
``predict`` (into ``output``), each on ``table`` if given, and ``load`` (``images`` 8x8 images into
``output``).

Arguments: the database URL, gpcnn's schema and an image table of 2 segments of 8x8 images with 3
classes."""

from __future__ import annotations

import json
import os
import signal
import sys
import time

os.environ["TF_ENABLE_ONEDNN_OPTS"] = "0"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np

import gpcnn
from gpcnn.kernel import keras_setup

# Ctrl-C as a terminal delivers it: a suite started as a background job (`make test &` from a
# script) hands its children SIGINT ignored, and Python then raises no KeyboardInterrupt at all.
signal.signal(signal.SIGINT, signal.default_int_handler)
keras = keras_setup.keras_module(threads=1)
url, schema, table = sys.argv[1:4]
db = gpcnn.connect(url, schema=schema)


def model():
    keras.utils.set_random_seed(7)
    return keras.Sequential(
        [keras.Input((8, 8, 1)), keras.layers.Flatten(), keras.layers.Dense(3, "softmax")]
    )


def estimator(iterations: int = 1) -> gpcnn.GreenplumCNN:
    return gpcnn.GreenplumCNN(
        model(),
        iterations=iterations,
        batch_size=2,
        seed=1,
        database=db,
        threads_per_segment=1,
        verbose=0,
    )


fitted = estimator().fit(table)  # what evaluate and predict use
print("ready", flush=True)
for line in sys.stdin:
    command = json.loads(line)
    result: dict = {"raised": None}
    est = estimator(command.get("iterations", 1))
    try:
        if command["call"] in ("evaluate", "predict"):
            fitted.evaluate(table)  # sessions with TensorFlow loaded: an import is never cut
            print("warm", flush=True)
        if command["call"] == "fit":
            est.fit(table, resume=command.get("resume"))
        elif command["call"] == "evaluate":
            fitted.evaluate(command.get("table", table))
        elif command["call"] == "predict":
            fitted.predict(command.get("table", table), output_table=command["output"])
        elif command["call"] == "load":
            rng = np.random.default_rng(0)
            images = rng.integers(0, 255, (command["images"], 8, 8), dtype=np.uint8)
            labels = rng.integers(0, 3, command["images"])
            gpcnn.load_images(db, command["output"], images, labels, segments=2, progress=False)
    except BaseException as e:  # what reaches the user is the point
        result["raised"] = type(e).__name__
        result["message"] = str(e)
    result["run_id"] = getattr(est, "run_id_", None)
    result["history"] = [row["iteration"] for row in getattr(est, "history_", [])]
    result["at"] = time.time()
    print(json.dumps(result), flush=True)
