"""Tests for gpcnn.datasets: official file formats written here, read back, and corrupted.

Pure Python, no database: run with --noconftest if the database fixtures are unavailable.
"""

import gzip
import io
import pickle
import re
import struct
import tarfile
from pathlib import Path

import numpy as np
import pytest

from gpcnn.datasets import (
    FASHION_MNIST_CLASSES,
    FASHION_MNIST_DIR,
    DatasetError,
    load_cifar10,
    load_fashion_mnist,
    load_mnist,
    load_mnist_sample,
)

# --- IDX helpers ----------------------------------------------------------------------------


def idx_bytes(array: np.ndarray) -> bytes:
    """The official IDX layout: big-endian magic and dimensions, then the unsigned bytes."""
    if array.ndim == 3:
        header = struct.pack(">IIII", 2051, *array.shape)
    else:
        header = struct.pack(">II", 2049, len(array))
    return header + array.astype(np.uint8).tobytes()


def write_mnist_dir(directory: Path, *, gz: bool = True, dotted: bool = False) -> dict:
    """Write the four MNIST IDX files of a small random dataset; return its arrays."""
    rng = np.random.default_rng(1)
    arrays = {
        "x_train": rng.integers(0, 256, (12, 28, 28), dtype=np.uint8),
        "y_train": rng.integers(0, 10, 12).astype(np.uint8),
        "x_test": rng.integers(0, 256, (5, 28, 28), dtype=np.uint8),
        "y_test": rng.integers(0, 10, 5).astype(np.uint8),
    }
    directory.mkdir(parents=True, exist_ok=True)
    for key, array in arrays.items():
        raw = idx_bytes(array)
        idx_path(directory, key, gz=gz, dotted=dotted).write_bytes(
            gzip.compress(raw) if gz else raw
        )
    return arrays


def idx_path(directory: Path, key: str, *, gz: bool = True, dotted: bool = False) -> Path:
    split = "train" if key.endswith("train") else "t10k"
    kind, idx = ("images", "idx3") if key.startswith("x") else ("labels", "idx1")
    sep = "." if dotted else "-"
    return directory / f"{split}-{kind}{sep}{idx}-ubyte{'.gz' if gz else ''}"


def assert_same(dataset, arrays: dict) -> None:
    for key, expected in arrays.items():
        got = getattr(dataset, key)
        np.testing.assert_array_equal(got, expected)
        assert got.dtype == (np.uint8 if key.startswith("x") else np.int64)


# --- MNIST / IDX ----------------------------------------------------------------------------


@pytest.mark.parametrize(("gz", "dotted"), [(True, False), (False, False), (False, True)])
def test_mnist_idx_round_trip(tmp_path, gz, dotted):
    arrays = write_mnist_dir(tmp_path, gz=gz, dotted=dotted)
    dataset = load_mnist(tmp_path)
    assert_same(dataset, arrays)
    assert dataset.class_names == tuple("0123456789")


def test_mnist_npz_round_trip(tmp_path):
    arrays = write_mnist_dir(tmp_path / "idx")
    np.savez(tmp_path / "mnist.npz", **arrays)
    assert_same(load_mnist(tmp_path / "mnist.npz"), arrays)


def test_mnist_npz_missing_array(tmp_path):
    arrays = write_mnist_dir(tmp_path / "idx")
    del arrays["y_test"]
    np.savez(tmp_path / "mnist.npz", **arrays)
    with pytest.raises(DatasetError, match="y_test"):
        load_mnist(tmp_path / "mnist.npz")


def corrupt_magic(path: Path) -> None:
    raw = gzip.decompress(path.read_bytes())
    path.write_bytes(gzip.compress(struct.pack(">I", 2049) + raw[4:]))


def corrupt_truncate(path: Path) -> None:
    path.write_bytes(gzip.compress(gzip.decompress(path.read_bytes())[:-1]))


def corrupt_trailing(path: Path) -> None:
    path.write_bytes(gzip.compress(gzip.decompress(path.read_bytes()) + b"junk"))


def corrupt_gzip_stream(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-20])


@pytest.mark.parametrize(
    ("corrupt", "message"),
    [
        (corrupt_magic, "magic number 2049, expected 2051"),
        (corrupt_truncate, "truncated"),
        (corrupt_trailing, "trailing garbage"),
        (corrupt_gzip_stream, "cannot read"),
    ],
)
def test_corrupt_idx_file_is_named(tmp_path, corrupt, message):
    write_mnist_dir(tmp_path)
    bad = idx_path(tmp_path, "x_test")
    corrupt(bad)
    with pytest.raises(DatasetError, match=message) as caught:
        load_mnist(tmp_path)
    assert str(bad) in str(caught.value)


def test_image_label_count_mismatch(tmp_path):
    arrays = write_mnist_dir(tmp_path)
    labels = idx_path(tmp_path, "y_train")
    labels.write_bytes(gzip.compress(idx_bytes(arrays["y_train"][:-1])))
    with pytest.raises(DatasetError, match="12 images but 11 labels") as caught:
        load_mnist(tmp_path)
    assert str(labels) in str(caught.value)


def test_label_out_of_range(tmp_path):
    write_mnist_dir(tmp_path)
    labels = idx_path(tmp_path, "y_test")
    labels.write_bytes(gzip.compress(idx_bytes(np.array([1, 2, 10, 3, 4]))))
    with pytest.raises(DatasetError, match=r"label 10 is outside 0\.\.9") as caught:
        load_mnist(tmp_path)
    assert str(labels) in str(caught.value)


def test_missing_directory_lists_where_it_looked(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(DatasetError) as caught:
        load_fashion_mnist(missing)
    message = str(caught.value)
    for key in ("x_train", "y_train", "x_test", "y_test"):
        for gz in (True, False):
            assert str(idx_path(missing, key, gz=gz)) in message
    assert "apt-get install dataset-fashion-mnist" in message


def test_one_missing_file_is_named(tmp_path):
    write_mnist_dir(tmp_path)
    idx_path(tmp_path, "y_test").unlink()
    with pytest.raises(DatasetError) as caught:
        load_mnist(tmp_path)
    message = str(caught.value)
    assert str(idx_path(tmp_path, "y_test")) in message
    assert "train-images" not in message


# --- CIFAR-10 -------------------------------------------------------------------------------

CIFAR_NAMES = [
    b"airplane", b"automobile", b"bird", b"cat", b"deer",
    b"dog", b"frog", b"horse", b"ship", b"truck",
]  # fmt: skip
CIFAR_BATCHES = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]


def cifar_pickle(obj: dict, *, numpy1: bool) -> bytes:
    """Pickle like the official files; numpy1 names numpy.core as numpy 1.x wrote it."""
    raw = pickle.dumps(obj, protocol=2)
    return raw.replace(b"numpy._core.multiarray", b"numpy.core.multiarray") if numpy1 else raw


def cifar_files(per_batch: int = 10) -> dict[str, bytes]:
    rng = np.random.default_rng(2)
    files = {"batches.meta": cifar_pickle({b"label_names": CIFAR_NAMES}, numpy1=False)}
    for number, name in enumerate(CIFAR_BATCHES):
        batch = {
            b"batch_label": f"batch {number}".encode(),
            b"labels": [int(v) for v in rng.integers(0, 10, per_batch)],
            b"data": rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8),
            b"filenames": [f"img_{number}_{i}.png".encode() for i in range(per_batch)],
        }
        files[name] = cifar_pickle(batch, numpy1=name == "test_batch")
    return files


def write_cifar_dir(parent: Path, files: dict[str, bytes]) -> Path:
    directory = parent / "cifar-10-batches-py"
    directory.mkdir(parents=True)
    for name, raw in files.items():
        (directory / name).write_bytes(raw)
    return directory


def write_cifar_tar(path: Path, files: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, raw in files.items():
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))
    return path


def batch_of(files: dict[str, bytes], name: str) -> dict:
    return pickle.loads(files[name], encoding="bytes")


def assert_cifar(dataset, files: dict[str, bytes]) -> None:
    data = np.concatenate([batch_of(files, n)[b"data"] for n in CIFAR_BATCHES[:5]])
    labels = [label for n in CIFAR_BATCHES[:5] for label in batch_of(files, n)[b"labels"]]
    test = batch_of(files, "test_batch")
    for x, y, want_data, want_labels in (
        (dataset.x_train, dataset.y_train, data, labels),
        (dataset.x_test, dataset.y_test, test[b"data"], test[b"labels"]),
    ):
        assert x.shape == (len(want_data), 32, 32, 3)
        assert x.dtype == np.uint8
        i, r, c, ch = np.indices(x.shape)
        np.testing.assert_array_equal(x, want_data[i, ch * 1024 + r * 32 + c])
        np.testing.assert_array_equal(y, want_labels)
        assert y.dtype == np.int64
    assert dataset.class_names == tuple(n.decode() for n in CIFAR_NAMES)


@pytest.mark.parametrize("where", ["batches_dir", "parent_dir", "tar_gz"])
def test_cifar10_round_trip(tmp_path, where):
    files = cifar_files()
    if where == "tar_gz":
        path = write_cifar_tar(tmp_path / "cifar-10-python.tar.gz", files)
    else:
        directory = write_cifar_dir(tmp_path, files)
        path = directory if where == "batches_dir" else tmp_path
    assert_cifar(load_cifar10(path), files)


def test_cifar10_missing_batch(tmp_path):
    directory = write_cifar_dir(tmp_path, cifar_files())
    (directory / "data_batch_3").unlink()
    with pytest.raises(DatasetError, match=re.escape(str(directory / "data_batch_3"))):
        load_cifar10(tmp_path)


def test_cifar10_tar_missing_member(tmp_path):
    files = cifar_files()
    del files["test_batch"]
    path = write_cifar_tar(tmp_path / "cifar.tar.gz", files)
    with pytest.raises(DatasetError, match="cifar-10-batches-py/test_batch"):
        load_cifar10(path)


def replace_batch(files: dict[str, bytes], name: str, **changes) -> None:
    batch = batch_of(files, name)
    batch.update({key.encode(): value for key, value in changes.items()})
    files[name] = cifar_pickle(batch, numpy1=False)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"data": np.zeros((10, 3071), np.uint8)}, "should be a uint8 array of shape"),
        ({"data": np.zeros((10, 3072), np.int32)}, "should be a uint8 array of shape"),
        ({"labels": [0] * 9}, "10 images but 9 labels"),
        ({"labels": [0] * 9 + [10]}, r"label 10 is outside 0\.\.9"),
    ],
)
def test_cifar10_bad_batch_is_named(tmp_path, changes, message):
    files = cifar_files()
    replace_batch(files, "data_batch_2", **changes)
    directory = write_cifar_dir(tmp_path, files)
    with pytest.raises(DatasetError, match=message) as caught:
        load_cifar10(directory)
    assert str(directory / "data_batch_2") in str(caught.value)


class RunsCommand:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        import os

        return os.system, (f"touch {self.marker}",)


@pytest.mark.parametrize(
    "payload",
    [
        lambda marker: pickle.dumps({b"data": RunsCommand(marker)}, protocol=2),
        lambda marker: b"\x80\x02cbuiltins\neval\nX\x04\x00\x00\x001+1q\x00\x85R.",
        # _codecs.encode is allowed for bytes literals, but only with latin-1
        lambda marker: b"\x80\x02c_codecs\nencode\nX\x01\x00\x00\x00xX\x04\x00\x00\x00zlib\x86R.",
    ],
)
def test_cifar10_refuses_foreign_globals(tmp_path, payload):
    marker = tmp_path / "pwned"
    files = cifar_files()
    files["data_batch_1"] = payload(marker)
    directory = write_cifar_dir(tmp_path, files)
    with pytest.raises(DatasetError, match="refusing") as caught:
        load_cifar10(directory)
    assert str(directory / "data_batch_1") in str(caught.value)
    assert not marker.exists()


# --- Real data ------------------------------------------------------------------------------


@pytest.mark.skipif(
    not FASHION_MNIST_DIR.is_dir(), reason="needs apt-get install dataset-fashion-mnist"
)
def test_fashion_mnist_debian_files():
    dataset = load_fashion_mnist()
    assert dataset.x_train.shape == (60000, 28, 28)
    assert dataset.x_test.shape == (10000, 28, 28)
    assert dataset.x_train.dtype == dataset.x_test.dtype == np.uint8
    for labels, per_class in ((dataset.y_train, 6000), (dataset.y_test, 1000)):
        assert labels.dtype == np.int64
        assert np.bincount(labels).tolist() == [per_class] * 10
    assert dataset.class_names == FASHION_MNIST_CLASSES
    assert len(dataset.class_names) == 10


def test_mnist_sample_is_fixed():
    first, second = load_mnist_sample(), load_mnist_sample()
    assert first.x_train.shape == (4000, 28, 28)
    assert first.x_test.shape == (1000, 28, 28)
    assert first.x_train.dtype == np.uint8
    assert first.y_train.dtype == np.int64
    assert set(np.unique(first.y_test)) == set(range(10))
    for key in ("x_train", "y_train", "x_test", "y_test"):
        np.testing.assert_array_equal(getattr(first, key), getattr(second, key))
