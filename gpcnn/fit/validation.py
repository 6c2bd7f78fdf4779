"""A fit's validation: which iterations are validated, and the loss and metrics of a model on a
validation table (in the database: ``evaluate_table``) or on arrays (locally); whether a model
fits a table."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from gpcnn.data import pixels
from gpcnn.data.tables import ImageTable, TableName, describe
from gpcnn.engines import Database
from gpcnn.engines.sessions import SegmentSessions
from gpcnn.engines.transfers import StoredStart
from gpcnn.fit.database_errors import database_call
from gpcnn.kernel import keras_setup, wire
from gpcnn.kernel.protocol import SegmentOptions


def evaluate_table(
    db: Database,
    sessions: SegmentSessions,
    info: ImageTable,
    model_json: str,
    options: SegmentOptions,
    weights: bytes | np.ndarray | StoredStart,
) -> dict:
    """Image-weighted loss and metrics of ``weights`` (or of a stored checkpoint's model) over a
    whole table, in the database."""
    params = {"model": model_json, "options": options}  # its image_shape: the model's input
    vector = wire.from_bytes(weights) if isinstance(weights, bytes) else weights
    metrics = database_call(
        "evaluation",
        db.backend.run_evaluation,
        sessions,
        table=info.table,
        params=params,
        keys=info.keys,
        weights=vector,
    )
    return {k: float(v) for k, v in metrics.items()}


def is_table(x) -> bool:
    """Whether ``x`` names a table (``"schema.name"``, a ``TableName`` or ``(schema, name)``)."""
    return isinstance(x, str | TableName) or (
        isinstance(x, tuple) and len(x) == 2 and all(isinstance(p, str) for p in x)
    )


def check_model_fits(model: Any, info: ImageTable) -> tuple[int, ...]:
    """Refuse a model whose input or output does not match the table's items and classes;
    return its input shape, which the segments reshape the items to (``pixels.fitted_shape``)."""
    shape = pixels.fitted_shape(info.image_shape, model.input_shape[1:], where=str(info.table))
    units = model.output_shape[-1]
    if units != info.num_classes:
        raise ValueError(
            f"the model has {units} output units, but {info.table} has {info.num_classes} "
            "classes: change the last layer, or pass a function that builds the model for the "
            "table's shape and classes (gpcnn.models.small_cnn, not small_cnn())"
        )
    if 0 in info.images_per_segment:
        raise ValueError(f"{info.table} has a segment with no rows: reload it")
    wire.manifest(model)  # refuses mixed precision early
    return shape


def validation_source(
    db: Database, source, model: Any, trained: ImageTable | None = None
) -> ImageTable | tuple | None:
    """Validation arrays ``(x, y)``, or a table's description (checked against ``model``). A
    table whose items or classes differ from those of the table ``trained`` on is named as the
    odd one, before the model is blamed."""
    if isinstance(source, tuple) and len(source) == 2 and not is_table(source):
        return tuple(np.asarray(v) for v in source)
    if source is None:
        return None
    info = describe(db, source)
    if trained is not None:
        _check_like_training(info, trained)
    check_model_fits(model, info)
    return info


def _check_like_training(info: ImageTable, trained: ImageTable) -> None:
    fix = "validate on a table of the same kind of items, loaded as the training table was"
    if tuple(info.image_shape) != tuple(trained.image_shape):
        raise ValueError(
            f"the validation table {info.table} holds items of shape {tuple(info.image_shape)}, "
            f"but the training table {trained.table} holds {tuple(trained.image_shape)}: {fix}"
        )
    if info.num_classes != trained.num_classes:
        raise ValueError(
            f"the validation table {info.table} has {info.num_classes} classes, but the training "
            f"table {trained.table} has {trained.num_classes}: {fix}"
        )


def model_input(x, input_shape=None) -> np.ndarray:
    """Arrays as the model takes them (``pixels.to_input``: integers as x/255, floats as they
    are), reshaped to ``input_shape`` when given."""
    return pixels.to_input(x, input_shape)


def evaluate_arrays(model: Any, x, y) -> dict:
    """Loss and metrics of a local model on arrays."""
    x = model_input(x)
    shape = pixels.fitted_shape(x.shape[1:], model.input_shape[1:], where="the arrays")
    logs = model.evaluate(
        x.reshape((len(x), *shape)), np.asarray(y), batch_size=1000, verbose=0, return_dict=True
    )
    return {k: float(v) for k, v in logs.items()}


def validates(freq: int | Sequence[int], iteration: int) -> bool:
    """Whether ``iteration`` is validated: every ``freq``-th, or those listed (Keras's meaning)."""
    if isinstance(freq, int | np.integer):
        return iteration % int(freq) == 0
    return iteration in freq


class Validation:
    """The validation of one fit: a table (``ImageTable``), arrays ``(x, y)`` or none, every
    ``freq``-th iteration. Arrays are evaluated by a local model of its own, built once."""

    def __init__(
        self,
        db: Database,
        source: ImageTable | tuple | None,
        freq: int | Sequence[int],
        model_json: str,
        options: SegmentOptions,
    ) -> None:
        self.db, self.source, self.freq = db, source, freq
        self.model_json, self.options = model_json, options
        self.model: Any = None

    def evaluate(self, sessions, weights: np.ndarray, stored, iteration: int) -> dict | None:
        """Validation metrics of ``weights`` at ``iteration`` (None when not due); a table reads
        them from their checkpoint (``stored``) when they have one."""
        if self.source is None or not validates(self.freq, iteration):
            return None
        if isinstance(self.source, ImageTable):
            start = weights if stored is None else stored
            return evaluate_table(
                self.db, sessions, self.source, self.model_json, self.options, start
            )
        if self.model is None:
            self.model = keras_setup.compiled_model(self.model_json, self.options.compile)
        wire.set_model_weights(self.model, weights)
        return evaluate_arrays(self.model, *self.source)
