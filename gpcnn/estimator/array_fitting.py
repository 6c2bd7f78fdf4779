"""Arrays given to ``GreenplumCNN.fit`` and ``partial_fit``: checked against the model before
anything reaches the database, their labels turned into the classes of the fit (``classes_``), and
staged as a table; whether a model takes feature rows. ``ArrayFitting`` is a mixin of the
estimator: it reads ``model``, ``seed`` and, when training goes on, ``model_`` and ``classes_``."""

from __future__ import annotations

import functools
import inspect
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np

from gpcnn.data import array_checks, pixels, staging
from gpcnn.engines import Database
from gpcnn.fit.validation import is_table

if TYPE_CHECKING:
    from keras import Model  # Keras and scikit-learn ship no types: both stand for Any here
    from sklearn.utils import Tags

    from gpcnn.data.tables import ImageTable


class ArrayFitting:
    """The arrays of a fit: checked, given classes, staged (their classes and rows' width then
    wait in ``_arrays_fitted`` until ``_adopt`` makes them ``classes_`` and ``n_features_in_``)."""

    if TYPE_CHECKING:  # what the estimator (``GreenplumCNN``) gives its mixin
        seed: int | None
        model_: Model  # once fitted
        classes_: np.ndarray

        def _model(self, info: ImageTable | None = None) -> Any: ...

        def __sklearn_tags__(self) -> Tags: ...

    def _checked_input(self, X, y, *, at_least_two: bool):
        """A table as it is (``_training_table`` checks its y), arrays through
        ``gpcnn.data.array_checks`` before anything reaches the database (negative rows for a model of
        rows only, as the tags say)."""
        if is_table(X):
            return X, y
        positive_only = self.__sklearn_tags__().input_tags.positive_only
        return array_checks.check_training(
            X, y, at_least_two=at_least_two, positive_only=positive_only
        )

    def _reference(self, warm: bool) -> tuple[np.ndarray | None, Any]:
        """The classes and the model that arrays must fit: the fitted ones when training goes
        on from ``model_``, else none (the labels') and ``model`` (None: a function's)."""
        return (self.classes_, self.model_) if warm else (None, self._model())

    def _training_table(self, db: Database, X, y, classes: np.ndarray | None, model: Any):
        """The table to train on: ``X`` itself, or arrays, checked against ``model`` (None: one
        built for them) and staged with their labels' class indices among ``classes`` (None:
        the labels' own, ``array_checks.fit_classes``); the classes and the rows' width wait in
        ``_arrays_fitted`` for ``_adopt``."""
        if is_table(X):
            if y is not None:
                raise ValueError("y goes with arrays: a table holds its labels")
            self._arrays_fitted = None
            return X
        if model is not None:  # before anything is staged
            pixels.fitted_shape(
                pixels.item_shape(X), model.input_shape[1:], where="X", caller=type(self).__name__
            )
        if classes is None:
            units = None if model is None else int(model.output_shape[-1])
            classes, codes = array_checks.fit_classes(y, units)
        else:
            codes = array_checks.known_classes(y, classes)
        indices = np.array_equal(classes, np.arange(len(classes)))
        name = staging.stage(
            db,
            X,
            codes,
            num_classes=len(classes),
            seed=self.seed,
            class_names=None if indices else [str(c) for c in classes],
        )
        staged = self.__dict__.setdefault("_staged", [])
        staged.append(name)
        if "_staged_finalizer" not in self.__dict__:
            self._staged_finalizer = weakref.finalize(self, staging.drop_staged, db, staged)
        self._arrays_fitted = (classes, X.shape[1] if X.ndim == 2 else None)
        return name

    def _indexed(self, validation):
        """Validation arrays ``(x, y)`` with ``y`` as class indices of the fit's classes."""
        fitted = getattr(self, "_arrays_fitted", None)
        if fitted is None or is_table(validation) or not isinstance(validation, tuple):
            return validation
        x, y = validation
        return x, array_checks.known_classes(np.asarray(y), fitted[0])


def is_builder(model: Any) -> bool:
    """Whether ``model`` is a function that builds the model for the data (not a model)."""
    return inspect.isfunction(model) or isinstance(model, functools.partial)


def takes_rows(model: Any) -> bool:
    """Whether ``model`` takes feature rows: a function (built for any data) or a Keras model
    whose input is (F,)."""
    return is_builder(model) or len(getattr(model, "input_shape", ())) == 2
