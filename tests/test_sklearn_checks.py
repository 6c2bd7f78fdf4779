"""scikit-learn's own estimator checks against GreenplumCNN, each passing or declared with its
reason; the tags it declares; partial_fit's ``classes``; and the array errors scikit-learn's
conventions expect, which still say what to do.

With a model of feature rows (``dense_rows``, a function building a dense model for each fit's
width and classes, as a user of a scikit-learn classifier would pass) GreenplumCNN declares 2-D
input, and every generic check runs against the database: all pass but ``ROWS_DECLARED``.

With an image model (8×8×1) it declares no 2-D input, and scikit-learn then skips every check.
``AsIfTwoD`` turns that one tag on so that ``parametrize_with_checks`` generates them all,
against the unchanged estimator: the checks that feed 2-D feature rows of a few values to ``fit``
fail the way a user's rows of the wrong width fail, and are listed in ``NEEDS_2D`` (strict: one
that starts passing fails the suite). None of them reaches the database (arrays are checked
against the model before it), so they take seconds.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import sparse
from sklearn.utils import get_tags
from sklearn.utils.estimator_checks import check_estimator, parametrize_with_checks
from tiny import dense_net, dense_rows, learnable_images

from gpcnn.estimator import GreenplumCNN

IMAGES_NOT_ROWS = (
    "fits 2-D feature rows of a few values (N, F); the image model takes 64 values (8×8×1)"
)
FIXED_INPUT = (
    "fits 2-D rows of varying width; a Keras model's input shape is fixed, so there is no "
    "n_features_in_ to adapt"
)
NEEDS_2D = {
    **dict.fromkeys(
        [
            "check_classifier_data_not_an_array",
            "check_classifiers_train",
            "check_dict_unchanged",
            "check_dont_overwrite_parameters",
            "check_estimators_fit_returns_self",
            "check_estimators_nan_inf",
            "check_estimators_overwrite_params",
            "check_estimators_pickle",
            "check_f_contiguous_array_estimator",
            "check_fit2d_predict1d",
            "check_fit_check_is_fitted",
            "check_fit_idempotent",
            "check_fit_score_takes_y",
            "check_methods_sample_order_invariance",
            "check_methods_subset_invariance",
            "check_pipeline_consistency",
            "check_readonly_memmap_input",
        ],
        IMAGES_NOT_ROWS,
    ),
    **dict.fromkeys(
        [
            "check_fit2d_1feature",
            "check_n_features_in",
            "check_n_features_in_after_fitting",
            "check_estimators_partial_fit_n_features",
        ],
        FIXED_INPUT,
    ),
    **dict.fromkeys(
        [
            "check_estimators_dtypes",
            "check_dtype_object",
            "check_classifiers_classes",
            "check_supervised_y_2d",
        ],
        IMAGES_NOT_ROWS,
    ),
}
ROWS_DECLARED = {
    "check_methods_sample_order_invariance": (
        "predict_proba of a row moves by one float32 ulp (about 6e-8) when the rows are "
        "reordered: TensorFlow's matrix product is not bitwise invariant to a row's place in "
        "the batch, and the check's tolerance is rtol=1e-7"
    ),
}


@pytest.mark.slow
@parametrize_with_checks(
    [
        GreenplumCNN(
            dense_rows,
            optimizer="adam",
            learning_rate=0.05,
            iterations=3,
            batch_size=16,
            seed=0,
            verbose=0,
            threads_per_segment=1,
        )
    ],
    expected_failed_checks=lambda estimator: ROWS_DECLARED,
    xfail_strict=True,
)
def test_scikit_learn_estimator_checks_pass_on_a_dense_model_of_feature_rows(estimator, check, db):
    check(estimator.set_params(database=db))


class AsIfTwoD(GreenplumCNN):
    """GreenplumCNN, with only the 2-D tag on (see the module docstring)."""

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.two_d_array = True
        return tags


@parametrize_with_checks(
    [AsIfTwoD(dense_net(), iterations=1, verbose=0, threads_per_segment=1)],
    expected_failed_checks=lambda estimator: NEEDS_2D,
    xfail_strict=True,
)
def test_scikit_learn_estimator_checks_pass_or_are_declared(estimator, check):
    check(estimator)


def test_the_tags_of_a_model_of_rows_say_2d_of_any_sign():
    for model in (dense_rows, dense_rows((5,))):
        tags = get_tags(GreenplumCNN(model))
        assert tags.input_tags.two_d_array and not tags.input_tags.positive_only


def test_the_tags_of_an_image_model_say_images_or_a_table_non_negative_dense_and_y_not_required():
    tags = get_tags(GreenplumCNN(dense_net()))
    assert tags.estimator_type == "classifier"
    assert not tags.input_tags.two_d_array and tags.input_tags.three_d_array
    assert tags.input_tags.positive_only and not tags.input_tags.sparse
    assert not tags.target_tags.required
    with pytest.warns(UserWarning, match="Can't test estimator"):  # scikit-learn's SkipTestWarning
        results = check_estimator(GreenplumCNN(dense_net()), on_fail=None)
    assert [r["status"] for r in results] == ["passed"]  # only check_estimator_cloneable runs


@pytest.mark.parametrize(
    ("x", "y", "error", "message"),
    [
        (np.zeros((0, 8, 8)), [], ValueError, r"0 sample\(s\).*takes images"),
        (np.full((4, 8, 8), np.nan), [0, 1, 2, 0], ValueError, "NaN.*takes images"),
        (np.full((4, 8, 8), np.inf), [0, 1, 2, 0], ValueError, "infinity.*takes images"),
        (np.zeros((4, 8, 8), complex), [0, 1, 2, 0], ValueError, "Complex data not supported"),
        (sparse.csr_array(np.eye(4)), [0, 1, 2, 0], TypeError, "[Ss]parse.*takes images"),
        (-np.ones((4, 8, 8)), [0, 1, 2, 0], ValueError, "Negative values in data.*rescale"),
        (np.zeros((4, 8, 8)), None, ValueError, "needs labels.*target y is None"),
        (np.zeros((4, 8, 8)), [0.5, 1, 2, 0], ValueError, "Unknown label type: continuous"),
        (np.zeros((4, 8, 8)), list("abcd"), ValueError, "4 distinct labels.*3 output units"),
        (np.zeros((4, 8, 8)), [1, 1, 1, 1], ValueError, "1 class only.*partial_fit"),
        (np.zeros((4, 8, 8)), [0, 1, 2], ValueError, "4 images but 3 labels"),
        (np.zeros((4, 3)), [0, 1, 2, 0], ValueError, "X has 3 features.*expecting 64 features"),
        (np.zeros((4, 6, 6)), [0, 1, 2, 0], ValueError, r"shape \(8, 8, 1\).*items of shape"),
        (np.zeros((4, 2, 2, 2, 2)), [0, 1, 2, 0], ValueError, r"\(N, F\).*got shape \(4, 2"),
        (np.full((4, 8, 8), 256), [0, 1, 2, 0], ValueError, "values up to 256.*0..255"),
        (-np.ones((4, 64)), [0, 1, 2, 0], ValueError, "Negative values in data"),
    ],
)
def test_bad_arrays_are_refused_before_the_database_with_what_to_do(x, y, error, message):
    est = GreenplumCNN(dense_net(), database="postgresql://nobody@nowhere.invalid/none")
    with pytest.raises(error, match=message):
        est.fit(x, y)


@pytest.mark.slow
def test_partial_fit_takes_classes_and_a_batch_of_one_class(db):
    x, y = learnable_images(60)
    est = GreenplumCNN(
        dense_net(),
        iterations=1,
        batch_size=16,
        seed=11,
        database=db,
        threads_per_segment=1,
        verbose=0,
    )
    with pytest.raises(ValueError, match=r"3 output units.*classes=range\(3\)"):
        est.partial_fit(x, y, classes=[0, 1])
    ones = y == 1
    with est:
        est.partial_fit(x[ones], y[ones], classes=np.array([2, 0, 1]))
        np.testing.assert_array_equal(est.classes_, [0, 1, 2])
        est.partial_fit(x, y)  # later calls may omit classes
        assert len(est.history_) == 2
        assert est.predict_proba(x[:5]).shape == (5, 3)
    with pytest.raises(ValueError, match="NaN"):
        est.predict(np.full((2, 8, 8), np.nan))
