"""Named CNNs and optimizers (``gpcnn.models``), for 28×28×1 and 32×32×3 images (any H×W×C works).

- ``small-cnn``: 8 and 16 3×3 filters, ~5k weights on 28×28 — an epoch of 60,000 images in seconds.
- ``bn-cnn``: conv32-BN-conv64-BN-dense128 with Dropout, ~226k weights on 28×28 — an ordinary
  two-conv CNN of the kind that reaches 91–93 % on Fashion-MNIST.
- ``gn-cnn``: ``bn-cnn`` with GroupNormalization (8 groups) in place of BatchNormalization
  (Hsieh et al. 2020): it normalises each image on its own, so it has no moving statistics and no
  batch's shard to lean on under label skew.
- ``fedavg-cnn``: the MNIST CNN of McMahan et al. 2017 (FedAvg): 5×5 conv 32 (same) → 2×2 max-pool →
  5×5 conv 64 (same) → 2×2 max-pool → dense 512 → softmax; 1,663,370 weights on 28×28.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gpcnn.kernel.keras_setup import keras_module

# The arguments and result every named CNN shares, appended to each one's docstring.
_BUILDER_SECTIONS = """
    Parameters
    ----------
    input_shape : sequence of int, default (28, 28, 1)
        The images' (H, W, C), as the table holds them.
    classes : int, default 10
        Units of the softmax layer: the table's number of classes.

    Returns
    -------
    keras.Sequential
        A new model, not compiled (the estimator compiles it).
    """


def _with_builder_sections(builder: Callable[..., Any]) -> Callable[..., Any]:
    builder.__doc__ = (builder.__doc__ or "").rstrip() + "\n" + _BUILDER_SECTIONS
    return builder


@_with_builder_sections
def small_cnn(input_shape: Sequence[int] = (28, 28, 1), classes: int = 10) -> Any:
    """Two small convolutions (8 and 16 3×3 filters) and a softmax: seconds per epoch.

    About 5,000 weights on 28×28×1 images.

    Examples
    --------
    >>> from gpcnn import models
    >>> cnn = models.small_cnn((28, 28, 1), classes=10)
    """
    layers = keras_module().layers
    return keras_module().Sequential(
        [
            keras_module().Input(tuple(input_shape)),
            layers.Conv2D(8, 3, activation="relu"),
            layers.MaxPooling2D(),
            layers.Conv2D(16, 3, activation="relu"),
            layers.MaxPooling2D(),
            layers.Flatten(),
            layers.Dense(classes, activation="softmax"),
        ]
    )


@_with_builder_sections
def bn_cnn(input_shape: Sequence[int] = (28, 28, 1), classes: int = 10) -> Any:
    """Two convolutions with BatchNorm, Dropout around the dense layer.

    BatchNorm's moving statistics are weights the merge averages too; about 226,000 weights on
    28×28×1 images.
    """
    return _two_conv(input_shape, classes, keras_module().layers.BatchNormalization)


@_with_builder_sections
def gn_cnn(input_shape: Sequence[int] = (28, 28, 1), classes: int = 10) -> Any:
    """``bn_cnn`` with GroupNorm (8 groups of channels) in place of BatchNorm.

    Every weight is trainable and nothing depends on a segment's batches, which helps under label
    skew (Hsieh et al. 2020).
    """
    layers = keras_module().layers
    return _two_conv(input_shape, classes, lambda: layers.GroupNormalization(groups=8))


def _two_conv(input_shape: Sequence[int], classes: int, norm: Callable[[], Any]) -> Any:
    keras = keras_module()
    layers = keras.layers
    return keras.Sequential(
        [
            keras.Input(tuple(input_shape)),
            layers.Conv2D(32, 3, use_bias=False),
            norm(),
            layers.Activation("relu"),
            layers.MaxPooling2D(),
            layers.Conv2D(64, 3, use_bias=False),
            norm(),
            layers.Activation("relu"),
            layers.MaxPooling2D(),
            layers.Flatten(),
            layers.Dropout(0.25),
            layers.Dense(128, activation="relu"),
            layers.Dropout(0.25),
            layers.Dense(classes, activation="softmax"),
        ]
    )


@_with_builder_sections
def fedavg_cnn(input_shape: Sequence[int] = (28, 28, 1), classes: int = 10) -> Any:
    """The MNIST CNN of McMahan et al. 2017 (FedAvg): 1,663,370 weights on 28×28×1 images."""
    keras = keras_module()
    layers = keras.layers
    return keras.Sequential(
        [
            keras.Input(tuple(input_shape)),
            layers.Conv2D(32, 5, padding="same", activation="relu"),
            layers.MaxPooling2D(2),
            layers.Conv2D(64, 5, padding="same", activation="relu"),
            layers.MaxPooling2D(2),
            layers.Flatten(),
            layers.Dense(512, activation="relu"),
            layers.Dense(classes, activation="softmax"),
        ]
    )


MODELS: dict[str, Callable[..., Any]] = {
    "small-cnn": small_cnn,
    "bn-cnn": bn_cnn,
    "gn-cnn": gn_cnn,
    "fedavg-cnn": fedavg_cnn,
}


def build(name: str, input_shape: Sequence[int] = (28, 28, 1), classes: int = 10) -> Any:
    """A new, uncompiled model by name.

    Parameters
    ----------
    name : {"small-cnn", "bn-cnn", "gn-cnn", "fedavg-cnn"}
        The model (the keys of ``MODELS``).
    input_shape : sequence of int, default (28, 28, 1)
        The images' (H, W, C).
    classes : int, default 10
        Units of the softmax layer.

    Returns
    -------
    keras.Sequential
        A new model, not compiled.

    Raises
    ------
    ValueError
        For a name not in ``MODELS``.

    Examples
    --------
    >>> from gpcnn import models
    >>> cnn = models.build("bn-cnn", (32, 32, 3), classes=10)
    """
    if name not in MODELS:
        raise ValueError(f"model {name!r}: choose one of {', '.join(MODELS)}")
    return MODELS[name](input_shape, classes)


OPTIMIZERS = ("sgd", "momentum", "adam")


def optimizer(name: str, learning_rate: float) -> Any:
    """A study optimizer by name: plain SGD, SGD with momentum 0.9, or Adam.

    Parameters
    ----------
    name : {"sgd", "momentum", "adam"}
        The optimizer (``OPTIMIZERS``).
    learning_rate : float
        Its learning rate.

    Returns
    -------
    keras.optimizers.Optimizer
        A new optimizer.

    Raises
    ------
    ValueError
        For a name not in ``OPTIMIZERS``.
    """
    if name not in OPTIMIZERS:
        raise ValueError(f"optimizer {name!r}: choose one of {', '.join(OPTIMIZERS)}")
    optimizers = keras_module().optimizers
    if name == "adam":
        return optimizers.Adam(learning_rate)
    return optimizers.SGD(learning_rate, momentum=0.9 if name == "momentum" else 0.0)
