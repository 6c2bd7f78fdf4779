"""The estimator's parameters, checked before any work against their declared constraints
(``PARAMETER_CONSTRAINTS``, the estimator's ``_parameter_constraints``), and the stored form
(JSON-able values) of its parameters, as stored with each run, and of its fitted state, in a saved
estimator's sidecar."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpcnn.engines import Database
from gpcnn.estimator.constraints import (
    NO_VALIDATION,
    Booleans,
    Constraint,
    Integers,
    Lists,
    NoValidation,
    Options,
    validate,
)
from gpcnn.fit import compiling, rules
from gpcnn.fit.history import History
from gpcnn.kernel.protocol import OPTIMIZER_STATES, SegmentOptions

REMOVED = ("schema", "validation_data", "progress")  # parameters of gpcnn 0.1

POSITIVE = Integers(low=1)
# Every parameter of GreenplumCNN and what its value may be (one of the constraints); the
# parameters marked NO_VALIDATION are checked where they are used (the model, the optimizer and
# loss by Keras and the config check, the table names by the table layer, the rule's options by
# the rule).
PARAMETER_CONSTRAINTS: dict[str, list[Constraint] | NoValidation] = {
    "model": NO_VALIDATION,
    "merge": [Options(lambda: rules.RULES)],
    "merge_options": NO_VALIDATION,
    "iterations": [POSITIVE],
    "merges_per_epoch": [
        POSITIVE,
        Lists(
            POSITIVE,
            "a non-empty list of them (merges in each epoch, the last repeating, e.g. [8, 8, 1])",
        ),
    ],
    "local_epochs": [POSITIVE],
    "batch_size": [POSITIVE],
    "optimizer": NO_VALIDATION,
    "learning_rate": NO_VALIDATION,
    "loss": NO_VALIDATION,
    "metrics": NO_VALIDATION,
    "optimizer_state": [Options(OPTIMIZER_STATES)],
    "shuffle": [Booleans()],
    "seed": NO_VALIDATION,
    "threads_per_segment": NO_VALIDATION,
    "validation_table": NO_VALIDATION,
    "validation_freq": [POSITIVE, Lists(POSITIVE, "a list of iterations")],
    "verbose": [Options((0, 1, 2), "0, 1 or 2 (as in Keras)")],
    "warm_start": NO_VALIDATION,
    "database": NO_VALIDATION,
}


def check(params: dict) -> None:
    """Refuse parameters that no fit can use, saying which and what to choose: each against its
    constraints (``PARAMETER_CONSTRAINTS``), then what holds between parameters."""
    validate(PARAMETER_CONSTRAINTS, params)
    if params["local_epochs"] > 1 and max(merges_per_epoch(params["merges_per_epoch"])) > 1:
        raise ValueError("local_epochs > 1 needs merges_per_epoch=1 (one merge per pass)")
    compiling.check_metrics(params["metrics"])
    compiling.check_optimizer(params["optimizer"])


def merges_per_epoch(value: int | Sequence[int]) -> list[int]:
    """A checked count, or per-epoch schedule of counts (the last repeating), as a list."""
    return [int(m) for m in value] if isinstance(value, Sequence) else [int(value)]


def stored(params: dict) -> dict:
    """The parameters (the model apart) as JSON-able values."""
    params = {k: v for k, v in params.items() if k != "model"}
    if not isinstance(params["optimizer"], str):
        params["optimizer"] = compiling.stored_optimizer(params["optimizer"])
    if isinstance(params["database"], Database):
        params["database"] = params["database"].url.render_as_string(hide_password=True)
    params["metrics"] = list(params["metrics"])
    if not isinstance(params["merges_per_epoch"], int):
        params["merges_per_epoch"] = list(params["merges_per_epoch"])
    if not isinstance(params["validation_freq"], int):
        params["validation_freq"] = list(params["validation_freq"])
    if isinstance(params["validation_table"], tuple):
        params["validation_table"] = list(params["validation_table"])
    return params


def loaded(params: dict) -> dict:
    """The parameters of ``stored``'s values (of this version or an older one)."""
    params = {k: v for k, v in params.items() if k not in REMOVED}
    if isinstance(params["optimizer"], dict):
        params["optimizer"] = compiling.loaded_optimizer(params["optimizer"])
    params["metrics"] = tuple(params["metrics"])
    if isinstance(params["validation_table"], list):
        params["validation_table"] = tuple(params["validation_table"])
    return params


def fitted_state(est) -> dict:
    """A fitted estimator's state beside its model, as the sidecar stores it."""
    return {
        "model_json": est._model_json,
        "options": est._options.to_dict(),
        "history": est.history_,
        "run_id": est.run_id_,
        "segments": est.segments_,
        "classes": est.classes_.tolist(),
        "class_names": list(est.class_names_),
        "n_features_in": getattr(est, "n_features_in_", None),  # fitted on feature rows
    }


def set_fitted_state(est, sidecar: dict) -> None:
    """``fitted_state``'s values back on ``est`` (a sidecar of this version or an older one)."""
    est._model_json = sidecar["model_json"]
    est._options = SegmentOptions.from_dict(sidecar["options"])
    est.history_ = History(sidecar["history"])
    est.run_id_ = sidecar["run_id"]
    est.segments_ = sidecar["segments"]
    est.classes_ = np.asarray(sidecar["classes"])
    est.class_names_ = tuple(sidecar["class_names"])
    if sidecar.get("n_features_in") is not None:
        est.n_features_in_ = int(sidecar["n_features_in"])
