"""What a fitted ``GreenplumCNN`` does with data: ``predict``, ``predict_proba``, ``evaluate`` and
``score``, in the database for a table (on the segments, the weights sent through ``transfers``)
and locally for arrays. ``Predicting`` is a mixin of the estimator: it reads ``model_``,
``segments_`` and the fit's options, and holds the segment sessions of one call."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np
from sklearn.exceptions import NotFittedError

from gpcnn.data import array_checks, pixels
from gpcnn.data.tables import ImageTable, describe
from gpcnn.engines import Database
from gpcnn.fit import loop
from gpcnn.fit.validation import (
    check_model_fits,
    evaluate_arrays,
    evaluate_table,
    is_table,
    model_input,
)
from gpcnn.kernel import wire
from gpcnn.kernel.protocol import SegmentOptions
from gpcnn.serving.predictions import probabilities, write_predictions

if TYPE_CHECKING:  # neither ships types: both stand for Any here
    from keras import Model
    from sklearn.utils import Tags


class Predicting:
    """``predict``, ``predict_proba``, ``evaluate`` and ``score`` of a fitted estimator."""

    if TYPE_CHECKING:  # what the estimator (``GreenplumCNN``) gives its mixin; set by the fit
        model_: Model
        classes_: np.ndarray
        segments_: int
        _model_json: str
        _options: SegmentOptions

        def _db(self) -> Database: ...

        def __sklearn_tags__(self) -> Tags: ...

    def _require_fitted(self) -> None:
        if not hasattr(self, "model_"):
            raise NotFittedError("this GreenplumCNN is not fitted yet: call fit(table) first")

    def _held(self) -> loop.HeldSessions:
        return self.__dict__.setdefault("_sessions", loop.HeldSessions())

    def _holding_sessions(self):
        """The segment sessions of one call; a call inside one (a callback's) uses its caller's."""
        return self._held()(self._db(), self.segments_, self._options.threads)

    def _evaluate_table(self, info: ImageTable, options: SegmentOptions) -> dict:
        with self._holding_sessions() as sessions:
            return evaluate_table(
                self._db(),
                sessions,
                info,
                self._model_json,
                options,
                wire.model_to_bytes(self.model_),
            )

    def _weights(self) -> np.ndarray:
        """``model_``'s weights as the one vector that predictions send."""
        return wire.vector_of(list(self.model_.weights))

    def _described(self, table) -> ImageTable:
        """``table``'s description, refused before any work unless ``model_`` takes its items
        and classes (``check_model_fits``)."""
        info = describe(self._db(), table)
        check_model_fits(self.model_, info)
        return info

    def _arrays_input(self, x) -> np.ndarray:
        """Arrays checked and shaped as ``model_`` takes them (``gpcnn.data.pixels``' rules)."""
        x = array_checks.check_images(
            x, positive_only=self.__sklearn_tags__().input_tags.positive_only
        )
        shape = pixels.fitted_shape(
            pixels.item_shape(x), self.model_.input_shape[1:], where="X", caller=type(self).__name__
        )
        return model_input(x, shape)

    def predict_proba(self, x) -> np.ndarray:
        """Class probabilities of arrays (computed locally) or of a table (on the segments).

        Parameters
        ----------
        x : str, (schema, table), ndarray or array-like
            An image table whose items and classes the model takes, or arrays as ``fit`` takes
            them.

        Returns
        -------
        ndarray of shape (n_images, n_classes)
            One row per image, its columns in the order of ``classes_``; a table's rows in
            ``buffer_id`` order, as ``read_images`` returns the images.

        Raises
        ------
        sklearn.exceptions.NotFittedError
            The estimator is not fitted.
        ValueError
            Arrays or a table the model does not take.
        TrainingError
            Prediction failed in the database.
        """
        self._require_fitted()
        if not is_table(x):
            inputs = self._arrays_input(x)
            return np.asarray(self.model_.predict(inputs, batch_size=1000, verbose=0))
        info = self._described(x)
        with self._holding_sessions() as sessions:
            return probabilities(
                self._db(), sessions, info, self._model_json, self._options, self._weights()
            )

    def predict(
        self,
        x,
        *,
        output_table=None,
        pred_type: str = "response",
        top_k: int | None = None,
        replace: bool = False,
    ):
        """Predicted labels of arrays or of a table, or predictions written into a table.

        Without ``output_table``, the most probable class of each image (``predict_proba``'s
        order) comes back; ``pred_type``, ``top_k`` and ``replace`` apply only with it. With
        ``output_table`` (a table ``x`` only), the predictions are computed on the segments and
        written into that table, keyed by image id, with MADlib's columns.

        Parameters
        ----------
        x : str, (schema, table), ndarray or array-like
            An image table whose items and classes the model takes, or arrays as ``fit`` takes
            them.
        output_table : str or (schema, table), optional
            The table to write the predictions into (the image table ``x`` needs image ids).
        pred_type : {"response", "prob", "topk"}, default "response"
            What ``output_table`` holds: ``"response"``, the predicted class per image (id,
            class_value, class_name, prob); ``"prob"``, one row per image and class (same
            columns); ``"topk"``, the ``top_k`` most probable classes per image (id, rank,
            class_value, class_name, prob; rank 1 is the prediction).
        top_k : int, optional
            The classes per image for ``pred_type="topk"``, 1 to the number of classes; only
            with ``"topk"``.
        replace : bool, default False
            Overwrite an existing ``output_table`` (never an image table) instead of refusing.

        Returns
        -------
        ndarray or str
            The labels, one per image, of ``classes_`` (the fitted labels' type), a table's in
            ``buffer_id`` order; with ``output_table``, the name of the table written.

        Raises
        ------
        sklearn.exceptions.NotFittedError
            The estimator is not fitted.
        ValueError
            ``output_table`` with arrays, a bad ``pred_type`` or ``top_k``, or data the model
            does not take.
        TableError
            ``output_table`` exists without ``replace``, or is an image table, or ``x`` has no
            image ids (a ``ValueError``).
        TrainingError
            Prediction failed in the database.

        Examples
        --------
        >>> est.predict(x_test)[:3]  # doctest: +SKIP
        array([9, 2, 1])
        >>> est.predict("fm.test", output_table="fm.test_top3", pred_type="topk",
        ...             top_k=3)  # doctest: +SKIP
        'fm.test_top3'
        """
        if output_table is None:
            probabilities = self.predict_proba(x)
            return self.classes_[np.argmax(probabilities, axis=1)]
        self._require_fitted()
        if not is_table(x):
            raise ValueError(
                "output_table needs a table to predict: predict(table, output_table=…)"
            )
        info = self._described(x)
        with self._holding_sessions() as sessions:
            model = (self._model_json, self._options, self._weights())
            written = write_predictions(
                self._db(), sessions, info, output_table, pred_type, top_k, model, replace
            )
        return str(written)

    def evaluate(self, x, y=None) -> dict:
        """Loss and metrics of a table (computed on the segments) or of arrays (locally).

        Parameters
        ----------
        x : str, (schema, table), ndarray or array-like
            An image table, or arrays as ``fit`` takes them.
        y : array-like, optional
            The labels of arrays ``x``, among ``classes_``; None for a table.

        Returns
        -------
        dict
            ``loss`` and each of the estimator's ``metrics``, as floats, over every image.

        Raises
        ------
        sklearn.exceptions.NotFittedError
            The estimator is not fitted.
        ValueError
            Arrays without ``y``, labels outside ``classes_``, or data the model does not take.
        TrainingError
            Evaluation failed in the database.
        """
        self._require_fitted()
        if is_table(x):
            values = self._evaluate_table(self._described(x), self._options)
            values.pop("images", None)
            return values
        if y is None:
            raise ValueError("evaluate(x, y) needs labels for arrays")
        codes = array_checks.known_classes(np.asarray(y), self.classes_)
        return evaluate_arrays(self.model_, self._arrays_input(x), codes)

    def score(self, X, y=None, sample_weight=None) -> float:
        """Accuracy, the scikit-learn classifier convention.

        A table's is computed on the segments (only the count of correct images comes back);
        arrays' locally, from ``predict``.

        Parameters
        ----------
        X : str, (schema, table), ndarray or array-like
            An image table, or arrays as ``fit`` takes them.
        y : array-like, optional
            The true labels of arrays ``X``; None for a table.
        sample_weight : array-like, optional
            Weights of the images of arrays ``X`` (not for a table).

        Returns
        -------
        float
            The fraction of images predicted right (weighted by ``sample_weight``).

        Raises
        ------
        sklearn.exceptions.NotFittedError
            The estimator is not fitted.
        ValueError
            Arrays without ``y``, or a table with ``y`` or ``sample_weight``.
        TrainingError
            Evaluation failed in the database.
        """
        self._require_fitted()
        if is_table(X):
            if y is not None or sample_weight is not None:
                raise ValueError("score(table) takes no y or sample_weight: the table has labels")
            info = self._described(X)
            accuracy = dataclasses.replace(self._options.compile, metrics=("accuracy",))
            values = self._evaluate_table(info, self._options.replace(compile=accuracy))
            return float(values["accuracy"])
        if y is None:
            raise ValueError("score(x, y) needs labels for arrays")
        correct = self.predict(X) == np.asarray(y)
        return float(np.average(correct, weights=sample_weight))
