"""Check the arrays a user gives ``GreenplumCNN`` before anything reaches the database, with the
messages scikit-learn's conventions (and its estimator checks) expect, each followed by what to do;
and the labels' classes.

X is feature rows (N, F) or images (N, H, W) or (N, H, W, C), of numbers as ``gpcnn.data.pixels``
states (integers are pixels 0..255; float images lie in [0, 1]; float feature rows are any
finite values). Labels are of any type: class indices for a model of as many output units, or
values mapped to their sorted distinct values (scikit-learn's ``classes_``), as ``pack_table``
maps a table's.
"""

from __future__ import annotations

import numpy as np
from sklearn.utils.multiclass import type_of_target
from sklearn.utils.validation import check_array, column_or_1d

from gpcnn.data.pixels import PIXEL_RANGE

IMAGES = (
    "images (N, H, W) or (N, H, W, C) (integers 0..255, float images in 0..1), feature rows "
    "(N, F), or a table name"
)
LABEL_TYPES = ("binary", "multiclass")


def check_images(x, *, caller: str = "GreenplumCNN", positive_only: bool = True) -> np.ndarray:
    """``x`` as a dense array, or ValueError/TypeError naming what is wrong: sparse, complex,
    empty, NaN or infinity, not numbers, pixels out of range, or not (N, F) or (N, H, W[, C]).
    Negative values are refused but in float feature rows for a model that takes rows
    (``positive_only=False``, as the estimator's tags say)."""
    return _values(_shape(_dense(x, caller), caller), caller, positive_only)


def check_training(
    x, y, *, at_least_two: bool, caller: str = "GreenplumCNN", positive_only: bool = True
):
    """``x, y`` as ``fit`` takes them, checked in the order scikit-learn's checks expect (the
    values and labels before the shape); ``y`` keeps its values (``fit_classes`` maps them)."""
    x = _dense(x, caller)
    y = check_labels(y, len(x), at_least_two=at_least_two)
    return _values(_shape(x, caller), caller, positive_only), y


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
    if x.dtype.kind == "O":  # numbers held as objects are numbers (scikit-learn's convention)
        x = x.astype(np.float64)
    if x.dtype.kind not in "biuf":  # strings, dates, durations: no pixels
        raise TypeError(
            f"{caller} takes numeric pixels, got {x.dtype} values: {caller} takes {IMAGES}."
        )
    return x


def _values(x: np.ndarray, caller: str, positive_only: bool) -> np.ndarray:
    """Pixels in range: integers 0..255, no negative image (nor rows, ``positive_only``)."""
    signed = not positive_only and x.ndim == 2 and x.dtype.kind == "f"
    if x.dtype.kind in "if" and x.size and not signed and x.min() < 0:
        raise ValueError(
            f"Negative values in data passed to {caller}: pixels are 0..255 (integers) or 0..1 "
            "(float images); rescale them (float feature rows (N, F) may be negative)"
        )
    if x.dtype.kind in "iu" and x.size and x.max() > 255:
        raise ValueError(f"{x.dtype} values up to {x.max()} passed to {caller}: {PIXEL_RANGE}")
    return x


def _shape(x: np.ndarray, caller: str) -> np.ndarray:
    if x.ndim not in (2, 3, 4):
        raise ValueError(
            f"X must be (N, F), (N, H, W) or (N, H, W, C), got shape {x.shape}: {caller} takes "
            f"{IMAGES}"
        )
    if 0 in x.shape[1:]:
        raise ValueError(f"images of shape {x.shape[1:]} hold no pixels: {caller} takes {IMAGES}")
    return x


def check_labels(y, n_images: int, *, at_least_two: bool) -> np.ndarray:
    """``y`` as a 1-D array of labels, or ValueError: missing, not classes (continuous,
    multi-output), a length other than the images', or (``at_least_two``, a fit from scratch)
    one class only. A column (N, 1) is raveled with scikit-learn's warning."""
    if y is None:
        raise ValueError(
            "fit(x, y) needs labels for arrays (a table name needs none): GreenplumCNN requires "
            "y to be passed, but the target y is None"
        )
    y = np.asarray(y)
    kind = type_of_target(y, input_name="y")
    if kind not in LABEL_TYPES:
        raise ValueError(
            f"Unknown label type: {kind}. GreenplumCNN is a classifier: y holds one label "
            "(a class index, a name, ...) per image"
        )
    if y.ndim == 2 and y.shape[1] == 1:
        y = column_or_1d(y, warn=True)
    if y.ndim != 1:
        raise ValueError(
            f"y of shape {y.shape}: give one label per image, a 1-D array of {n_images}"
        )
    if len(y) != n_images:
        raise ValueError(f"{n_images} images but {len(y)} labels: give one label per image")
    if at_least_two and len(np.unique(y)) < 2:
        raise ValueError(
            f"y holds 1 class only ({y.flat[0]!r}): a classifier learns from at least two; "
            "partial_fit(x, y, classes=...) takes batches of one class"
        )
    return y


def class_values(y) -> tuple[np.ndarray, np.ndarray]:
    """The sorted distinct labels of ``y`` and each label's class index among them: the mapping
    ``pack_table`` applies to a table's labels, and ``classes_`` in scikit-learn."""
    try:
        values, codes = np.unique(np.asarray(y), return_inverse=True)
    except TypeError:  # labels of several types (1 and "a") have no order
        raise ValueError(f"labels of mixed types cannot be sorted into classes: {y!r}") from None
    return values, codes.reshape(-1)


def fit_classes(y: np.ndarray, units: int | None) -> tuple[np.ndarray, np.ndarray]:
    """``(classes_, class index of each label)`` of a fit: labels that are all class indices of
    a model with ``units`` outputs (0..units-1) are taken as indices (``classes_`` 0..units-1);
    any others map to their sorted distinct values, as many as ``units``."""
    numeric = y.dtype.kind in "iuf" and y.size and np.all(y == np.round(y))
    if units is not None and numeric and y.min() >= 0 and y.max() < units:
        return np.arange(units), y.astype(np.int64)
    classes, codes = class_values(y)
    if units is not None and len(classes) != units:
        raise ValueError(
            f"y holds {len(classes)} distinct labels ({_listed(classes)}), but the model has "
            f"{units} output units: give labels of {units} classes (or class indices "
            f"0..{units - 1}), or change the last layer"
        )
    return classes, codes


def known_classes(y: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """The class index of each label among ``classes`` (a fitted ``classes_``), or ValueError
    naming a label that is none of them."""
    codes = np.searchsorted(classes, y)
    found = (codes < len(classes)) & (classes[np.minimum(codes, len(classes) - 1)] == y)
    if not found.all():
        raise ValueError(
            f"y holds {_listed(y[~found][:1])}, not one of the classes ({_listed(classes)}): "
            "partial_fit learns the classes of its first call (pass them all as classes=...)"
        )
    return codes.astype(np.int64)


def check_classes(classes, units: int | None) -> np.ndarray:
    """``partial_fit``'s ``classes``: every label ``y`` may hold, as many as the model's
    ``units`` outputs (None: a model built for them), sorted (so a later call cannot change
    them)."""
    given = np.asarray(classes)
    if given.ndim != 1 or len(class_values(given)[0]) != len(given):
        raise ValueError(f"classes={given.tolist()}: give the labels y may hold, once each")
    if units is not None and len(given) != units:
        raise ValueError(
            f"classes={given.tolist()}: the model's {units} output units predict {units} "
            f"classes, so pass {units} labels (e.g. classes=range({units})) or change the last "
            "layer"
        )
    return class_values(given)[0]


def _listed(values: np.ndarray) -> str:
    shown = ", ".join(repr(v.item() if hasattr(v, "item") else v) for v in values[:5])
    return shown + (", ..." if len(values) > 5 else "")
