"""Big models: vectors in chunks everywhere — the start sent to the segments, the
trained vectors coming back, their merge, the stored checkpoints — exercised with 64 KB chunks and
a 1M-weight model; statement texts that stay small whatever the model's size; image counts past
2**24, where MADlib's float32 count stops being exact."""

from __future__ import annotations

import math
import re
import threading
import time

import numpy as np
import pytest
import sqlalchemy as sa
from conftest import TEST_SCHEMA, database_url
from test_training import estimator, reference, shards

import gpcnn
from gpcnn.data.tables import load_images, read_images
from gpcnn.engines import migrations
from gpcnn.engines.catalog import Catalog
from gpcnn.engines.copying import BinaryRows, chunk_rows
from gpcnn.engines.streaming import AVERAGE_LEAD_CHUNKS, StreamingAverage
from gpcnn.fit import runs
from gpcnn.fit.diagnostics import flat_row
from gpcnn.fit.storage import Retention
from gpcnn.kernel import keras_setup, segment, states, wire
from gpcnn.tools import embedded

keras = keras_setup.keras_module()

CHUNK_BYTES = 64 << 10
DATA_SCHEMA = "gpcnn_big_models_test"
STATEMENT_LIMIT = 10_000


def wide_model():
    """About 1M weights (4 MB): 63 chunks of 64 KB."""
    keras.utils.set_random_seed(5)
    return keras.Sequential(
        [
            keras.Input((8, 8, 1)),
            keras.layers.Flatten(),
            keras.layers.Dense(15_000, activation="relu"),
            keras.layers.Dense(3, activation="softmax"),
        ]
    )


@pytest.fixture(scope="module")
def chunked(db):
    """The test database in each dispatch mode, with 64 KB chunks."""
    db = gpcnn.connect(
        database_url(),
        schema=TEST_SCHEMA,
        dispatch=db.dispatch,
        chunk_bytes=CHUNK_BYTES,
    )
    yield db
    db.close()


@pytest.fixture(scope="module")
def table(chunked):
    rng = np.random.default_rng(8)
    labels = rng.integers(0, 3, 120)
    images = rng.integers(0, 120, (120, 8, 8), dtype=np.uint8)
    for c in range(3):
        images[labels == c, :, c * 2 : c * 2 + 3] += 120
    name = f"{DATA_SCHEMA}.wide"
    load_images(
        chunked, name, images, labels, segments=2, buffer_size=20, replace=True, progress=False
    )
    return name


@pytest.mark.slow
def test_a_multi_chunk_model_trains_to_the_reference_and_resumes_from_chunks(chunked, table):
    model = wide_model()
    assert sum(wire.sizes(wire.manifest(model))) > 1_000_000
    with estimator(chunked, TEST_SCHEMA, model, iterations=2, validation_table=table) as whole:
        whole.fit(table)
    got = wire.flatten(whole.model_.get_weights())
    expected = reference(model, shards(chunked, TEST_SCHEMA, table), 2)
    np.testing.assert_allclose(got, expected, atol=1e-6, rtol=0)
    assert whole.history_[-1]["images"] == 120

    with chunked.connect() as conn:
        count, largest = conn.execute(
            sa.text(
                f"SELECT count(*), max(octet_length(data)) FROM {TEST_SCHEMA}.checkpoints "
                "WHERE run_id = :r AND iteration = 2 AND part = 'weights'"
            ),
            {"r": whole.run_id_},
        ).one()
        left = conn.execute(sa.text(f"SELECT count(*) FROM {TEST_SCHEMA}.transfers")).scalar()
    assert count == math.ceil(got.nbytes / CHUNK_BYTES) and largest <= CHUNK_BYTES
    assert left == 0  # every statement's transfer is deleted after it

    with estimator(chunked, TEST_SCHEMA, model, iterations=1) as first:
        first.fit(table)
    with estimator(chunked, TEST_SCHEMA, model, iterations=2) as resumed:
        resumed.fit(table, resume=first.run_id_)
    np.testing.assert_array_equal(wire.flatten(resumed.model_.get_weights()), got)


def test_one_statement_merges_in_the_client_or_in_the_database_to_the_same_bits(db):
    """Below the backend's ``database_merge_bytes`` one statement's K trained vectors reach the
    client, which averages them as they arrive (the keys of one stream, unpaced) and streams the
    checkpoint meanwhile; above it the segments merge them chunk by chunk. Greenplum takes the
    first at 1M weights, K = 2, and the second past 64 MB: the same model, history and checkpoint
    either way, and the in-process reference."""
    db = gpcnn.connect(
        database_url(), schema=TEST_SCHEMA, dispatch="statement", chunk_bytes=CHUNK_BYTES
    )
    name = f"{DATA_SCHEMA}.wide_statement"
    rng = np.random.default_rng(9)
    images = rng.integers(0, 250, (40, 8, 8), dtype=np.uint8)
    load_images(
        db,
        name,
        images,
        rng.integers(0, 3, 40),
        segments=2,
        buffer_size=10,
        replace=True,
        progress=False,
    )
    model = wide_model()
    assert not db.backend.merges_in_database(2, sum(wire.sizes(wire.manifest(model))))
    fits = {}
    default = type(db.backend).database_merge_bytes
    try:
        for place, limit in (("client", default), ("database", 0)):
            db.backend.database_merge_bytes = limit
            with estimator(db, TEST_SCHEMA, model, iterations=2, merge="average") as est:
                est.fit(name)
            fits[place] = est
    finally:
        db.backend.database_merge_bytes = default
    here, there = (wire.flatten(fits[p].model_.get_weights()) for p in ("client", "database"))
    np.testing.assert_array_equal(here, there)
    untimed = [
        [{k: v for k, v in flat_row(row).items() if "seconds" not in k} for row in fits[p].history_]
        for p in ("client", "database")
    ]
    assert untimed[0] == untimed[1]  # the diagnostics too: spread and steps, bit for bit
    np.testing.assert_allclose(here, reference(model, shards(db, TEST_SCHEMA, name), 2), atol=1e-6)
    with db.connect() as conn:
        stored = Catalog(conn, db.backend).checkpoint(fits["client"].run_id_, 2)
    np.testing.assert_array_equal(stored["weights"], here)


def test_a_multi_chunk_model_predicts_as_keras_does_into_arrays_and_into_a_table(chunked, table):
    """Prediction receives its weights in chunks, as training its start (never one
    value, so no size limit below training's): the 63-chunk model predicts each image of both
    keys as Keras does, back to the client and written into a table; no transfer stays."""
    model = wide_model()
    x, _, ids = read_images(chunked, table, ids=True)
    local = np.asarray(model.predict(segment.to_model_input(x), verbose=0))
    back = gpcnn.predict(chunked, model, table, pred_type="prob", threads_per_segment=1)
    np.testing.assert_allclose(back, local, atol=1e-6)
    out = f"{DATA_SCHEMA}.wide_predicted"
    gpcnn.predict(chunked, model, table, output_table=out, pred_type="topk", top_k=2, replace=True)
    with chunked.connect() as conn:
        rows = conn.execute(sa.text(f"SELECT id, rank, class_value, prob FROM {out}")).all()
        left = conn.execute(sa.text(f"SELECT count(*) FROM {TEST_SCHEMA}.transfers")).scalar()
    by_id = dict(zip(ids.tolist(), local, strict=True))
    assert len(rows) == 2 * len(ids) and left == 0
    for r in rows:
        order = np.argsort(-by_id[r.id], kind="stable")
        assert r.class_value == int(order[r.rank - 1])
        assert r.prob == pytest.approx(float(by_id[r.id][r.class_value]), abs=1e-6)


def _statements(log: str) -> list[str]:
    """The statement texts ``log_statement = 'all'`` wrote (log_line_prefix '%m [%p] ')."""
    entries = re.split(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+ \w+ \[\d+\] ", log, flags=re.M)
    marker = "LOG:  statement: "
    return [e.split(marker, 1)[1] for e in entries if e.startswith(marker)]


@pytest.mark.skipif(database_url() is not None, reason="reads the embedded cluster's server log")
def test_statement_texts_stay_small_whatever_the_model_size(chunked, table):
    """Weights travel by COPY, as data: every statement of a fit (training, merge, validation,
    storage) and of a prediction stays under 10 KB with a 4 MB model, whose weights as a literal
    would take 8 MB."""
    path = str(embedded.cluster().log_file)
    admin = chunked.engine.execution_options(isolation_level="AUTOCOMMIT")

    def configure(statement: str) -> int:
        with admin.connect() as conn:
            conn.exec_driver_sql(statement)
            conn.exec_driver_sql("SELECT pg_reload_conf()")
            time.sleep(1)  # the reload reaches the sessions asynchronously
            return conn.execute(sa.text("SELECT (pg_stat_file(:p)).size"), {"p": path}).scalar()

    start = configure("ALTER SYSTEM SET log_statement = 'all'")
    try:
        with estimator(
            chunked, TEST_SCHEMA, wide_model(), iterations=2, validation_table=table
        ) as est:
            est.fit(table)
            est.predict_proba(table)
    finally:
        end = configure("ALTER SYSTEM RESET log_statement")
    with admin.connect() as conn:
        log = conn.execute(
            sa.text("SELECT pg_read_file(:p, :start, :length)"),
            {"p": path, "start": start, "length": end - start},
        ).scalar()
    statements = _statements(log)
    assert any("state_chunks" in s for s in statements), "the training statements were logged"
    assert any(".predict(" in s for s in statements), "the prediction statement was logged"
    assert any(s.startswith("COPY ") and ".transfers" in s for s in statements)
    longest = max(statements, key=len)
    assert len(longest) < STATEMENT_LIMIT, longest[:300]


def test_merges_keep_counts_exact_beyond_float32(db):
    """Counts of 2**24 + 1 and more: float32 (MADlib's count) rounds them, the merge must not.
    The in-database chunk merge, the client's merge of K sessions' results and the small
    states agree with the exact float64 average."""
    big = 2**24 + 1
    counts = [big, 1, 2]
    vectors = [
        np.array([1.0, 0.5, -3.0, 1e-3], dtype=np.float32),
        np.array([0.0, 0.25, 7.0, 2.0], dtype=np.float32),
        np.array([3.0, -1.0, 0.0, 5.0], dtype=np.float32),
    ]
    assert np.float32(big) + np.float32(1) + np.float32(2) != big + 3  # float32 loses them
    exact = (
        sum(v.astype(np.float64) * n for v, n in zip(vectors, counts, strict=True)) / sum(counts)
    ).astype(np.float32)
    small = [states.encode_state({"count": n, "sums": {"loss": 0.5 * n}}) for n in counts]

    with db.connect() as conn:
        rows = conn.execute(
            sa.text(
                f"SELECT chunk, {TEST_SCHEMA}.merge_chunks(chunk, count, data ORDER BY key) "
                "FROM unnest(CAST(:keys AS integer[]), CAST(:chunks AS integer[]), "
                "CAST(:counts AS bigint[]), CAST(:data AS bytea[])) AS s(key, chunk, count, data) "
                "GROUP BY chunk ORDER BY chunk"
            ),
            {
                "keys": [0, 1, 2, 0, 1, 2],
                "chunks": [-1, -1, -1, 0, 0, 0],
                "counts": counts * 2,
                "data": small + [v.tobytes() for v in vectors],
            },
        ).all()
    merged_state = states.decode_state(bytes(rows[0][1]))
    assert merged_state["count"] == big + 3
    assert merged_state["sums"]["loss"] == 0.5 * (big + 3)
    np.testing.assert_array_equal(np.frombuffer(bytes(rows[1][1]), dtype="<f4"), exact)

    client_merge = StreamingAverage([2, 0, 1], chunk_values=vectors[0].size)
    for key in (2, 0, 1):  # in any order of arrival
        values = states.encode_state({**states.decode_state(small[key]), "values": vectors[0].size})
        client_merge.add((key, -1, counts[key], values))
    for key in (1, 2, 0):
        client_merge.add((key, 0, counts[key], memoryview(vectors[key].tobytes())))
    client_merge.close()
    client = client_merge.result()
    np.testing.assert_array_equal(client.vector, exact)
    assert client.metrics == {"images": big + 3, "loss": 0.5}


def _stream(merger: StreamingAverage, key: int, count: int, vector: np.ndarray, chunk: int):
    """What one key's result stream hands the merge: its state, then its chunks in order."""
    state = states.encode_state({"count": count, "sums": {"loss": 0.0}, "values": vector.size})
    merger.add((key, -1, count, state))
    for index, start in enumerate(range(0, vector.size, chunk)):
        merger.add((key, index, count, memoryview(vector[start : start + chunk].tobytes())))


def _streams(chunks: int = 12, chunk: int = 5):
    rng = np.random.default_rng(3)
    vectors = {key: rng.normal(size=chunks * chunk).astype(np.float32) for key in (0, 1)}
    counts = {0: 3, 1: 5}
    exact = ((vectors[0].astype(np.float64) * 3 + vectors[1].astype(np.float64) * 5) / 8).astype(
        np.float32
    )
    return vectors, counts, exact


def test_the_client_merge_makes_a_stream_that_runs_ahead_wait_for_the_slowest():
    """Key 0's stream arrives whole before key 1's starts: it waits a few chunks ahead (its
    segment holds its vector anyway) instead of the client holding all of it."""
    vectors, counts, exact = _streams()
    merger = StreamingAverage([0, 1], chunk_values=5)
    ahead = threading.Thread(target=_stream, args=(merger, 0, counts[0], vectors[0], 5))
    ahead.start()
    time.sleep(0.3)
    assert ahead.is_alive(), "the stream ahead should wait for the slowest one"
    assert len(merger._waiting) == AVERAGE_LEAD_CHUNKS  # what the client holds meanwhile
    _stream(merger, 1, counts[1], vectors[1], 5)
    ahead.join(10)
    assert not ahead.is_alive()
    merger.close()
    np.testing.assert_array_equal(merger.result().vector, exact)


def test_the_client_merge_writes_into_the_vector_it_is_given_when_it_fits():
    vectors, counts, exact = _streams()
    into = np.zeros(exact.size, dtype=np.float32)
    for target, expect_into in ((into, True), (np.zeros(3, dtype=np.float32), False)):
        merger = StreamingAverage([0, 1], chunk_values=5, into=target)
        threads = [
            threading.Thread(target=_stream, args=(merger, k, counts[k], vectors[k], 5))
            for k in (0, 1)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
        merger.close()
        got = merger.result().vector
        np.testing.assert_array_equal(got, exact)
        assert (got is target) == expect_into


def test_unpaced_the_client_merge_takes_the_keys_of_one_stream_one_after_the_other():
    vectors, counts, exact = _streams()
    merger = StreamingAverage([0, 1], chunk_values=5, paced=False)
    _stream(merger, 0, counts[0], vectors[0], 5)  # one thread: a wait here would never end
    _stream(merger, 1, counts[1], vectors[1], 5)
    merger.close()
    np.testing.assert_array_equal(merger.result().vector, exact)


def test_a_stream_that_breaks_off_releases_the_streams_waiting_for_it():
    """A failed statement's sink closes without the trailer; the stream waiting for it must go
    on (to be cancelled by the sessions), not hang the fit."""
    vectors, counts, _ = _streams()
    merger = StreamingAverage([0, 1], chunk_values=5)
    ahead = threading.Thread(target=_stream, args=(merger, 0, counts[0], vectors[0], 5))
    ahead.start()
    time.sleep(0.2)
    assert ahead.is_alive()
    stream = b"".join(chunk_rows(("integer",), [((1,), vectors[1][:5])], 5))
    with BinaryRows(("integer", "integer", "bytea"), on_end=merger.end_stream) as broken:
        broken.write(stream[:-2])  # no trailer: the statement failed mid-stream
    ahead.join(10)
    assert not ahead.is_alive()
    merger.close()
    with pytest.raises(ValueError, match=r"results of keys \[0\] came back for keys \[0, 1\]"):
        merger.result()


def test_a_binary_copy_sink_tells_whether_its_stream_ended_with_the_trailer():
    ends = []
    stream = b"".join(chunk_rows(("integer",), [((1,), np.arange(4, dtype="<f4"))], 2))
    for data in (stream, stream[:-2]):
        with BinaryRows(("integer", "integer", "bytea"), on_end=ends.append) as sink:
            sink.write(data)
    assert ends == [True, False]


def test_retention_keeps_the_last_the_best_and_every_kth():
    rows = [
        {"iteration": i, "loss": loss, "val_loss": val}
        for i, loss, val in [
            (1, 3.0, 2.0),
            (2, 2.0, 1.0),
            (3, 1.5, 1.5),
            (4, 1.0, 1.2),
            (5, 0.9, 1.4),
        ]
    ]
    assert Retention(every=2).keep(rows) == {5, 2, 4}  # last, best val_loss (2), every 2nd
    assert Retention(every=10).keep([{k: r[k] for k in ("iteration", "loss")} for r in rows]) == {5}
    assert Retention().keep([]) == set()


def test_a_run_stores_what_retention_keeps_and_shows_its_size(chunked, table):
    est = estimator(chunked, TEST_SCHEMA, wide_model(), iterations=3, validation_table=table)
    with est:
        est.fit(table)
    shown = runs.show_run(chunked, est.run_id_)
    expected = sorted(Retention().keep(est.history_))
    model_bytes = 4 * sum(wire.sizes(wire.manifest(est.model_)))
    assert shown["stored"]["weights"]["iterations"] == expected
    assert shown["stored"]["weights"]["bytes"] == model_bytes * len(expected)
    assert shown["stored"]["weights"]["chunks"] == len(expected) * math.ceil(
        model_bytes / CHUNK_BYTES
    )
    assert shown["checkpoints"] == len(expected)
    assert shown["stored_bytes"] == sum(p["bytes"] for p in shown["stored"].values())
    assert [r["iteration"] for r in shown["history"]] == [1, 2, 3]  # metrics are all kept
    runs.delete_runs(chunked, [est.run_id_])


def test_shape_2_vectors_move_into_chunked_checkpoints(db):
    """Upgrading keeps every stored vector: shape 2's one-value columns are cut into chunks."""
    schema = "gpcnn_migration_test"
    db = gpcnn.connect(database_url(), schema=schema, chunk_bytes=4096)
    weights = np.arange(2500, dtype="<f4")  # 10,000 bytes: three chunks of 4,096
    optimizer = np.arange(7, dtype="<f4")
    with db.begin() as conn:
        conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {schema}, {schema}_staging CASCADE")
        conn.exec_driver_sql(f"CREATE SCHEMA {schema}")
        conn.exec_driver_sql(f"CREATE TABLE {schema}.schema_version (version integer NOT NULL)")
        conn.exec_driver_sql(f"INSERT INTO {schema}.schema_version VALUES (2)")
        conn.exec_driver_sql(
            f"CREATE TABLE {schema}.run_iterations (run_id bigint, iteration integer, "
            "metrics text NOT NULL, weights bytea NOT NULL, rule_state bytea, optimizer bytea, "
            "created_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (run_id, iteration))"
        )
        conn.exec_driver_sql(
            f"CREATE TABLE {schema}.segment_models (run_id bigint, __dist_key__ integer, "
            "iteration integer NOT NULL, weights bytea NOT NULL, optimizer bytea, "
            "PRIMARY KEY (run_id, __dist_key__))"
        )
        conn.execute(
            sa.text(
                f"INSERT INTO {schema}.run_iterations (run_id, iteration, metrics, weights, "
                "optimizer) VALUES (1, 1, '{}', :w, :o)"
            ),
            {"w": weights.tobytes(), "o": optimizer.tobytes()},
        )
        conn.execute(
            sa.text(
                f"INSERT INTO {schema}.segment_models VALUES (1, 0, 1, :w, NULL), (1, 1, 1, :w, :o)"
            ),
            {"w": weights.tobytes(), "o": optimizer.tobytes()},
        )
        Catalog(conn, db.backend).ensure_tables()
    with db.connect() as conn:
        assert Catalog(conn, db.backend).shape() == migrations.SHAPE_VERSION
        iteration, parts = Catalog(conn, db.backend).last_checkpoint(1)
        segments = Catalog(conn, db.backend).segment_starts(1)
        chunks = conn.execute(
            sa.text(f"SELECT count(*) FROM {schema}.checkpoints WHERE part = 'weights'")
        ).scalar()
        columns = conn.execute(
            sa.text(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = :s "
                "AND table_name = 'run_iterations'"
            ),
            {"s": schema},
        ).scalars()
        assert set(columns) == {"run_id", "iteration", "metrics", "created_at", "created_by"}
    assert chunks == 3 and iteration == 1
    np.testing.assert_array_equal(parts["weights"], weights)
    np.testing.assert_array_equal(parts["optimizer"], optimizer)
    assert "rule_state" not in parts
    np.testing.assert_array_equal(segments[0][0], weights)
    assert segments[0][1] is None
    np.testing.assert_array_equal(segments[1][1], optimizer)
    with db.begin() as conn:
        conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {schema}, {schema}_staging CASCADE")
    db.close()


@pytest.mark.parametrize("piece", [1, 7, 4096, 1 << 20])
def test_binary_copy_rows_round_trip_however_the_stream_is_cut(piece):
    """``chunk_rows`` writes what the server's binary COPY reads; ``BinaryRows`` parses what it
    writes, whether a message holds many rows or a row spans many messages."""
    vectors = [((7, -1), np.arange(10, dtype="<f4")), ((7, 3), np.arange(3, dtype="<f4") + 0.5)]
    stream = b"".join(chunk_rows(("bigint", "integer"), vectors, 4))
    sink = BinaryRows(("bigint", "integer", "integer", "bytea"))
    for start in range(0, len(stream), piece):
        sink.write(stream[start : start + piece])
    got = [(a, b, c, np.frombuffer(d, dtype="<f4").tolist()) for a, b, c, d in sink.rows]
    assert got == [
        (7, -1, 0, [0.0, 1.0, 2.0, 3.0]),
        (7, -1, 1, [4.0, 5.0, 6.0, 7.0]),
        (7, -1, 2, [8.0, 9.0]),
        (7, 3, 0, [0.5, 1.5, 2.5]),
    ]
