"""One fit in a process of its own, started on a signal so that several overlap (run by
tests/test_concurrency.py): prints "ready" once TensorFlow is imported, fits when a line arrives
on stdin, saves the merged weights to a .npy file and prints a JSON line with the run id and
when the fit started and ended.

Arguments: the database URL, gpcnn's schema, the image table, the output .npy path, and the
test module's function that makes the estimator from a database handle (``module:function``)."""

from __future__ import annotations

import importlib
import json
import os
import sys
import time

os.environ["TF_ENABLE_ONEDNN_OPTS"] = "0"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np

import gpcnn
from gpcnn.kernel import keras_setup, wire

keras = keras_setup.keras_module(threads=1)
url, schema, table, out, factory = sys.argv[1:6]
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
module, function = factory.split(":")
estimator = getattr(importlib.import_module(module), function)  # the test's own parameters

est = estimator(gpcnn.connect(url, schema=schema))
print("ready", flush=True)
sys.stdin.readline()
started = time.time()
est.fit(table)
ended = time.time()
np.save(out, wire.flatten(est.model_.get_weights()))
print(json.dumps({"run_id": est.run_id_, "started": started, "ended": ended}), flush=True)
