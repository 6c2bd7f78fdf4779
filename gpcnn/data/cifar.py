"""Reader of CIFAR-10's python version: cifar-10-python.tar.gz or its extracted directory, as arrays
(``load_cifar10``) or as an image source read one batch file at a time (``load_cifar10_files``).

Images come back as uint8 arrays shaped (N, 32, 32, 3), labels as 1-D int64 arrays. The batch files
are pickles, unpickled by an unpickler that can build numpy arrays and nothing else.
"""

from __future__ import annotations

import io
import os
import pickle
import tarfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import ClassVar

import numpy as np

from gpcnn.data.labelled import Dataset, DatasetError, checked_pair, missing_files
from gpcnn.data.sources import ImageSource

_CIFAR_DIR = "cifar-10-batches-py"
_CIFAR_TRAIN = tuple(f"data_batch_{i}" for i in range(1, 6))
_CIFAR_FILES = (*_CIFAR_TRAIN, "test_batch", "batches.meta")
_CIFAR_SIDE = 32


def load_cifar10(path: str | os.PathLike[str]) -> Dataset:
    """Read CIFAR-10's python version: cifar-10-python.tar.gz or its extracted directory.

    The batch files are pickles, so they are unpickled with an unpickler that can build
    numpy arrays and nothing else: a crafted file cannot run code.

    Parameters
    ----------
    path : str or path-like
        ``cifar-10-python.tar.gz`` or the directory it extracts to (nothing is downloaded).

    Returns
    -------
    Dataset
        ``x_train``, ``y_train``, ``x_test``, ``y_test`` (uint8 images (N, H, W[, C]), int64
        labels) and ``class_names``; ``.train`` and ``.test`` as image sources.

    Raises
    ------
    DatasetError
        When the archive or a batch file cannot be read.
    """
    path = Path(path)
    with _reading(path) as read:
        class_names = _read_class_names(read)
        batches = [_cifar_batch(*read(name), len(class_names)) for name in _CIFAR_TRAIN]
        x_test, y_test = _cifar_batch(*read("test_batch"), len(class_names))
    x_train = np.concatenate([x for x, _ in batches])
    y_train = np.concatenate([y for _, y in batches])
    return Dataset("cifar10", x_train, y_train, x_test, y_test, class_names)


@dataclass(frozen=True, eq=False)
class Cifar10Files(ImageSource):
    """One split of CIFAR-10's files as an image source, decoded one batch file at a time.

    Loading it never holds more than one file's images (10,000). Build one with
    ``load_cifar10_files``; it loads in the files' order (CIFAR-10's batches are shuffled).

    Parameters
    ----------
    path : Path
        The archive or directory.
    names : tuple of str
        The batch files of the split, in order.
    class_names : tuple of str
        CIFAR-10's ten class names.
    file_labels : tuple of ndarray
        Each file's labels, read when the source was made.
    """

    what: ClassVar[str] = "CIFAR-10's files"
    # A class attribute (unannotated, so not a dataclass field), as ImageSource declares it.
    image_shape = (_CIFAR_SIDE, _CIFAR_SIDE, 3)
    path: Path
    names: tuple[str, ...]  # the batch files, in order
    class_names: tuple[str, ...]
    file_labels: tuple[np.ndarray, ...] = field(repr=False)  # each file's labels

    def __len__(self) -> int:
        return sum(len(y) for y in self.file_labels)

    @property
    def labels(self) -> np.ndarray:
        """Every image's label, in loading order."""
        return np.concatenate(self.file_labels)

    def batches(
        self, batch_size: int | None = None, *, progress: bool = True
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """The images file after file, at most ``batch_size`` at a time.

        Parameters
        ----------
        batch_size : int, optional
            Images per batch (default: a whole file, 10,000).
        progress : bool, default True
            Accepted for the interface; files are decoded too fast to need a bar.

        Yields
        ------
        tuple of ndarray
            ``(x, y)``: uint8 images (n, 32, 32, 3) and their int64 labels.
        """
        with _reading(self.path) as read:
            for name in self.names:
                x, y = _cifar_batch(*read(name), len(self.class_names))
                step = len(y) if batch_size is None else int(batch_size)
                for start in range(0, len(y), step):
                    yield x[start : start + step], y[start : start + step]


def load_cifar10_files(path: str | os.PathLike[str], split: str = "train") -> Cifar10Files:
    """CIFAR-10's train or test split as an image source for ``load_images``.

    Read like ``load_cifar10``, but only the labels are kept until it loads.

    Parameters
    ----------
    path : str or path-like
        ``cifar-10-python.tar.gz`` or the directory it extracts to.
    split : {"train", "test"}, default "train"
        The five data batches, or the test batch.

    Returns
    -------
    Cifar10Files
        An image source (``gpcnn.load_images(db, table, source)``).

    Raises
    ------
    DatasetError
        For another split, or files that cannot be read.
    """
    if split not in ("train", "test"):
        raise DatasetError(f"split must be 'train' or 'test', not {split!r}")
    path = Path(path)
    names = _CIFAR_TRAIN if split == "train" else ("test_batch",)
    with _reading(path) as read:
        class_names = _read_class_names(read)
        labels = tuple(_cifar_batch(*read(name), len(class_names))[1] for name in names)
    return Cifar10Files(path, names, class_names, labels)


@contextmanager
def _reading(path: Path) -> Iterator[Callable[[str], tuple[str, bytes]]]:
    """``_cifar_files``, with an archive or file that cannot be read told as a DatasetError."""
    try:
        with _cifar_files(path) as read:
            yield read
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise DatasetError(f"{path}: cannot read the CIFAR-10 files ({exc})") from exc


def _read_class_names(read: Callable[[str], tuple[str, bytes]]) -> tuple[str, ...]:
    meta_source, meta_raw = read("batches.meta")
    return _cifar_class_names(_unpickle(meta_source, meta_raw), meta_source)


@contextmanager
def _cifar_files(path: Path) -> Iterator[Callable[[str], tuple[str, bytes]]]:
    """Yield a reader name -> (where it came from, its bytes), from the archive or directory."""
    hint = (
        "download cifar-10-python.tar.gz from https://www.cs.toronto.edu/~kriz/cifar.html "
        "and pass its path (or the directory it extracts to)"
    )
    if path.is_file():
        with tarfile.open(path) as tar:
            members = {PurePosixPath(m.name).name: m for m in tar.getmembers() if m.isfile()}
            missing = [f"{path}:{_CIFAR_DIR}/{n}" for n in _CIFAR_FILES if n not in members]
            if missing:
                raise missing_files("CIFAR-10", missing, hint)

            def read_member(name: str) -> tuple[str, bytes]:
                member = members[name]
                file = tar.extractfile(member)
                assert file is not None  # members holds regular files only
                return f"{path}:{member.name}", file.read()

            yield read_member
    else:
        directory = path / _CIFAR_DIR if (path / _CIFAR_DIR).is_dir() else path
        missing = [str(directory / n) for n in _CIFAR_FILES if not (directory / n).is_file()]
        if missing:
            raise missing_files("CIFAR-10", missing, hint)
        yield lambda name: (str(directory / name), (directory / name).read_bytes())


def _latin1_encode(text: str, encoding: str) -> bytes:
    """Stand-in for _codecs.encode, which protocol-2 pickles written by Python 3 use for bytes."""
    if encoding not in ("latin1", "latin-1"):
        raise DatasetError(f"refusing _codecs.encode with encoding {encoding!r}")
    return text.encode("latin-1")


class _ArrayUnpickler(pickle.Unpickler):
    """Unpickler that can rebuild numpy arrays and bytes, and refuses every other global."""

    _ALLOWED = frozenset(
        {
            ("numpy.core.multiarray", "_reconstruct"),  # pickles written by numpy 1.x
            ("numpy._core.multiarray", "_reconstruct"),  # pickles written by numpy 2.x
            ("numpy", "ndarray"),
            ("numpy", "dtype"),
        }
    )

    def find_class(self, module: str, name: str) -> object:
        if (module, name) == ("_codecs", "encode"):
            return _latin1_encode
        if (module, name) in self._ALLOWED:
            return super().find_class(module, name)
        raise DatasetError(f"refusing to load global {module}.{name}")


def _unpickle(source: str, raw: bytes) -> dict:
    try:
        loaded = _ArrayUnpickler(io.BytesIO(raw), encoding="bytes").load()
    except Exception as exc:  # a corrupt pickle can fail with almost any exception type
        raise DatasetError(f"{source}: not a CIFAR-10 pickle ({exc})") from exc
    if not isinstance(loaded, dict):
        raise DatasetError(f"{source}: holds a {type(loaded).__name__}, not a dict")
    return loaded


def _cifar_class_names(meta: dict, source: str) -> tuple[str, ...]:
    names = meta.get(b"label_names")
    if (
        not isinstance(names, list)
        or len(names) != 10
        or not all(isinstance(n, bytes) for n in names)
    ):
        raise DatasetError(f"{source}: b'label_names' is not a list of 10 names")
    return tuple(n.decode("utf-8") for n in names)


def _cifar_batch(source: str, raw: bytes, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Turn one batch's channel-major rows (1024 R, 1024 G, 1024 B) into (N, 32, 32, 3) images."""
    batch = _unpickle(source, raw)
    data = batch.get(b"data")
    row = 3 * _CIFAR_SIDE * _CIFAR_SIDE
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.shape[1:] != (row,):
        got = (
            f"{data.dtype} array {data.shape}" if isinstance(data, np.ndarray) else repr(data)[:40]
        )
        raise DatasetError(
            f"{source}: b'data' should be a uint8 array of shape (N, {row}), got {got}"
        )
    labels = np.asarray(batch.get(b"labels", []))
    if labels.ndim != 1 or (labels.size and labels.dtype.kind not in "iu"):
        raise DatasetError(f"{source}: b'labels' is not a list of integers")
    images = data.reshape(-1, 3, _CIFAR_SIDE, _CIFAR_SIDE).transpose(0, 2, 3, 1)
    return checked_pair(np.ascontiguousarray(images), labels, n_classes, source)
