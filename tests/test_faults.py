"""Faults inside the database name where and why: an error raised by the in-database
Python, a segment's server process terminated mid-iteration; what was stored stays, and the run
resumes. Runs in both dispatch modes (see conftest)."""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
import time
from types import SimpleNamespace

import numpy as np
import psycopg2
import psycopg2.errors
import pytest
import sqlalchemy as sa
from threads import started
from tiny import break_segment, dense_net

from gpcnn import release_sessions
from gpcnn.data.tables import describe, load_images
from gpcnn.engines import copying, driver_reports
from gpcnn.estimator import GreenplumCNN, TrainingError
from gpcnn.fit import runs, training
from gpcnn.fit.database_errors import failure, once_more_if_lost
from gpcnn.kernel import keras_setup, wire

pytestmark = pytest.mark.every_dispatch

keras = keras_setup.keras_module()

DATA_SCHEMA = "gpcnn_faults_test"
TABLE = f"{DATA_SCHEMA}.train"


@pytest.fixture(scope="module")
def table(db):
    """2 segments of 1,200 images: with batch_size=2, an iteration lasts a few seconds."""
    rng = np.random.default_rng(5)
    labels = rng.integers(0, 3, 2400)
    images = rng.integers(0, 255, (2400, 8, 8), dtype=np.uint8)
    load_images(db, TABLE, images, labels, segments=2, replace=True, progress=False)
    return describe(db, TABLE)


def estimator(db, model, **params) -> GreenplumCNN:
    defaults = dict(batch_size=2, seed=1, database=db, threads_per_segment=1, verbose=0)
    return GreenplumCNN(model, **{**defaults, **params})


def test_an_error_raised_inside_the_database_names_the_segment_and_the_exception(db, table):
    broken = f"{DATA_SCHEMA}.broken"
    rng = np.random.default_rng(5)
    images, labels = rng.integers(0, 255, (40, 8, 8), dtype=np.uint8), rng.integers(0, 3, 40)
    info = load_images(db, broken, images, labels, segments=2, replace=True, progress=False)
    key = info.keys[0]
    break_segment(db, broken, key)
    est = estimator(db, dense_net(), iterations=1)
    with pytest.raises(TrainingError) as raised:
        est.fit(broken)  # the client finds nothing wrong; the segment cannot decode its rows
    error = raised.value
    assert error.segments == [key]
    message = str(error)
    # On Greenplum the place also names the Greenplum segment, host, port and process.
    assert re.search(
        rf"training failed in the database on segment {key}"
        r"( / Greenplum segment \d+ on \S+:\d+, pid \d+)?: ",
        message,
    )
    assert "ValueError" in message and "buffer size must be a multiple" in message
    assert "raised at gpcnn/kernel/segment.py" in message
    assert f"run {est.run_id_} stored no iteration" in message
    assert runs.load_run(db, est.run_id_).status == "failed"


def _training_pid(db, info, key: int, timeout: float = 120) -> int:
    """The server process of this client that is training segment ``key``: the one whose
    training statement holds a lock on the key's partition (the table's rows on Greenplum)."""
    rows = info.table.sql(db.backend)
    if db.backend.partitioned:
        rows = db.backend.partition(info.table, key).sql(db.backend)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with db.connect() as conn:  # a new transaction: pg_stat_activity is a snapshot
            pid = conn.execute(
                sa.text(
                    "SELECT a.pid FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid "
                    "WHERE a.application_name = :name AND a.pid <> pg_backend_pid() "
                    "AND a.state = 'active' AND a.query LIKE '%.train(%' "
                    "AND l.relation = to_regclass(:rows) AND l.granted"
                ),
                {"name": f"gpcnn/{os.getpid()}", "rows": rows},
            ).scalar()
        if pid is not None:
            return pid
        time.sleep(0.02)
    raise AssertionError(f"no training statement of segment {key} within {timeout} s")


def _stored_iterations(db, run_id: int) -> list[dict]:
    return runs.load_run(db, run_id).iterations


@pytest.mark.slow
def test_a_terminated_segment_backend_is_named_and_the_run_resumes(db, table, capfd):
    model = dense_net()
    est = estimator(db, model, iterations=3)
    fitting, raised = started(est.fit, TABLE)
    # One session per segment on PostgreSQL: terminate the second segment's; one for all otherwise.
    second = table.keys[1]
    victims = [second] if db.backend.per_segment_sessions else list(table.keys)
    deadline = time.monotonic() + 120
    while not (hasattr(est, "run_id_") and _stored_iterations(db, est.run_id_)):
        assert fitting.is_alive() and time.monotonic() < deadline, raised
        time.sleep(0.05)
    pid = _training_pid(db, table, second)  # in iteration 2 or 3
    with db.connect() as conn:
        assert conn.execute(sa.select(sa.func.pg_terminate_backend(pid))).scalar()
    fitting.join(120)
    assert not fitting.is_alive()
    (error,) = raised
    assert isinstance(error, TrainingError)
    assert error.segments == victims
    message = str(error)
    assert f"its server process (pid {pid}) was terminated" in message
    # The server's own reason, not libpq's "server closed the connection unexpectedly" that
    # psycopg2 raises after it (and once printed it, with a SystemError).
    assert "(terminating connection due to administrator command)" in message
    assert "pg_terminate_backend" in message
    # Nothing else: no trace printed by the driver or a thread (verbose=0: no log lines).
    assert capfd.readouterr().err == ""
    stored = _stored_iterations(db, est.run_id_)
    assert [r["iteration"] for r in stored] == [r["iteration"] for r in est.history_]
    assert f"run {est.run_id_} keeps iteration {len(stored)}: fit(table, resume=" in message
    assert runs.load_run(db, est.run_id_).status == "failed"

    resumed = estimator(db, model, iterations=3).fit(TABLE, resume=est.run_id_)
    assert [r["iteration"] for r in resumed.history_] == [1, 2, 3]
    assert runs.load_run(db, est.run_id_).status == "finished"
    whole = estimator(db, model, iterations=3).fit(TABLE)
    np.testing.assert_array_equal(
        wire.flatten(resumed.model_.get_weights()), wire.flatten(whole.model_.get_weights())
    )
    assert capfd.readouterr().err == ""


class _Cursor:
    """A DBAPI cursor whose ``copy_expert`` does what psycopg2's does when the server ends the
    session mid-COPY: prints (PyErr_Print: through sys.excepthook) what ``printed`` gives, then
    raises ``raised``, if any."""

    def __init__(self, printed, raised):
        self.printed, self.raised = printed, raised

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def copy_expert(self, sql, file, size):
        if self.printed is not None:
            sys.excepthook(type(self.printed), self.printed, None)
        if self.raised is not None:
            raise self.raised


def _driver_connection(printed=None, raised=None):
    return SimpleNamespace(cursor=lambda: _Cursor(printed, raised))


def _printed_by_psycopg2(server_error: BaseException) -> SystemError:
    printed = SystemError("<function decode at 0x1> returned a result with an exception set")
    printed.__cause__ = server_error
    return printed


def test_a_copy_ended_by_the_server_raises_its_error_and_prints_nothing(monkeypatch, capfd):
    """psycopg2 raises libpq's "server closed the connection unexpectedly" and prints
    the server's own error (chained to a SystemError); the server's is the one raised."""
    seen = []
    monkeypatch.setattr(sys, "excepthook", lambda *report: seen.append(report))
    server = psycopg2.errors.AdminShutdown("terminating connection due to administrator command")
    lost = psycopg2.OperationalError("server closed the connection unexpectedly")
    connection = _driver_connection(_printed_by_psycopg2(server), lost)
    with pytest.raises(psycopg2.errors.AdminShutdown) as raised:
        copying.copy(connection, "COPY t TO STDOUT", copying.BinaryRows(("integer",)))
    assert raised.value is server
    assert seen == [] and capfd.readouterr().err == ""
    assert sys.excepthook is not driver_reports.keep_driver_prints  # put back

    # The stream's own error still wins, with the server's as its cause.
    stream = copying.CopyStream(iter([]))
    stream.error = ValueError("bad images")
    connection = _driver_connection(_printed_by_psycopg2(server), lost)
    with pytest.raises(ValueError) as raised:
        copying.copy(connection, "COPY t FROM STDIN", stream)
    assert raised.value.__cause__ is server and seen == []


def test_what_the_driver_prints_that_no_error_carries_is_printed_after_the_copy(monkeypatch):
    """Nothing hidden: a report with no driver error in it, or printed by a COPY that then
    succeeded, reaches the hook that was in place, once the COPY ended."""
    seen = []
    monkeypatch.setattr(sys, "excepthook", lambda *report: seen.append(report[1]))
    other = RuntimeError("not the driver's")
    copying.copy(_driver_connection(other), "COPY t TO STDOUT", copying.BinaryRows(("integer",)))
    assert seen == [other]
    # Another thread's report during a COPY goes straight to that hook.
    printed = threading.Event()

    class Reporting(_Cursor):
        def copy_expert(self, sql, file, size):
            reporter = threading.Thread(target=sys.excepthook, args=(RuntimeError, other, None))
            reporter.start()
            reporter.join()
            printed.set()

    connection = SimpleNamespace(cursor=lambda: Reporting(None, None))
    copying.copy(connection, "COPY t TO STDOUT", copying.BinaryRows(("integer",)))
    assert printed.is_set() and seen == [other, other]


def test_greenplum_errors_name_the_segment_and_its_host():
    """The suffix Greenplum gives an error raised on a segment (its content id, host, port and
    process), read from the message; the key comes from the in-database code's prefix."""

    class GreenplumError(Exception):
        pgcode = "38000"

    error = GreenplumError(
        "SegmentError: segment 7: ValueError: bad buffer  (seg2 slice1 10.1.2.3:6002 pid=4242)"
    )
    message = str(failure("training", error))
    assert message == (
        "training failed in the database on segment 7 / Greenplum segment 2 on 10.1.2.3:6002, "
        "pid 4242: ValueError: bad buffer"
    )
    # As a live cluster words it: the suffix follows the in-database code's origin line.
    error = GreenplumError()
    error.diag = SimpleNamespace(
        message_primary="SegmentError: segment 2: TypeError: unknown layer\n(raised at "
        "gpcnn/segment.py, line 140, in build_model)  (seg0 slice2 127.0.0.1:7002 pid=30908)",
        message_detail=None,
        context=None,
    )
    assert str(failure("training", error)) == (
        "training failed in the database on segment 2 / Greenplum segment 0 on 127.0.0.1:7002, "
        "pid 30908: TypeError: unknown layer (raised at gpcnn/segment.py, line 140, in "
        "build_model)"
    )


def test_a_failed_greenplum_primary_is_told_as_a_failed_segment_and_what_its_mirror_does():
    """As a live cluster with mirrors worded it when a primary's postmaster was killed during a
    fit (docs/greenplum.md, "Failover"): the suffix has no slice there, and the session's server
    process did not end on its own."""

    class AdminShutdown(Exception):
        pgcode = "57P01"

    error = AdminShutdown(
        "terminating connection due to unexpected postmaster exit  (seg1 127.0.0.1:7203 pid=5026)"
    )
    assert str(failure("storing the checkpoint of iteration 3", error)) == (
        "storing the checkpoint of iteration 3 failed in the database on Greenplum segment 1 on "
        "127.0.0.1:7203, pid 5026: its server failed under it (terminating connection due to "
        "unexpected postmaster exit): the segment (or server) failed; where it has a mirror, "
        "Greenplum's fault prober promotes the mirror within seconds (`gpcnn doctor` shows the "
        "mirrors and the prober's interval)"
    )
    # the training statement, when the coordinator found the segment gone first
    error = AdminShutdown(
        "FTS detected connection lost during dispatch to seg1 slice1 127.0.0.1:7203 pid=8023:"
    )
    error.pgcode = "XX000"
    assert str(failure("training", error, keys=[2, 0])) == (
        "training failed in the database on segments 2, 0: its server failed under it (FTS "
        "detected connection lost during dispatch to seg1 slice1 127.0.0.1:7203 pid=8023:): the "
        "segment (or server) failed; where it has a mirror, Greenplum's fault prober promotes the "
        "mirror within seconds (`gpcnn doctor` shows the mirrors and the prober's interval)"
    )


def _close_idle_connections(*handles) -> None:
    """Before DDL that needs an exclusive lock: on Greenplum 7.0.0-dev a pooled connection's
    segment process keeps the locks of a one-segment read after its coordinator ended the
    transaction (seen live, docs/greenplum.md), so DROP TRIGGER waited for ever."""
    release_sessions()
    for db in handles:
        db.engine.dispose()


@contextlib.contextmanager
def refused(db, event: str, condition: str, message: str, *idle):
    """A trigger that makes the server refuse ``event`` on checkpoints (rows matching
    ``condition``) with ``message``, while the block runs. The idle connections of ``db`` and
    of the handles ``idle`` are closed before each DDL (see ``_close_idle_connections``)."""
    checkpoints = f"{db.backend.qschema}.checkpoints"
    refuse = f"{db.backend.qschema}.refuse_checkpoints"
    _close_idle_connections(db, *idle)
    with db.begin() as conn:
        conn.execute(
            sa.text(
                f"CREATE FUNCTION {refuse}() RETURNS trigger LANGUAGE plpgsql AS "
                "$$BEGIN RAISE EXCEPTION '%', TG_ARGV[0]; END$$"
            )
        )
        conn.exec_driver_sql(
            f"CREATE TRIGGER refuse_checkpoints BEFORE {event} ON {checkpoints} "
            f"FOR EACH ROW {condition} EXECUTE FUNCTION {refuse}('{message}')"
        )
    try:
        yield
    finally:
        _close_idle_connections(db, *idle)
        with db.begin() as conn:
            conn.exec_driver_sql(f"DROP TRIGGER refuse_checkpoints ON {checkpoints}")
            conn.exec_driver_sql(f"DROP FUNCTION {refuse}()")


@pytest.mark.slow
def test_a_refused_retention_delete_fails_the_fit_and_the_run_resumes(db, native_db, table):
    """The retention rule's delete runs in the background while the next iteration trains: the
    server refusing it (a trigger here) fails the fit with the server's message before another
    iteration is stored, and the run resumes once the delete is allowed again."""
    model = dense_net()
    est = estimator(db, model, iterations=3, batch_size=100)
    refusal = refused(db, "DELETE", "", "the test refuses checkpoint deletes", native_db)
    # Iteration 1's checkpoint is the first to go, after iteration 2; iteration 3 waits.
    with refusal, pytest.raises(TrainingError) as raised:
        est.fit(TABLE)
    message = str(raised.value)
    # Greenplum names the segment that refused (its suffix has no slice in a one-segment DELETE)
    assert re.search(
        r"the retention rule failed in the database( on Greenplum segment \d+ on \S+, pid \d+)?: "
        "the test refuses checkpoint deletes",
        message,
    ), message
    assert [r["iteration"] for r in _stored_iterations(db, est.run_id_)] == [1, 2]
    assert [r["iteration"] for r in est.history_] == [1, 2]
    assert f"run {est.run_id_} keeps iteration 2: fit(table, resume=" in message
    assert runs.load_run(db, est.run_id_).status == "failed"

    resumed = estimator(db, model, iterations=3, batch_size=100).fit(TABLE, resume=est.run_id_)
    assert [r["iteration"] for r in resumed.history_] == [1, 2, 3]
    shown = runs.show_run(db, est.run_id_)
    assert shown["stored"]["weights"]["iterations"] == sorted(
        training.DEFAULT_RETENTION.keep(resumed.history_)
    )
    runs.delete_runs(db, [est.run_id_])


def test_idempotent_work_whose_connection_was_lost_runs_once_more_and_other_errors_pass():
    """The retention rule's delete meets a connection the server ended after the pool's ping:
    it runs again on a new one; a refusal from the server is raised at once."""
    calls = []

    def lost_once(value):
        calls.append(value)
        if len(calls) == 1:
            raise sa.exc.DBAPIError("DELETE", {}, Exception("closed"), connection_invalidated=True)
        return value

    assert once_more_if_lost(lost_once, 7) == 7
    assert calls == [7, 7]

    def refused_by_server():
        calls.append("refused")
        raise sa.exc.DBAPIError("DELETE", {}, Exception("refused"))

    with pytest.raises(sa.exc.DBAPIError):
        once_more_if_lost(refused_by_server)
    assert calls == [7, 7, "refused"]


@pytest.mark.slow
def test_a_refused_background_checkpoint_fails_the_fit_before_its_row_counts(db, table):
    """A rule that sends its start anyway (BMUF with Nesterov momentum) stores each checkpoint
    with its row in the background, while the next iteration trains: the server refusing
    iteration 2's checkpoint fails the fit with the server's message, neither that row nor a
    later one is stored, and the run resumes from iteration 1 once the write is allowed."""
    model = dense_net()
    est = estimator(db, model, iterations=3, batch_size=100, merge="bmuf")
    refusal = refused(db, "INSERT", "WHEN (NEW.iteration = 2)", "the test refuses checkpoint 2")
    with refusal, pytest.raises(TrainingError) as raised:
        est.fit(TABLE)
    assert "storing iteration 2 failed in the database: the test refuses checkpoint 2" in str(
        raised.value
    )
    assert [r["iteration"] for r in _stored_iterations(db, est.run_id_)] == [1]
    assert runs.load_run(db, est.run_id_).status == "failed"

    again = estimator(db, model, iterations=3, batch_size=100, merge="bmuf")
    resumed = again.fit(TABLE, resume=est.run_id_)
    assert [r["iteration"] for r in resumed.history_] == [1, 2, 3]
    assert [r["iteration"] for r in _stored_iterations(db, est.run_id_)] == [1, 2, 3]
    runs.delete_runs(db, [est.run_id_])
