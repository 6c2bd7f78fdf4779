"""gpcnn: train one Keras CNN data-parallel across the segments of a Greenplum-family database."""

from gpcnn.data.label_skew import measure_skew
from gpcnn.data.packing import pack_table
from gpcnn.data.redealing import add_shared_sample, redeal
from gpcnn.data.tables import (
    ImageTable,
    TableError,
    drop_table,
    list_tables,
    load_images,
    read_images,
)
from gpcnn.data.tables import describe as describe_table
from gpcnn.engines import Database, connect, release_sessions
from gpcnn.engines.install import install, uninstall
from gpcnn.estimator import GreenplumCNN, GreenplumModelSearch, TrainingError, fit_multiple
from gpcnn.estimator.forecasting import forecast
from gpcnn.estimator.history_plot import live_plot, plot_history
from gpcnn.estimator.planning import plan
from gpcnn.fit.forecast.early_warning import forecast_gap
from gpcnn.fit.runs import delete_runs, list_runs, show_run
from gpcnn.serving.direct_prediction import predict
from gpcnn.serving.model_library import delete_model, list_models, load_model, store_model
from gpcnn.tools import embedded as _embedded  # noqa: F401  (connect()'s default server)
from gpcnn.tools.environment import check_environment
from gpcnn.version import __version__

__all__ = [
    "Database",
    "GreenplumCNN",
    "GreenplumModelSearch",
    "ImageTable",
    "TableError",
    "TrainingError",
    "__version__",
    "add_shared_sample",
    "check_environment",
    "connect",
    "delete_model",
    "delete_runs",
    "describe_table",
    "drop_table",
    "fit_multiple",
    "forecast",
    "forecast_gap",
    "install",
    "list_models",
    "list_runs",
    "list_tables",
    "live_plot",
    "load_images",
    "load_model",
    "measure_skew",
    "pack_table",
    "plan",
    "plot_history",
    "predict",
    "read_images",
    "redeal",
    "release_sessions",
    "show_run",
    "store_model",
    "uninstall",
]
