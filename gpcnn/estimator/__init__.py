"""The estimator layer: ``GreenplumCNN``, the scikit-learn and Keras style facade over the fit."""

from gpcnn.estimator.greenplum_cnn import OPTIMIZER_STATES, GreenplumCNN
from gpcnn.estimator.hopper.search import GreenplumModelSearch, fit_multiple
from gpcnn.fit.database_errors import TrainingError

__all__ = [
    "OPTIMIZER_STATES",
    "GreenplumCNN",
    "GreenplumModelSearch",
    "TrainingError",
    "fit_multiple",
]
