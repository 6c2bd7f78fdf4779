"""The estimator's parameters, checked before any work, and the stored form (JSON-able values) of
its parameters, as stored with each run, and of its fitted state, in a saved estimator's sidecar."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpcnn.engines import Database
from gpcnn.fit import compiling, rules
from gpcnn.kernel.protocol import OPTIMIZER_STATES, SegmentOptions

POSITIVE = ("batch_size", "iterations", "local_epochs")
REMOVED = ("schema", "validation_data", "progress")  # parameters of gpcnn 0.1


def check(params: dict) -> None:
    """Refuse parameters that no fit can use, saying which and what to choose."""
    merge, policy = params["merge"], params["optimizer_state"]
    if merge not in rules.RULES:
        raise ValueError(f"merge={merge!r}: choose one of {', '.join(rules.RULES)}")
    if policy not in OPTIMIZER_STATES:
        raise ValueError(f"optimizer_state={policy!r}: choose one of {OPTIMIZER_STATES}")
    for name in POSITIVE:
        value = params[name]
        if not isinstance(value, int | np.integer) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if not isinstance(params["shuffle"], bool | np.bool_):
        raise ValueError(f"shuffle must be True or False, got {params['shuffle']!r}")
    verbose = params["verbose"]
    if verbose not in (0, 1, 2) or isinstance(verbose, bool):
        raise ValueError(f"verbose must be 0, 1 or 2 (as in Keras), got {verbose!r}")
    freq = params["validation_freq"]
    if isinstance(freq, int | np.integer) and not isinstance(freq, bool):
        if freq < 1:
            raise ValueError(f"validation_freq must be >= 1, got {freq}")
    elif not (isinstance(freq, Sequence) and all(isinstance(i, int) and i >= 1 for i in freq)):
        raise ValueError(
            f"validation_freq must be a positive integer or a list of iterations, got {freq!r}"
        )
    merges = _merges_per_epoch(params["merges_per_epoch"])
    if params["local_epochs"] > 1 and max(merges) > 1:
        raise ValueError("local_epochs > 1 needs merges_per_epoch=1 (one merge per pass)")
    compiling.check_metrics(params["metrics"])


def _positive(value: object) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool) and value >= 1


def _merges_per_epoch(value: object) -> list[int]:
    """A count, or a per-epoch schedule of counts (the last repeating), as a list."""
    if _positive(value):
        return [int(value)]
    listed = isinstance(value, Sequence) and not isinstance(value, str) and len(value) > 0
    if listed and all(_positive(m) for m in value):
        return [int(m) for m in value]
    raise ValueError(
        f"merges_per_epoch must be a positive integer or a non-empty list of them (merges in "
        f"each epoch, the last repeating, e.g. [8, 8, 1]), got {value!r}"
    )


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
    est.history_ = sidecar["history"]
    est.run_id_ = sidecar["run_id"]
    est.segments_ = sidecar["segments"]
    est.classes_ = np.asarray(sidecar["classes"])
    est.class_names_ = tuple(sidecar["class_names"])
    if sidecar.get("n_features_in") is not None:
        est.n_features_in_ = int(sidecar["n_features_in"])
