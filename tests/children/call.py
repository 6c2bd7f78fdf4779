"""One load or prediction in a process of its own, started on a signal so that several overlap
with other calls (run by tests/test_load.py): prints "ready" once TensorFlow is imported, runs
the call when a line arrives on stdin, and prints a JSON line with when it started and ended.

Arguments: the database URL, gpcnn's schema and the call as JSON: ``{"call": "load", "table",
"seed", "images"}`` (the images of ``test_load.images(seed, images)``) or ``{"call": "predict",
"estimator": a file GreenplumCNN.save wrote, "table", "output"}``."""

from __future__ import annotations

import json
import os
import sys
import time

os.environ["TF_ENABLE_ONEDNN_OPTS"] = "0"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import gpcnn
from gpcnn.kernel import keras_setup

keras = keras_setup.keras_module(threads=1)
url, schema, job = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from test_load import images  # noqa: E402 - the test's own data, once the tests are on the path

db = gpcnn.connect(url, schema=schema)
if job["call"] == "predict":
    est = gpcnn.GreenplumCNN.load(job["estimator"]).set_params(database=db)
print("ready", flush=True)
sys.stdin.readline()
started = time.time()
if job["call"] == "load":
    x, y = images(job["seed"], job["images"])
    gpcnn.load_images(db, job["table"], x, y, segments=2, progress=False)
else:
    est.predict(job["table"], output_table=job["output"])
print(json.dumps({"started": started, "ended": time.time()}), flush=True)
