"""Named Keras CNNs (and optimizers) for gpcnn's estimators, by function or by name.

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

__all__ = [
    "MODELS",
    "OPTIMIZERS",
    "bn_cnn",
    "build",
    "fedavg_cnn",
    "gn_cnn",
    "optimizer",
    "small_cnn",
]
