"""The public API a user can guess: ``gpcnn.datasets`` and ``gpcnn.models``, one name for the database
argument, the old paths that still work for one release, and readers behind one interface."""

from __future__ import annotations

import inspect
import warnings

import numpy as np
import pytest

import gpcnn
from gpcnn import datasets, models
from gpcnn.data import by_name, image_folder
from gpcnn.data.sources import ArrayImages, ImageSource, as_source
from gpcnn.data.tables import TableError
from gpcnn.estimator import named_models
from gpcnn.tools import cli

API = "gpcnn_public_api_test"  # image tables of this module


def _drop_tables(db) -> None:
    for info in gpcnn.list_tables(db):
        if info.table.schema == API:
            gpcnn.drop_table(db, info.table)


@pytest.fixture(scope="module", autouse=True)
def _clean(db):
    _drop_tables(db)
    yield
    _drop_tables(db)


def _takes_a_database(function) -> bool:
    parameters = inspect.signature(function).parameters
    return bool(parameters) and next(iter(parameters)) in ("db", "database")


PUBLIC_FUNCTIONS = [
    name
    for name in gpcnn.__all__
    if inspect.isfunction(getattr(gpcnn, name)) and _takes_a_database(getattr(gpcnn, name))
]


def test_the_readers_and_the_named_cnns_have_short_public_homes():
    assert datasets.load_fashion_mnist is by_name.load_fashion_mnist
    assert datasets.load_image_folder is image_folder.load_image_folder
    for name in ("load_mnist", "load_mnist_sample", "load_cifar10", "ImageSource", "Dataset"):
        assert name in datasets.__all__
    for name in ("small_cnn", "bn_cnn", "gn_cnn", "fedavg_cnn", "build", "MODELS"):
        assert getattr(models, name) is getattr(named_models, name)
    assert models.small_cnn().count_params() == models.build("small-cnn").count_params()


@pytest.mark.parametrize(
    ("old", "new"), [("gpcnn.data.datasets", datasets), ("gpcnn.study.models", models)]
)
def test_the_old_module_paths_warn_and_give_the_same_objects(old, new):
    module = __import__(old, fromlist=["_"])
    for name in new.__all__:
        if name in ("keras_module", "to_model_input"):  # new in gpcnn.models
            continue
        with pytest.warns(DeprecationWarning, match=f"use {new.__name__}.{name}"):
            assert getattr(module, name) is getattr(new, name)
    with pytest.raises(AttributeError):
        module.no_such_name  # noqa: B018


def test_every_public_function_calls_the_database_argument_database():
    assert len(PUBLIC_FUNCTIONS) >= 17, PUBLIC_FUNCTIONS
    old = [n for n in PUBLIC_FUNCTIONS if "db" in inspect.signature(getattr(gpcnn, n)).parameters]
    assert old == []
    assert "database" in inspect.signature(gpcnn.fit_multiple).parameters
    assert "database" in inspect.signature(gpcnn.GreenplumCNN).parameters


def test_the_old_keyword_db_still_works_with_a_warning(db):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        by_position = gpcnn.list_tables(db)
        by_keyword = gpcnn.list_tables(database=db)
    with pytest.warns(DeprecationWarning, match=r"list_tables\(db=...\) is deprecated"):
        old = gpcnn.list_tables(db=db)
    assert old == by_position == by_keyword


def test_the_database_given_under_both_names_is_refused(db):
    with pytest.raises(TypeError, match="both database= and its old name db="):
        gpcnn.list_tables(database=db, db=db)


class Stripes(ImageSource):
    """A reader defined here alone: horizontal stripes, class = the lit row, 3 images a batch."""

    what = "stripes"
    image_shape = (4, 4, 1)
    class_names = ("top", "second", "third", "bottom")

    def __len__(self) -> int:
        return 10

    @property
    def labels(self) -> np.ndarray:
        return np.arange(10) % 4

    def batches(self, batch_size=None, *, progress=True):
        step = batch_size or 3
        for start in range(0, len(self), step):
            y = self.labels[start : start + step]
            x = np.zeros((len(y), 4, 4, 1), np.uint8)
            x[np.arange(len(y)), y] = 255
            yield x, y


def _stripes() -> tuple[np.ndarray, np.ndarray]:
    return tuple(np.concatenate(parts) for parts in zip(*Stripes().batches(), strict=True))


def test_a_new_reader_is_one_class_and_loads_in_its_own_order(db):
    info = gpcnn.load_images(db, f"{API}.stripes", Stripes(), segments=2, progress=False)
    assert info.images == 10 and info.class_names == Stripes.class_names
    assert info.images_per_segment == (5, 5)
    x, y, ids = gpcnn.read_images(db, f"{API}.stripes", ids=True)
    ex, ey = _stripes()
    np.testing.assert_array_equal(x, ex)
    np.testing.assert_array_equal(y, ey)
    np.testing.assert_array_equal(ids, np.arange(10))


def test_a_reader_read_front_to_back_refuses_label_skew(db):
    with pytest.raises(TableError, match="stripes loads IID"):
        gpcnn.load_images(
            db, f"{API}.skewed", Stripes(), distribution="label-skew", skew=1.0, progress=False
        )


def test_a_source_carries_its_labels():
    with pytest.raises(TableError, match="stripes carries its labels"):
        as_source(Stripes(), np.zeros(10))


def test_arrays_become_the_array_source_and_a_dataset_split_is_one(db):
    x, y = _stripes()
    assert isinstance(as_source(x, y), ArrayImages)
    data = datasets.Dataset("stripes", x, y, x, y, Stripes.class_names)
    from_arrays = gpcnn.load_images(
        db, f"{API}.arrays", x, y, class_names=data.class_names, segments=2, progress=False
    )
    from_split = gpcnn.load_images(db, f"{API}.split", data.train, segments=2, progress=False)
    assert from_split.class_counts == from_arrays.class_counts
    for a, b in zip(
        gpcnn.read_images(db, f"{API}.arrays", ids=True),
        gpcnn.read_images(db, f"{API}.split", ids=True),
        strict=True,
    ):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    ("name", "path", "message"),
    [
        ("mnist", None, "mnist needs the path"),
        ("cifar10", None, "cifar10 needs the path"),
        ("mnist-sample", "/tmp", "mnist-sample takes no path"),
    ],
)
def test_the_command_line_follows_the_librarys_path_rules(name, path, message, capsys):
    with pytest.raises(datasets.DatasetError, match=message):
        datasets.load_by_name(name, path)
    argv = ["load", "--dataset", name, "--table", f"{API}.never"]
    assert cli.main([*argv, *(["--path", path] if path else [])]) == 1
    assert message in capsys.readouterr().err
