"""Named Keras CNNs (and optimizers) for gpcnn's estimators, by function or by name; Keras as gpcnn
sets it up (``keras_module``) and the one conversion of stored images to model input.

>>> from gpcnn import models
>>> cnn = models.small_cnn((28, 28, 1), classes=10)   # or models.build("small-cnn")
"""

from gpcnn.estimator.named_models import (
    MODELS,
    OPTIMIZERS,
    bn_cnn,
    build,
    fedavg_cnn,
    gn_cnn,
    optimizer,
    small_cnn,
)
from gpcnn.kernel.keras_setup import keras_module
from gpcnn.kernel.segment import to_model_input

__all__ = [
    "MODELS",
    "OPTIMIZERS",
    "bn_cnn",
    "build",
    "fedavg_cnn",
    "gn_cnn",
    "keras_module",
    "optimizer",
    "small_cnn",
    "to_model_input",
]
