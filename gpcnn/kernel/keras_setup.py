"""Keras in this process: TensorFlow's settings fixed before it starts, and the one way a model is
rebuilt from its stored form and compiled, on the client and in the segments alike."""

from __future__ import annotations

import copy
import json
import os
import sys
import tempfile
from typing import Any

from . import server_guard
from .config_check import check_loss, check_metrics, check_model, check_optimizer
from .protocol import CompileOptions

_threads: int | None = None


def keras_module(threads: int | None = None) -> Any:
    """Import Keras, fixing TensorFlow's settings first (thread counts only work before TF starts).

    oneDNN off (it changes results), TensorFlow's log quiet, Keras on TensorFlow: the settings the
    segments use, so that a model built here trains as it does in the database.

    Parameters
    ----------
    threads : int, optional
        TensorFlow's intra- and inter-op threads, set by the first call that gives them (later
        calls cannot change them once TensorFlow has started).

    Returns
    -------
    module
        The ``keras`` module.
    """
    global _threads
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    if not os.environ.get("HOME") and "KERAS_HOME" not in os.environ:
        os.environ["KERAS_HOME"] = os.path.join(tempfile.gettempdir(), "gpcnn-keras")
    if not sys.argv:
        sys.argv = ["gpcnn"]  # absl and friends index sys.argv, which is empty in a backend
    starting = "tensorflow" not in sys.modules
    if starting:
        server_guard.before_tensorflow()
    import tensorflow as tf

    if starting:
        server_guard.after_tensorflow()

    if _threads is None and threads:
        try:
            tf.config.threading.set_intra_op_parallelism_threads(int(threads))
            tf.config.threading.set_inter_op_parallelism_threads(int(threads))
            _threads = int(threads)
        except RuntimeError:  # TF already initialised in this process by someone else
            _threads = tf.config.threading.get_intra_op_parallelism_threads() or None
    import keras

    return keras


def rebuilt(model_json: str, threads: int | None = None) -> Any:
    """The model of ``model.to_json()``, in safe mode (no code travels with a model), once
    ``check_model`` has found only Keras's own layers in it: safe mode alone still builds and
    calls the functions Keras exports."""
    keras = keras_module(threads)
    config = json.loads(model_json)
    check_model(config)
    return keras.saving.deserialize_keras_object(config, safe_mode=True)


def compiled(model: Any, options: CompileOptions) -> Any:
    """``model`` compiled with ``options``, once they hold only Keras's own optimizer, loss and
    metrics (from a copy: Keras replaces a schedule's config in place)."""
    keras = keras_module()
    check_optimizer(options.optimizer)
    check_loss(options.loss)
    check_metrics(options.metrics)
    model.compile(
        optimizer=keras.optimizers.deserialize(copy.deepcopy(options.optimizer)),
        loss=options.loss,
        metrics=list(options.metrics),
    )
    return model


def compiled_model(model_json: str, options: CompileOptions) -> Any:
    """A new compiled model from its stored form: the client's fitted, validation and loaded
    models, and (cached) each segment's."""
    return compiled(rebuilt(model_json), options)
