"""Prediction without fit (MADlib's ``madlib_keras_predict`` on any model): a Keras model, or one
stored in the model library, predicts a table on the segments, into the same output tables as
``GreenplumCNN.predict`` (``gpcnn.fit.predictions``), or back to the client."""

from __future__ import annotations

from typing import Any

import numpy as np

from gpcnn.deprecation import database_argument
from gpcnn.engines import Database, connect
from gpcnn.fit import compiling, loop
from gpcnn.fit.model_library import keras_model
from gpcnn.fit.predictions import probabilities, write_predictions
from gpcnn.fit.validation import check_model_fits
from gpcnn.kernel import wire
from gpcnn.kernel.protocol import SegmentOptions


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
    """Predict every image of ``table`` with ``model`` (a Keras model, or the name of a stored
    one) on the segments. With ``output_table``, written there as ``GreenplumCNN.predict`` writes
    (``pred_type`` ``response``, ``prob`` or ``topk`` with ``top_k``) and its name returned;
    without, the class labels (``response``) or probabilities (``prob``) come back, in
    ``buffer_id`` order as ``read_images`` returns the images."""
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
