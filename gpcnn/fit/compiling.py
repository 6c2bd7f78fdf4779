"""The compile options of a fit, from the estimator's parameters: the optimizer (a name, or a Keras
optimizer copied) with its learning rate, the loss, and metrics that can be merged over segments."""

from __future__ import annotations

import difflib
import functools
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


# Keras optimizers that wrap or combine others: not one a fit can be given by name.
_WRAPPERS = frozenset({"Optimizer", "LossScaleOptimizer", "MultiOptimizer"})


@functools.cache
def optimizer_names() -> tuple[str, ...]:
    """The names ``optimizer=`` takes: Keras's optimizers that ``keras.optimizers.get`` finds by
    name (lower case)."""
    keras = keras_module()
    base = keras.optimizers.Optimizer

    def by_name(name: str) -> bool:
        try:
            keras.optimizers.get({"class_name": name, "config": {}})
        except ValueError:
            return False
        return True

    classes = (getattr(keras.optimizers, name) for name in dir(keras.optimizers))
    return tuple(
        sorted(
            c.__name__.lower()
            for c in classes
            if isinstance(c, type)
            and issubclass(c, base)
            and c.__name__ not in _WRAPPERS
            and by_name(c.__name__.lower())
        )
    )


def check_optimizer(optimizer: str | Any) -> None:
    """Refuse an optimizer name Keras does not know, with the names it does (and the nearest);
    an optimizer object is checked when its options are built."""
    if not isinstance(optimizer, str):
        return
    names = optimizer_names()
    if optimizer.lower() not in names:
        near = difflib.get_close_matches(optimizer.lower(), names, n=1)
        hint = f"did you mean {near[0]!r}? " if near else ""
        raise ValueError(
            f"optimizer={optimizer!r} is not one of Keras's optimizers: {hint}"
            f"choose from {', '.join(names)}, or pass a keras.optimizers object"
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


def model_warnings(model: Any, options: CompileOptions) -> list[str]:
    """What a fit of ``model`` with ``options`` is likely to get wrong without an error: a
    model compiled with another optimizer than the one the fit trains with (the fit's parameters
    decide, the model's compile is not read), and a last layer that outputs logits to a loss
    that expects probabilities."""
    found = []
    compiled = getattr(model, "optimizer", None)
    trained = options.optimizer["class_name"]
    if compiled is not None and type(compiled).__name__.lower() != trained.lower():
        found.append(
            f"the model was compiled with {type(compiled).__name__}, but the fit trains with "
            f"{trained} (the estimator's optimizer parameter): pass optimizer="
            f"{type(compiled).__name__.lower()!r} (or the optimizer object) to train with it"
        )
    activation = getattr(model.layers[-1], "activation", None) if model.layers else None
    if getattr(activation, "__name__", None) == "linear" and "crossentropy" in str(options.loss):
        found.append(
            f"the model's last layer ({model.layers[-1].name}) outputs logits (no activation), "
            f"but the loss {options.loss} expects probabilities: give it activation='softmax'"
        )
    return found
