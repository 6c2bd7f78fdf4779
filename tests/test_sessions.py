"""Segment sessions: an error (or Ctrl-C) in one cancels the work running in all the others."""

from __future__ import annotations

import time

import pytest

from gpcnn.engines.sessions import SegmentSessions


def test_an_error_in_one_session_cancels_the_others(engine):
    sessions = SegmentSessions(engine.engine, 2)
    try:
        started = time.perf_counter()
        with pytest.raises(Exception, match="division by zero"):
            sessions.map(
                "SELECT CASE WHEN :fail THEN 1 / 0 ELSE CAST(CAST(pg_sleep(60) AS text) AS int) END",
                [{"fail": False}, {"fail": True}],
            )
        assert time.perf_counter() - started < 20  # the 60 s sleep was cancelled
        # Both sessions are usable again.
        assert sessions.map("SELECT :v", [{"v": 1}, {"v": 2}]) == [[(1,)], [(2,)]]
    finally:
        sessions.close()


def test_released_sessions_are_reused_with_the_same_settings(engine):
    first = SegmentSessions(engine.engine, 2, threads=3)
    pids = {row[0][0] for row in first.map("SELECT pg_backend_pid()", [{}, {}])}
    first.release()
    again = SegmentSessions(engine.engine, 2, threads=3)
    other = SegmentSessions(engine.engine, 1, threads=4)  # another TF thread count: a fresh backend
    try:
        assert {row[0][0] for row in again.map("SELECT pg_backend_pid()", [{}, {}])} == pids
        assert other.one("SELECT pg_backend_pid()", {})[0][0] not in pids
    finally:
        again.close()
        other.close()
