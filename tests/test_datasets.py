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
from PIL import Image

from gpcnn.datasets import (
    FASHION_MNIST_CLASSES,
    FASHION_MNIST_DIR,
    DatasetError,
    ImageFolder,
    load_cifar10,
    load_cifar10_files,
    load_fashion_mnist,
    load_image_folder,
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
    b"airplane",
    b"automobile",
    b"bird",
    b"cat",
    b"deer",
    b"dog",
    b"frog",
    b"horse",
    b"ship",
    b"truck",
]
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


def write_cifar(tmp_path: Path, files: dict[str, bytes], where: str) -> Path:
    """The files as the tar.gz, its batches directory, or the directory holding that one."""
    if where == "tar_gz":
        return write_cifar_tar(tmp_path / "cifar-10-python.tar.gz", files)
    directory = write_cifar_dir(tmp_path, files)
    return directory if where == "batches_dir" else tmp_path


@pytest.mark.parametrize("where", ["batches_dir", "parent_dir", "tar_gz"])
def test_cifar10_round_trip(tmp_path, where):
    files = cifar_files()
    assert_cifar(load_cifar10(write_cifar(tmp_path, files, where)), files)


@pytest.mark.parametrize("where", ["batches_dir", "tar_gz"])
def test_cifar10_files_as_a_source_read_the_same_images_one_file_at_a_time(tmp_path, where):
    path = write_cifar(tmp_path, cifar_files(), where)
    arrays = load_cifar10(path)
    for split, x, y in (
        ("train", arrays.x_train, arrays.y_train),
        ("test", arrays.x_test, arrays.y_test),
    ):
        source = load_cifar10_files(path, split)
        assert len(source) == len(y) and source.image_shape == (32, 32, 3)
        assert source.class_names == arrays.class_names
        np.testing.assert_array_equal(source.labels, y)
        batches = list(source.batches(7, progress=False))
        assert max(len(b) for b, _ in batches) == 7
        np.testing.assert_array_equal(np.concatenate([b for b, _ in batches]), x)
        np.testing.assert_array_equal(np.concatenate([c for _, c in batches]), y)
    with pytest.raises(DatasetError, match="split must be"):
        load_cifar10_files(path, "validation")


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


# --- Image folders --------------------------------------------------------------------------

# Seven tiny solid-colour images in three classes, of different sizes, modes and formats:
# file name -> (class, PIL mode, (width, height), colour in that mode, format).
IMAGES = {
    "b0.png": ("bird", "RGB", (6, 4), (10, 20, 30), "PNG"),
    "b1.JPG": ("bird", "RGB", (8, 8), (200, 100, 50), "JPEG"),
    "c0.png": ("cat", "L", (4, 6), 77, "PNG"),
    "c1.png": ("cat", "RGBA", (3, 3), (40, 50, 60, 128), "PNG"),
    "c2.jpeg": ("cat", "L", (8, 16), 150, "JPEG"),
    "d0.PNG": ("dog", "P", (4, 4), 1, "PNG"),  # palette entry 1 is (90, 180, 20)
    "d1.png": ("dog", "RGB", (2, 9), (250, 0, 5), "PNG"),
}
IMAGE_CLASSES = ("bird", "cat", "dog")


def solid_image(name: str) -> Image.Image:
    _, mode, size, colour, _ = IMAGES[name]
    image = Image.new(mode, size, colour)
    if mode == "P":
        image.putpalette([0, 0, 0, 90, 180, 20])
    return image


def write_image_folder(root: Path) -> Path:
    """The seven images, plus files and folders the reader must ignore."""
    for name, (class_name, *_, image_format) in IMAGES.items():
        (root / class_name).mkdir(parents=True, exist_ok=True)
        solid_image(name).save(root / class_name / name, format=image_format)
    (root / "cat" / "notes.txt").write_text("not an image")
    solid_image("b0.png").save(root / "bird" / "b2.gif", format="GIF")
    solid_image("b0.png").save(root / "dog" / ".hidden.png")
    (root / "dog" / "nested").mkdir()
    solid_image("b0.png").save(root / "dog" / "nested" / "deeper.png")
    (root / ".cache").mkdir()
    solid_image("b0.png").save(root / ".cache" / "hidden-class.png")
    solid_image("b0.png").save(root / "loose.png")
    return root


@pytest.fixture
def image_folder(tmp_path) -> Path:
    return write_image_folder(tmp_path / "images")


def expected_pixel(name: str, color: str) -> np.ndarray:
    converted = solid_image(name).convert("RGB" if color == "rgb" else "L")
    return np.array(converted.getpixel((0, 0)), np.uint8).reshape(-1)


def test_image_folder_lists_classes_and_labels(image_folder):
    folder = load_image_folder(image_folder, (5, 7))
    assert isinstance(folder, ImageFolder)
    assert folder.path == image_folder
    assert folder.class_names == IMAGE_CLASSES
    assert folder.image_shape == (5, 7, 3)
    assert len(folder) == len(IMAGES)
    assert sorted(file.name for file, _ in folder.files) == sorted(IMAGES)
    for file, label in folder.files:
        assert file.parent == image_folder / IMAGES[file.name][0]
        assert label == IMAGE_CLASSES.index(IMAGES[file.name][0])
        assert isinstance(label, int)
    with pytest.raises(AttributeError):
        folder.batch_size = 1


@pytest.mark.parametrize(("color", "channels"), [("rgb", 3), ("gray", 1)])
def test_image_folder_pixels(image_folder, color, channels):
    folder = load_image_folder(image_folder, (5, 7), color)
    assert folder.image_shape == (5, 7, channels)
    x, y = folder.to_arrays(progress=False)
    assert x.shape == (len(IMAGES), 5, 7, channels)
    assert x.dtype == np.uint8
    assert y.dtype == np.int64
    np.testing.assert_array_equal(y, [label for _, label in folder.files])
    for image, (file, _) in zip(x, folder.files, strict=True):
        want = np.broadcast_to(expected_pixel(file.name, color), image.shape)
        if IMAGES[file.name][4] == "PNG":  # lossless: the solid colour survives the resize
            np.testing.assert_array_equal(image, want, err_msg=file.name)
        else:
            np.testing.assert_allclose(image, want, atol=4, err_msg=file.name)


def test_image_folder_resizes_bilinear_to_height_width(tmp_path):
    gradient = Image.fromarray(np.arange(6 * 10, dtype=np.uint8).reshape(6, 10) * 4)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    gradient.save(tmp_path / "a" / "gradient.png")
    solid_image("c0.png").save(tmp_path / "b" / "solid.png")
    folder = load_image_folder(tmp_path, (3, 8), "gray")
    x, _ = folder.to_arrays(progress=False)
    row = [file.name for file, _ in folder.files].index("gradient.png")
    want = np.asarray(gradient.resize((8, 3), Image.Resampling.BILINEAR))  # PIL takes (W, H)
    np.testing.assert_array_equal(x[row, :, :, 0], want)


def test_image_folder_shuffle_depends_on_seed_only(image_folder):
    first = load_image_folder(image_folder, (2, 2), seed=0)
    again = load_image_folder(image_folder, (2, 2), seed=0)
    other = load_image_folder(image_folder, (2, 2), seed=1)
    assert first.files == again.files
    assert first.files != other.files
    assert sorted(first.files) == sorted(other.files)
    labels = [label for _, label in first.files]
    assert labels != sorted(labels)  # shuffled, not left in class order


@pytest.mark.parametrize(
    ("batch_size", "sizes"), [(3, [3, 3, 1]), (1, [1] * 7), (7, [7]), (100, [7])]
)
def test_image_folder_batch_sizes(image_folder, batch_size, sizes):
    folder = load_image_folder(image_folder, (3, 4), batch_size=batch_size)
    batches = list(folder.batches(progress=False))
    assert [len(x) for x, _ in batches] == sizes
    assert [len(y) for _, y in batches] == sizes
    x_all, y_all = folder.to_arrays(progress=False)
    np.testing.assert_array_equal(np.concatenate([x for x, _ in batches]), x_all)
    np.testing.assert_array_equal(np.concatenate([y for _, y in batches]), y_all)


def test_image_folder_batches_are_lazy(image_folder):
    folder = load_image_folder(image_folder, (4, 4), batch_size=3)
    last = folder.files[-1][0]
    last.write_bytes(b"not an image")  # after listing: only the last batch decodes it
    batches = folder.batches(progress=False)
    assert [len(next(batches)[0]), len(next(batches)[0])] == [3, 3]
    with pytest.raises(DatasetError, match=re.escape(str(last))):
        next(batches)


def truncated_png(path: Path) -> None:
    noise = np.random.default_rng(3).integers(0, 256, (16, 16), dtype=np.uint8)
    Image.fromarray(noise).save(path)  # noise barely compresses: half the file cuts its pixels
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) // 2])


def gif_named_png(path: Path) -> None:
    solid_image("b0.png").save(path, format="GIF")


def garbage(path: Path) -> None:
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + b"garbage" * 10)


@pytest.mark.parametrize("corrupt", [truncated_png, gif_named_png, garbage])
def test_image_folder_undecodable_file_is_named(image_folder, corrupt):
    bad = image_folder / "cat" / "c0.png"
    corrupt(bad)
    folder = load_image_folder(image_folder, (4, 4))  # listing decodes nothing
    with pytest.raises(DatasetError, match="cannot decode") as caught:
        folder.to_arrays(progress=False)
    assert str(bad) in str(caught.value)


def test_image_folder_progress_bar(image_folder, capsys):
    folder = load_image_folder(image_folder, (2, 2))
    folder.to_arrays(progress=False)
    assert capsys.readouterr().err == ""
    folder.to_arrays(progress=True)
    err = capsys.readouterr().err
    assert "/7" in err
    assert "file" in err


def test_image_folder_accepts_numpy_sizes(image_folder):
    folder = load_image_folder(image_folder, (np.int64(3), np.int32(2)), batch_size=np.int64(2))
    assert folder.image_shape == (3, 2, 3)
    assert all(type(side) is int for side in folder.image_shape)
    assert folder.batch_size == 2


def test_image_folder_missing_path(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(DatasetError, match="no such folder") as caught:
        load_image_folder(missing, (4, 4))
    assert str(missing) in str(caught.value)


def test_image_folder_path_is_a_file(tmp_path):
    file = tmp_path / "image.png"
    solid_image("b0.png").save(file)
    with pytest.raises(DatasetError, match="not a folder") as caught:
        load_image_folder(file, (4, 4))
    assert str(file) in str(caught.value)


def test_image_folder_without_class_folders(tmp_path):
    solid_image("b0.png").save(tmp_path / "loose.png")
    (tmp_path / ".hidden").mkdir()
    solid_image("b0.png").save(tmp_path / ".hidden" / "image.png")
    with pytest.raises(DatasetError, match="no class sub-folders") as caught:
        load_image_folder(tmp_path, (4, 4))
    assert str(tmp_path) in str(caught.value)


def test_image_folder_class_without_images_is_named(image_folder):
    empty = image_folder / "empty"
    (empty / "nested").mkdir(parents=True)
    (empty / "readme.txt").write_text("no images here")
    solid_image("b0.png").save(empty / ".hidden.png")
    solid_image("b0.png").save(empty / "nested" / "deeper.png")
    with pytest.raises(DatasetError, match="class 'empty' has no images") as caught:
        load_image_folder(image_folder, (4, 4))
    assert str(empty) in str(caught.value)


def test_image_folder_refuses_a_single_class(tmp_path):
    (tmp_path / "cat").mkdir()
    solid_image("c0.png").save(tmp_path / "cat" / "c0.png")
    with pytest.raises(DatasetError, match=r"only one class sub-folder \('cat'\)"):
        load_image_folder(tmp_path, (4, 4))


@pytest.mark.parametrize(
    "size", [(0, 4), (4, -1), (4,), (4, 4, 4), (4.0, 4), (True, 4), "44", 4, None]
)
def test_image_folder_bad_size(image_folder, size):
    with pytest.raises(DatasetError, match="size must be"):
        load_image_folder(image_folder, size)


@pytest.mark.parametrize("color", ["RGB", "grey", "cmyk", None])
def test_image_folder_bad_color(image_folder, color):
    with pytest.raises(DatasetError, match="color must be one of"):
        load_image_folder(image_folder, (4, 4), color)


@pytest.mark.parametrize("batch_size", [0, -2, 1.5, True])
def test_image_folder_bad_batch_size(image_folder, batch_size):
    with pytest.raises(DatasetError, match="batch_size must be a positive integer"):
        load_image_folder(image_folder, (4, 4), batch_size=batch_size)


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
