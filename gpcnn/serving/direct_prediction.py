"""Prediction without fit (MADlib's ``madlib_keras_predict`` on any model): a Keras model, or one
stored in the model library, predicts a table on the segments, into the same output tables as
``GreenplumCNN.predict`` (``gpcnn.serving.predictions``), or back to the client."""

from __future__ import annotations

from typing import Any

import numpy as np

from gpcnn.deprecation import database_argument
from gpcnn.engines import Database, connect
from gpcnn.fit import compiling, loop
from gpcnn.fit.validation import check_model_fits
from gpcnn.kernel import wire
from gpcnn.kernel.protocol import SegmentOptions
from gpcnn.serving.model_library import keras_model
from gpcnn.serving.predictions import probabilities, write_predictions


@database_argument
def predict(
    database: Database | str | None,
    model: Any,
    table,
    *,
    output_table=None,
    pred_type: str = "response",
    top_k: int | None = None,
    replace: bool = False,
    batch_size: int = 256,
    threads_per_segment: int | None = None,
):
    """Predict every image of ``table`` with ``model`` on the segments, without a fit.

    MADlib's ``madlib_keras_predict`` on any model. With ``output_table``, the predictions are
    written there as ``GreenplumCNN.predict`` writes them, and its name returned; without, the
    class indices or probabilities come back, in ``buffer_id`` order as ``read_images`` returns
    the images.

    Parameters
    ----------
    database : Database, str or None
        A handle from ``gpcnn.connect``, a URL, or None for the default database.
    model : keras.Model or str
        A Keras model whose input takes the table's items and whose last layer has one unit per
        class, or the name of a model in the model library (``gpcnn.store_model``).
    table : str or (schema, table)
        The image table to predict.
    output_table : str or (schema, table), optional
        The table to write the predictions into (``table`` needs image ids).
    pred_type : {"response", "prob", "topk"}, default "response"
        ``"response"``, the predicted class per image; ``"prob"``, every class's probability;
        ``"topk"`` (with ``output_table`` only), the ``top_k`` most probable classes. The
        columns of ``output_table`` are those of ``GreenplumCNN.predict``.
        Without ``output_table``: ``"response"`` or ``"prob"`` only.
    top_k : int, optional
        The classes per image for ``pred_type="topk"``, 1 to the number of classes.
    replace : bool, default False
        Overwrite an existing ``output_table`` (never an image table) instead of refusing.
    batch_size : int, default 256
        Sent to the segments with the model's options; prediction runs each stored buffer as
        one batch, so it changes neither the result nor the batching.
    threads_per_segment : int, optional
        TensorFlow threads in each segment (default: the cores shared among the segments).

    Returns
    -------
    ndarray or str
        Without ``output_table``: the class index (0..classes-1) of every image
        (``"response"``), or an array (n_images, n_classes) of probabilities (``"prob"``);
        with it, the name of the table written.

    Raises
    ------
    ValueError
        ``pred_type`` ``"topk"`` without ``output_table``, a bad ``pred_type`` or ``top_k``, or
        a model that does not take the table's items or classes.
    TableError
        ``table`` is not an image table or has no image ids, or ``output_table`` exists
        without ``replace`` or is an image table (a ``ValueError``).
    TrainingError
        Prediction failed in the database.

    Examples
    --------
    >>> gpcnn.predict(db, "fm-cnn", "fm.test", output_table="fm.test_predicted")  # doctest: +SKIP
    'fm.test_predicted'
    >>> gpcnn.predict(db, keras_model, "fm.test", pred_type="prob").shape  # doctest: +SKIP
    (10000, 10)
    """
    if output_table is None and pred_type not in ("response", "prob"):
        raise ValueError(
            f"pred_type={pred_type!r} writes a table: pass output_table=…, or use 'response' "
            "or 'prob' to get arrays back"
        )
    db = connect(database)
    model = keras_model(db, model)
    info = loop.described(db, table)
    input_shape = check_model_fits(model, info)
    threads = threads_per_segment or db.backend.default_threads(info.segments)
    options = SegmentOptions(
        compile=compiling.compile_options("sgd", None, "sparse_categorical_crossentropy", ()),
        image_shape=input_shape,
        batch_size=int(batch_size),
        threads=int(threads),
    )
    weights = wire.vector_of(list(model.weights))
    with loop.HeldSessions()(db, info.segments, options.threads) as sessions:
        if output_table is not None:
            model_parts = (model.to_json(), options, weights)
            written = write_predictions(
                db, sessions, info, output_table, pred_type, top_k, model_parts, replace
            )
            return str(written)
        probs = probabilities(db, sessions, info, model.to_json(), options, weights)
    return probs if pred_type == "prob" else np.argmax(probs, axis=1)
