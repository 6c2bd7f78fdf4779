"""The compile options of a fit, from the estimator's parameters: the optimizer (a name, or a Keras
optimizer copied) with its learning rate, the loss, and metrics that can be merged over segments."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpcnn.kernel import config_check
from gpcnn.kernel.keras_setup import keras_module
from gpcnn.kernel.protocol import CompileOptions

# Metrics whose image-weighted mean over segments equals the metric over all images.
MEAN_METRICS = frozenset(
    {
        "accuracy",
        "acc",
        "sparse_categorical_accuracy",
        "categorical_accuracy",
        "binary_accuracy",
        "sparse_top_k_categorical_accuracy",
        "top_k_categorical_accuracy",
        "sparse_categorical_crossentropy",
        "categorical_crossentropy",
        "binary_crossentropy",
        "mean_squared_error",
        "mse",
        "mean_absolute_error",
        "mae",
    }
)


def check_metrics(metrics: Sequence[str]) -> None:
    for metric in metrics:
        if metric not in MEAN_METRICS:
            raise ValueError(
                f"metric {metric!r}: only metrics that are means over images can be merged "
                f"across segments ({', '.join(sorted(MEAN_METRICS))})"
            )


def compile_options(
    optimizer: str | Any, learning_rate: float | None, loss: str, metrics: Sequence[str]
) -> CompileOptions:
    """The options every model of the fit is compiled with; ``learning_rate`` (unless None)
    replaces the optimizer's. The optimizer goes without its numbered name, so the same options
    are the same text every time: each segment caches its compiled model by that text, and a
    new name per call rebuilt and retraced the model on every prediction."""
    keras = keras_module()
    if isinstance(optimizer, str):
        config = {} if learning_rate is None else {"learning_rate": learning_rate}
        built = keras.optimizers.get({"class_name": optimizer, "config": config})
    else:
        serialized = keras.optimizers.serialize(optimizer)
        config_check.check_optimizer(serialized)
        built = keras.optimizers.deserialize(serialized)
        if learning_rate is not None:
            built.learning_rate = learning_rate
    return CompileOptions(stored_optimizer(built), loss, tuple(metrics))


def stored_optimizer(optimizer: Any) -> dict:
    """A Keras optimizer as stored with a run's parameters: Keras's serialization without the
    name (Keras numbers the names of new optimizers, sgd, sgd_1, ...: not a parameter)."""
    serialized = keras_module().optimizers.serialize(optimizer)
    serialized["config"].pop("name", None)
    return serialized


def loaded_optimizer(stored: dict) -> Any:
    """The optimizer of ``stored_optimizer``, once it holds only Keras's own optimizer."""
    keras = keras_module()
    config_check.check_optimizer(stored)
    return keras.optimizers.deserialize(stored)
