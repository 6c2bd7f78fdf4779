"""TensorFlow in this process: the environment probe, and a model's optimizer, learning-rate and
random state for one iteration of one shard."""

from __future__ import annotations

import hashlib
import json
import os
import random
import sys
from typing import Any

import numpy as np

from .keras_setup import keras_module
from .protocol import SegmentOptions


def probe(threads: int | None = None) -> str:
    """Versions and resources of the Python that runs here, as JSON (the environment check)."""
    keras = keras_module(threads)
    import tensorflow as tf

    return json.dumps(
        {
            "python": sys.version.split()[0],
            "tensorflow": tf.__version__,
            "keras": keras.__version__,
            "numpy": np.__version__,
            "cpu_count": os.cpu_count(),
            "tf_threads": tf.config.threading.get_intra_op_parallelism_threads(),
            "onednn": os.environ.get("TF_ENABLE_ONEDNN_OPTS"),
            "pid": os.getpid(),
        }
    )


def reset_optimizer(model: Any) -> None:
    """A fresh optimizer: every slot and the step counter back to their values after build."""
    for var, start in zip(model.optimizer.variables, model._gpcnn_optimizer_start, strict=True):
        var.assign(start)


def set_rate(model: Any, options: SegmentOptions) -> None:
    """The client's learning rate for this iteration, or the step of its learning-rate schedule
    (batches trained so far), so that schedules and callbacks act across merges."""
    step = options.iteration
    if step.learning_rate is not None:
        model.optimizer.learning_rate = float(step.learning_rate)
    if step.optimizer_step is not None:
        model.optimizer.iterations.assign(int(step.optimizer_step))


def seed_everything(model: Any, seed: int | None, iteration: int, shard: int) -> None:
    """Fix Dropout masks and any other randomness for this (run seed, iteration, shard): the
    state of every Keras ``SeedGenerator`` (Keras 3 draws its random ops from these, statelessly),
    and Python's and NumPy's global generators. ``shard`` is the shard's position in the table
    (``SegmentOptions.shard``), not its key: the keys are the engine's choice. Not TensorFlow's
    global seed, as ``keras.utils.set_random_seed`` would: setting it clears TF's kernel cache, so
    the next ``train_on_batch`` instantiates and optimizes the train step again, 4-6x the time of
    a batch (``bench/tf_seed.py``), per segment and iteration; and no op here reads it."""
    if seed is None:
        return
    derived = int.from_bytes(
        hashlib.sha256(f"{seed}/{iteration}/{shard}".encode()).digest()[:4], "little"
    )
    random.seed(derived)
    np.random.seed(derived % (2**31))
    weight_ids = {id(v) for v in model.weights}
    for i, var in enumerate(model.variables):
        if id(var) not in weight_ids and "seed_generator" in var.path:
            var.assign(np.array([(derived + i) % (2**31), 0], dtype=var.dtype))


def shuffled_order(n: int, seed: int | None, iteration: int, shard: int, offset: int) -> np.ndarray:
    """The order in which one buffer's images are trained when ``shuffle`` is on: a new permutation
    every iteration, as Keras's ``fit(shuffle=True)`` inside MADlib's transition gives, but
    reproducible from (run seed, iteration, shard position, images before this buffer). Without
    the shuffle, every epoch ends on the same last batches, and the model measured at the end of an
    epoch leans towards them."""
    if seed is None:
        return np.random.default_rng().permutation(n)
    digest = hashlib.sha256(f"{seed}/{iteration}/{shard}/{offset}".encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little")).permutation(n)
