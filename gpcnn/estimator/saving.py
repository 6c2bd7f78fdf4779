"""A fitted estimator in files and back: ``model_`` as a Keras ``.keras`` file (or
``.weights.h5``) with the estimator's parameters and fitted state beside it in
``<path>.gpcnn.json``."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from gpcnn.estimator import parameters
from gpcnn.kernel.config_check import check_model
from gpcnn.kernel.keras_setup import compiled_model, keras_module, rebuilt


def save(est, path: str | Path) -> None:
    """Write the fitted ``est`` to ``path`` and its sidecar."""
    est._require_fitted()
    path = Path(path)
    if path.name.endswith(".weights.h5"):
        est.model_.save_weights(path)
    elif path.suffix == ".keras":
        est.model_.save(path)
    else:
        raise ValueError(f"{path}: use a .keras or .weights.h5 file name")
    sidecar = {"params": est.stored_params(), **parameters.fitted_state(est)}
    Path(f"{path}.gpcnn.json").write_text(json.dumps(sidecar, indent=1))


def load(cls, path: str | Path):
    """The fitted estimator of class ``cls`` that ``save`` wrote to ``path``."""
    path = Path(path)
    sidecar = json.loads(Path(f"{path}.gpcnn.json").read_text())
    if path.name.endswith(".weights.h5"):
        model = rebuilt(sidecar["model_json"])
        model.load_weights(path)
    else:
        keras = keras_module()
        check_model(_keras_config(path))
        model = keras.saving.load_model(path, safe_mode=True, compile=False)
    est = cls(model, **parameters.loaded(sidecar["params"]))
    parameters.set_fitted_state(est, sidecar)
    est.model_ = compiled_model(sidecar["model_json"], est._compile_options())
    est.model_.set_weights(model.get_weights())
    return est


def _keras_config(path: Path) -> dict:
    """The model config of a ``.keras`` file (the zip's ``config.json``), to check before Keras
    loads the file. Only a ``.keras`` file: Keras would load another in a legacy format, which
    this reading does not see."""
    if path.suffix != ".keras":
        raise ValueError(f"{path}: a fitted estimator loads from a .keras or .weights.h5 file")
    with zipfile.ZipFile(path) as archive:
        return json.loads(archive.read("config.json"))
