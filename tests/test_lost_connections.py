"""The client's connections lost mid-iteration, and the server's ``statement_timeout`` (issue
"Reliability", items 5 and 6): the segments' work is cancelled, the run resumes, the one error says
why, and nothing is printed beside it. Runs in both dispatch modes (see conftest): in
``"statement"`` mode the one session is the coordinator's, as on Greenplum."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest
import sqlalchemy as sa
from tiny import dense_net

import gpcnn
from gpcnn.data.tables import load_images
from gpcnn.estimator import GreenplumCNN, TrainingError
from gpcnn.fit import runs

pytestmark = pytest.mark.every_dispatch

DATA_SCHEMA = "gpcnn_connections_test"
TABLE = f"{DATA_SCHEMA}.train"
# Seconds from the error until no statement of this client runs: an outer bound, not a speed
# (the other statements are cancelled at once; a loaded machine only delays when that shows).
STOPPED_WITHIN = 60.0


@pytest.fixture(scope="module")
def table(native_db):
    """2 segments of 600 images: with batch_size=2, an iteration lasts about a second."""
    rng = np.random.default_rng(5)
    images = rng.integers(0, 255, (1200, 8, 8), dtype=np.uint8)
    labels = rng.integers(0, 3, 1200)
    load_images(native_db, TABLE, images, labels, segments=2, replace=True, progress=False)
    return TABLE


def estimator(db, **params) -> GreenplumCNN:
    defaults = dict(batch_size=2, seed=1, database=db, threads_per_segment=1, verbose=0)
    return GreenplumCNN(dense_net(), **{**defaults, **params})


def _backends(db, state: str, like: str = "%") -> list[int]:
    """This client's server processes in ``state`` (the asking connection apart)."""
    with db.connect() as conn:
        return list(
            conn.execute(
                sa.text(
                    "SELECT pid FROM pg_stat_activity WHERE application_name = :name "
                    "AND pid <> pg_backend_pid() AND state = :state AND query LIKE :like"
                ),
                {"name": f"gpcnn/{os.getpid()}", "state": state, "like": like},
            ).scalars()
        )


def _terminate(db, pids: list[int]) -> None:
    with db.connect() as conn:
        conn.execute(
            sa.text(
                "SELECT pg_terminate_backend(pid) FROM unnest(CAST(:pids AS integer[])) AS pid "
                "WHERE pid <> pg_backend_pid()"
            ),
            {"pids": pids},
        )


class Fitting:
    """A fit in a thread; what it raised."""

    def __init__(self, est: GreenplumCNN) -> None:
        self.est, self.raised = est, []
        self.thread = threading.Thread(target=self._fit)
        self.thread.start()

    def _fit(self) -> None:
        try:
            self.est.fit(TABLE)
        except BaseException as e:
            self.raised.append(e)

    def training(self, db, sessions: int, timeout: float = 120) -> list[int]:
        """Once an iteration is stored: the server processes training the next, all at once."""
        deadline = time.monotonic() + timeout
        while True:
            assert self.thread.is_alive() and time.monotonic() < deadline, self.raised
            run_id = getattr(self.est, "run_id_", None)
            if run_id is not None and runs.load_run(db, run_id).iterations:
                pids = _backends(db, "active", "%.train(%")
                if len(pids) == sessions:
                    return pids
            time.sleep(0.02)

    def join(self) -> None:
        self.thread.join(120)
        assert not self.thread.is_alive()


def _quiet(capfd) -> None:
    printed = capfd.readouterr().err
    assert "Traceback" not in printed and "Exception ignored" not in printed, printed


def test_a_session_lost_mid_iteration_cancels_the_other_statements_and_the_run_is_resumable(
    db, table, capfd
):
    sessions = 2 if db.backend.per_segment_sessions else 1
    fitting = Fitting(estimator(db, iterations=3))
    victim = fitting.training(db, sessions)[0]
    _terminate(db, [victim])  # as a network loss looks to the server: the session ends
    fitting.join()
    lost = time.monotonic()
    while _backends(db, "active"):
        assert time.monotonic() - lost < STOPPED_WITHIN, _backends(db, "active")
        time.sleep(0.05)
    (error,) = fitting.raised
    assert isinstance(error, TrainingError)
    message = str(error)
    assert f"its server process (pid {victim}) was terminated" in message
    run_id = fitting.est.run_id_
    assert runs.load_run(db, run_id).status == "failed"
    assert f"fit(table, resume={run_id}) continues it" in message  # as test_faults resumes
    _quiet(capfd)
    runs.delete_runs(db, [run_id])


def test_the_clients_idle_connections_lost_mid_iteration_do_not_end_the_fit(db, table, capfd):
    """The connections between statements (checkpoints, the run's status) and idle pooled
    sessions: reconnected, or replaced, when next used."""
    sessions = 2 if db.backend.per_segment_sessions else 1
    fitting = Fitting(estimator(db, iterations=3))
    fitting.training(db, sessions)
    idle = _backends(db, "idle")
    _terminate(db, idle)
    fitting.join()
    assert fitting.raised == []
    assert [r["iteration"] for r in fitting.est.history_] == [1, 2, 3]
    assert runs.load_run(db, fitting.est.run_id_).status == "finished"
    _quiet(capfd)
    runs.delete_runs(db, [fitting.est.run_id_])


@pytest.mark.slow
def test_a_statement_timeout_set_on_the_url_is_named_in_the_error(native_db, table, capfd):
    """In one dispatch mode: the server ends the statement either way."""
    url = native_db.url.update_query_dict({"options": "-c statement_timeout=300"})
    with gpcnn.connect(url.render_as_string(hide_password=False), schema=native_db.schema) as timed:
        est = estimator(timed, iterations=2)
        with pytest.raises(TrainingError) as raised:
            est.fit(TABLE)
    message = str(raised.value)
    assert "canceling statement due to statement timeout" in message
    assert "statement_timeout ended it: it is set on the URL" in message
    assert "ALTER ROLE/DATABASE" in message
    _quiet(capfd)
    runs.delete_runs(native_db, [est.run_id_])
