"""gpcnn: train one Keras CNN data-parallel across the segments of a Greenplum-family database."""

__version__ = "0.1.0"

from .engines import connect
from .environment import check_environment
from .estimator import GreenplumCNN, TrainingError
from .install import install
from .tables import ImageTable, TableError, load_images, read_images
from .tables import describe as describe_table

__all__ = [
    "GreenplumCNN",
    "ImageTable",
    "TableError",
    "TrainingError",
    "__version__",
    "check_environment",
    "connect",
    "describe_table",
    "install",
    "load_images",
    "read_images",
]
