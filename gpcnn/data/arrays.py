"""Check the arrays a user gives ``GreenplumCNN`` before anything reaches the database, with the
messages scikit-learn's conventions (and its estimator checks) expect, each followed by what to do.

Images are (N, H, W) or (N, H, W, C), uint8 0..255 or floats in [0, 1]; labels are class indices
0..classes-1. A 2-D array is refused rather than guessed at: (N, F) feature rows and one (H, W)
image look the same, and a Keras model's input shape is fixed by the model, not by the data.
"""

from __future__ import annotations

import numpy as np
from sklearn.utils.multiclass import type_of_target
from sklearn.utils.validation import check_array

IMAGES = "images (N, H, W) or (N, H, W, C), uint8 0..255 or float 0..1, or a table name"
LABEL_TYPES = ("binary", "multiclass")


def check_images(x, *, caller: str = "GreenplumCNN") -> np.ndarray:
    """``x`` as a dense array of images, or ValueError/TypeError naming what is wrong: sparse,
    complex, empty, NaN or infinity, negative pixels, or not (N, H, W[, C])."""
    return _image_shape(_dense(x, caller), caller)


def check_training(x, y, *, at_least_two: bool, caller: str = "GreenplumCNN"):
    """``x, y`` as ``fit`` takes them, checked in the order scikit-learn's checks expect (the
    values and labels before the shape)."""
    x = _dense(x, caller)
    y = check_labels(y, len(x), at_least_two=at_least_two)
    return _image_shape(x, caller), y


def _dense(x, caller: str) -> np.ndarray:
    try:
        x = check_array(
            x,
            accept_sparse=False,
            dtype=None,
            allow_nd=True,
            ensure_all_finite=True,
            estimator=caller,
            input_name="X",
        )
    except (TypeError, ValueError) as e:
        raise type(e)(f"{e} {caller} takes {IMAGES}.") from None
    if x.dtype.kind not in "biuf":  # strings, dates, durations: no pixels
        raise TypeError(
            f"{caller} takes numeric pixels, got {x.dtype} values: {caller} takes {IMAGES}."
        )
    if x.dtype.kind in "if" and x.size and x.min() < 0:  # uint8 needs no pass
        raise ValueError(
            f"Negative values in data passed to {caller}: pixels are 0..255 (uint8) or 0..1 "
            "(float); rescale them"
        )
    return x


def _image_shape(x: np.ndarray, caller: str) -> np.ndarray:
    if x.ndim not in (3, 4):
        raise ValueError(f"images must be (N, H, W) or (N, H, W, C), got shape {x.shape}: "
                         f"{caller} takes {IMAGES}")  # fmt: skip
    if 0 in x.shape[1:]:
        raise ValueError(f"images of shape {x.shape[1:]} hold no pixels: {caller} takes {IMAGES}")
    return x


def check_labels(y, n_images: int, *, at_least_two: bool) -> np.ndarray:
    """``y`` as class indices, or ValueError: missing, not classes (continuous, multi-output),
    a length other than the images', or (``at_least_two``, a fit from scratch) one class only."""
    if y is None:
        raise ValueError(
            "fit(x, y) needs labels for arrays (a table name needs none): GreenplumCNN requires "
            "y to be passed, but the target y is None"
        )
    y = np.asarray(y)
    kind = type_of_target(y, input_name="y")
    if kind not in LABEL_TYPES:
        raise ValueError(
            f"Unknown label type: {kind}. GreenplumCNN is a classifier: y holds one class index "
            "(0, 1, ...) per image"
        )
    if not np.issubdtype(y.dtype, np.number):
        such_as = f" such as {y.flat[0]!r}" if y.size else ""
        raise ValueError(
            f"labels must be class indices (0, 1, ...), got {y.dtype} values{such_as}: map them "
            "to indices first (the table keeps class names)"
        )
    if y.ndim != 1:  # a column (N, 1) is "binary" to type_of_target, and no class index
        raise ValueError(
            f"y of shape {y.shape}: give one class index per image, a 1-D array of {n_images}"
        )
    if len(y) != n_images:
        raise ValueError(f"{n_images} images but {len(y)} labels: give one label per image")
    if at_least_two and len(np.unique(y)) < 2:
        raise ValueError(
            f"y holds 1 class only ({y.flat[0]!r}): a classifier learns from at least two; "
            "partial_fit(x, y, classes=...) takes batches of one class"
        )
    return y.astype(np.int64)  # integral floats (1.0) are class indices too


def check_classes(classes, units: int) -> np.ndarray:
    """``partial_fit``'s ``classes``: every class the labels may hold, which for a Keras model
    with ``units`` outputs is 0..units-1 (so a later call cannot change them)."""
    classes = np.asarray(classes)
    expected = np.arange(units)
    if classes.ndim != 1 or not np.array_equal(np.sort(classes), expected):
        raise ValueError(
            f"classes={classes.tolist()}: the model's {units} output units predict the classes "
            f"0..{units - 1}, so pass classes=range({units}) (or change the last layer)"
        )
    return expected
