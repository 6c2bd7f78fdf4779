"""Segment sessions: an error (or Ctrl-C) in one cancels the work running in all the others; a
client process holds only the sessions it accounts for."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from tiny import break_segment

from gpcnn.data.tables import load_images
from gpcnn.engines.sessions import MAX_IDLE_SESSIONS, SegmentSessions


def test_an_error_in_one_session_cancels_the_others(db):
    sessions = SegmentSessions(db.engine, 2)
    try:
        started = time.perf_counter()
        with pytest.raises(Exception, match="division by zero"):
            sessions.map(
                "SELECT CASE WHEN :fail THEN 1 / 0 ELSE CAST(CAST(pg_sleep(60) AS text) AS int) END",
                [{"fail": False}, {"fail": True}],
            )
        assert time.perf_counter() - started < 50  # the 60 s sleep was cancelled, not waited out
        # Both sessions are usable again.
        assert sessions.map("SELECT :v", [{"v": 1}, {"v": 2}]) == [[(1,)], [(2,)]]
    finally:
        sessions.close()


def test_released_sessions_are_reused_with_the_same_settings(db):
    first = SegmentSessions(db.engine, 2, threads=3)
    pids = {row[0][0] for row in first.map("SELECT pg_backend_pid()", [{}, {}])}
    first.release()
    again = SegmentSessions(db.engine, 2, threads=3)
    other = SegmentSessions(db.engine, 1, threads=4)  # another TF thread count: a fresh backend
    try:
        assert {row[0][0] for row in again.map("SELECT pg_backend_pid()", [{}, {}])} == pids
        assert other.one("SELECT pg_backend_pid()", {})[0][0] not in pids
    finally:
        again.close()
        other.close()


def test_sessions_open_with_their_start_options_and_are_reused_only_with_the_same(db):
    options = "-c work_mem=12345kB"
    first = SegmentSessions(db.engine, 1, options=options)
    pid = first.one("SELECT pg_backend_pid()", {})[0][0]
    assert first.one("SHOW work_mem", {}) == [("12345kB",)]
    first.release()
    plain = SegmentSessions(db.engine, 1)
    again = SegmentSessions(db.engine, 1, options=options)
    try:
        assert plain.one("SELECT pg_backend_pid()", {})[0][0] != pid
        assert again.one("SELECT pg_backend_pid()", {})[0][0] == pid
    finally:
        plain.close()
        again.close()


def test_every_connection_gpcnn_opens_runs_without_jit(db):
    """PostgreSQL's JIT beside TensorFlow's libraries crashes a server process: it is off on the
    handle's pooled connections and in segment sessions, with or without start options."""
    with db.engine.connect() as conn:
        assert conn.exec_driver_sql("SHOW jit").scalar() == "off"
    sessions = SegmentSessions(db.engine, 1, options="-c work_mem=12345kB")
    try:
        assert sessions.one("SHOW jit", {}) == [("off",)]
        assert sessions.one("SHOW work_mem", {}) == [("12345kB",)]
    finally:
        sessions.close()


@pytest.mark.slow
def test_a_client_process_holds_no_backend_it_cannot_account_for(db):
    """A process of its own fits, predicts, fits again, drops its estimators, fails, opens more
    sessions than the pool keeps, releases them and lets idle ones time out; after each step,
    every server process it holds (in pg_stat_activity, SQLAlchemy's pool included) is an idle
    segment session in the pool or an idle connection of SQLAlchemy's pool."""
    rng = np.random.default_rng(0)
    table = "gpcnn_sessions_test.train"
    labels = rng.integers(0, 3, 100)
    images = rng.integers(0, 255, (100, 8, 8), dtype=np.uint8)
    load_images(db, table, images, labels, segments=2, replace=True, progress=False)
    broken = "gpcnn_sessions_test.broken"
    info = load_images(db, broken, images, labels, segments=2, replace=True, progress=False)
    break_segment(db, broken, info.keys[0])
    child = Path(__file__).parent / "children" / "sessions.py"
    url = db.url.render_as_string(hide_password=False)
    done = subprocess.run(
        [sys.executable, str(child), url, db.schema, table, broken],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    after_fit = report["after_fit"]
    # the fit's sessions wait for the next call: one per segment, or one for all (Greenplum)
    assert after_fit["idle_sessions"] == (2 if db.backend.per_segment_sessions else 1)
    assert after_fit["backends"] == after_fit["accounted"]
    assert report["after_predict"]["same_pids"]
    assert report["second_fit_reused"]
    for step in ("after_predict", "after_gc", "after_error", "after_timeout"):
        assert report[step]["backends"] == report[step]["accounted"], step
    assert "buffer size must be a multiple" in report["error"]
    assert report["after_error"]["idle_sessions"] == 0  # a failed call's sessions are closed
    assert report["after_twelve_released"]["idle_sessions"] == MAX_IDLE_SESSIONS
    twelve = report["after_twelve_released"]  # the rest closed; SQLAlchemy's pool keeps its own
    assert twelve["backends"] == twelve["accounted"] == MAX_IDLE_SESSIONS + twelve["pooled"]
    assert report["after_release"] == {"backends": 0, "idle_sessions": 0}
    assert report["idle_before_timeout"] == 2
    assert report["after_timeout"]["idle_sessions"] == 0


def test_a_bad_idle_timeout_is_refused_before_any_session_opens(db, monkeypatch):
    for value, problem in (("soon", "give seconds"), ("0", "must be more than 0")):
        monkeypatch.setenv("GPCNN_IDLE_SESSION_TIMEOUT", value)
        with pytest.raises(ValueError, match=f"GPCNN_IDLE_SESSION_TIMEOUT='{value}': {problem}"):
            SegmentSessions(db.engine, 1)
