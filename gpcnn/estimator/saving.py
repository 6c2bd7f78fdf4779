"""A fitted estimator in files and back: ``model_`` as a Keras ``.keras`` file (or
``.weights.h5``) with the estimator's parameters and fitted state beside it in
``<path>.gpcnn.json``; ``Saving``, the estimator's mixin that offers it (``save``, ``load``,
``stored_params``, and what a copy or a pickle keeps)."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Self

from gpcnn.estimator import parameters
from gpcnn.kernel.config_check import check_model
from gpcnn.kernel.keras_setup import compiled_model, keras_module, rebuilt


def save_files(est, path: str | Path) -> None:
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


def load_files(cls, path: str | Path):
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


class Saving:
    """The estimator's parameters in their stored form, and the fitted estimator in files: a mixin
    of ``GreenplumCNN`` over the functions above."""

    if TYPE_CHECKING:  # what the estimator gives its mixin (scikit-learn's BaseEstimator)

        def get_params(self, deep: bool = True) -> dict: ...

    def stored_params(self) -> dict:
        """The parameters as JSON-able values, as stored with each run.

        Returns
        -------
        dict
            ``get_params(deep=False)`` without ``model``: an optimizer object becomes its
            configuration, a ``Database`` its URL without the password, sequences lists.
        """
        return parameters.stored(self.get_params(deep=False))

    def save(self, path: str | Path) -> None:
        """Write the fitted estimator to files; ``load`` reads it back.

        Parameters
        ----------
        path : str or pathlib.Path
            A ``.keras`` file name (``model_`` saved whole by Keras) or a ``.weights.h5`` one
            (the weights only; the architecture goes in the sidecar). The estimator's parameters
            and fitted state (history, run id, classes, ...) go beside it in
            ``<path>.gpcnn.json``.

        Raises
        ------
        sklearn.exceptions.NotFittedError
            The estimator is not fitted.
        ValueError
            ``path`` ends neither in ``.keras`` nor in ``.weights.h5``.

        Examples
        --------
        >>> est.save("fm.keras")  # doctest: +SKIP
        >>> GreenplumCNN.load("fm.keras").predict(x_test)  # doctest: +SKIP
        """
        save_files(self, path)

    @classmethod
    def load(cls, path: str | Path) -> Self:
        """The fitted estimator that ``save`` wrote.

        Parameters
        ----------
        path : str or pathlib.Path
            The ``.keras`` or ``.weights.h5`` file given to ``save``; its sidecar
            ``<path>.gpcnn.json`` must be beside it.

        Returns
        -------
        GreenplumCNN
            A fitted estimator with the saved parameters, weights and fitted state.
        """
        return load_files(cls, path)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        for private in ("_sessions", "_staged", "_staged_finalizer"):
            state.pop(private, None)  # a copy does not own the tables its original staged
        return state
