"""gpcnn: train one Keras CNN data-parallel across the segments of a Greenplum-family database."""

__version__ = "0.2.0"

from .engines import Database, connect, release_sessions
from .environment import check_environment
from .estimator import GreenplumCNN, TrainingError
from .install import install, uninstall
from .packing import pack_table
from .runs import delete_runs, list_runs, show_run
from .tables import ImageTable, TableError, drop_table, list_tables, load_images, read_images
from .tables import describe as describe_table

__all__ = [
    "Database",
    "GreenplumCNN",
    "ImageTable",
    "TableError",
    "TrainingError",
    "__version__",
    "check_environment",
    "connect",
    "delete_runs",
    "describe_table",
    "drop_table",
    "install",
    "list_runs",
    "list_tables",
    "load_images",
    "pack_table",
    "read_images",
    "release_sessions",
    "show_run",
    "uninstall",
]
