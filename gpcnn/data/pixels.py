"""The one rule of what arrays become, in a table and as a model's input, and of the shapes a model
takes them in.

Types. Integer values of any dtype (uint8, int64, bool, ...) are pixels 0..255: stored as uint8,
they reach the model as ``x / 255``. Float images (N, H, W[, C]) lie in [0, 1]: stored as uint8
(rounded ``x * 255``), they reach it as about ``x``. Float feature rows (N, F) are stored as
float32 and reach the model as they are, of any sign. So a model sees the same values from a
table as from the arrays it was loaded from.

Shapes. Data whose items have shape S reach a model whose input is M when S == M (with a channel
of 1 added or dropped at the end), or when one of the two is flat (rows of F values, or a model
taking F values) and both hold as many values: each item is reshaped row-major, channels last, as
numpy's ``reshape`` and Keras's ``Flatten`` do. Two different shapes that are neither is
ambiguous (a transposed image holds as many values) and refused, naming both.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import numpy as np

from gpcnn.engines.identifiers import TableError
from gpcnn.kernel.segment import FEATURE_DTYPE, to_model_input

PIXEL_RANGE = "integer pixels lie in 0..255 (cast feature values to float to keep them as they are)"


def stored(x: np.ndarray, *, stacklevel: int = 2) -> np.ndarray:
    """``x`` (N, ...) as a table stores it: uint8 pixels, or float32 feature rows (N, F); or
    TableError. ``stacklevel``: the frame the warning about float images names."""
    if x.dtype == np.uint8:
        return x
    if x.dtype.kind in "biu":
        _check_pixel_range(x, TableError)
        return x.astype(np.uint8)
    if x.dtype.kind != "f":
        raise TableError(
            f"images must be numbers (uint8, integers 0..255 or floats); got {x.dtype}"
        )
    if x.ndim == 2:
        if x.size and not np.isfinite(x).all():
            raise TableError("feature rows must be finite: no NaN or infinity")
        return x.astype(FEATURE_DTYPE)
    if x.size and not np.isfinite(x).all():
        bad = int(np.count_nonzero(~np.isfinite(x)))
        raise TableError(
            f"float images hold {bad:,} NaN or infinite values: replace or drop those images first"
        )
    if x.size and (x.min() < 0 or x.max() > 1):
        raise TableError(
            f"float images must lie in [0, 1], these span {x.min():g}..{x.max():g}: scale them, "
            "or store integer pixels 0..255"
        )
    warnings.warn(
        "float images in [0, 1] are stored as uint8 (rounded x*255)", stacklevel=stacklevel
    )
    return np.rint(x * 255).astype(np.uint8)


def to_input(x, input_shape: Sequence[int] | None = None) -> np.ndarray:
    """Arrays as the model takes them, by ``stored``'s rule without the rounding: integers
    through the one conversion of uint8 (``x / 255``), floats as they are; reshaped to
    ``input_shape`` (one item's) when given."""
    x = np.asarray(x)
    if x.ndim == 3:
        x = x[..., np.newaxis]
    if x.dtype.kind in "biu":
        _check_pixel_range(x, ValueError)
        x = to_model_input(x.astype(np.uint8, copy=False))
    else:
        x = x.astype(np.float32)
    return x if input_shape is None else x.reshape((len(x), *input_shape))


def _check_pixel_range(x: np.ndarray, error: type[Exception]) -> None:
    if x.dtype != np.uint8 and x.size and (x.min() < 0 or x.max() > 255):
        raise error(f"{x.dtype} values {x.min()}..{x.max()}: {PIXEL_RANGE}")


def item_shape(x: np.ndarray) -> tuple[int, ...]:
    """One item's shape as a table of ``x`` stores it: images (N, H, W) with their channel."""
    return (*x.shape[1:], 1) if x.ndim == 3 else tuple(x.shape[1:])


def fitted_shape(
    data: Sequence[int], model: Sequence[int], *, where: str, caller: str = "the_model"
) -> tuple[int, ...]:
    """The model's input shape ``model`` when items of shape ``data`` reach it (the module's
    rule), else ValueError naming both and what to pass (rows, in scikit-learn's words);
    ``where`` names the data, ``caller`` what refuses them."""
    data, model = tuple(int(s) for s in data), tuple(int(s) for s in model)
    if _without_channel(data) == _without_channel(model):
        return model
    size = math.prod(data)
    if size == math.prod(model) and (len(data) == 1 or len(model) == 1):
        return model
    if len(data) == 1:
        raise ValueError(
            f"X has {size} features, but {caller} is expecting {math.prod(model)} features as "
            f"input: the model takes inputs of shape {model} and {where} holds rows of {size} "
            "values; pass rows of as many values as the model's input or change its Input"
        )
    hint = (
        f"reshape the data to (N, {', '.join(map(str, model))}) or flatten it to (N, {size}) rows"
        if size == math.prod(model)
        else "change the model's Input"
    )
    raise ValueError(
        f"the model takes inputs of shape {model}, but {where} holds items of shape {data}: {hint}"
    )


def _without_channel(shape: tuple[int, ...]) -> tuple[int, ...]:
    return shape[:-1] if len(shape) > 1 and shape[-1] == 1 else shape
