"""Every server process this client process holds, counted in ``pg_stat_activity`` after each
way a fit can end; prints one JSON object of the counts (run by tests/test_sessions.py).

Arguments: the database URL, gpcnn's schema, an image table of 2 segments of 8x8 images with 3
classes, and a table like it whose rows one segment cannot decode (a fit on it fails inside the
database)."""

from __future__ import annotations

import gc
import json
import os
import sys
import time

os.environ["TF_ENABLE_ONEDNN_OPTS"] = "0"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import psycopg2

import gpcnn
from gpcnn.engines.sessions import POOL, SegmentSessions, application_name
from gpcnn.kernel import keras_setup

keras = keras_setup.keras_module(threads=1)
url, schema, table, broken = sys.argv[1:5]
db = gpcnn.connect(url, schema=schema)
parsed = db.url
counter = psycopg2.connect(
    host=parsed.host,
    port=parsed.port,
    user=parsed.username,
    password=parsed.password,
    dbname=parsed.database,
    application_name="gpcnn-test-counter",
)
counter.autocommit = True


def backends() -> list[int]:
    """The server processes of this client (this counting connection apart)."""
    with counter.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s ORDER BY pid",
            (application_name(),),
        )
        return [pid for (pid,) in cursor.fetchall()]


def settled(expected: int, timeout: float = 20) -> list[int]:
    """The backends once their number is ``expected`` (a closed one takes a moment to exit)."""
    deadline = time.monotonic() + timeout
    while len(found := backends()) != expected and time.monotonic() < deadline:
        time.sleep(0.05)
    return found


def accounted() -> int:
    """What the client knows it holds: idle segment sessions and SQLAlchemy's idle connections."""
    return len(POOL) + db.engine.pool.checkedin()


def model(*extra):
    keras.utils.set_random_seed(7)
    return keras.Sequential(
        [keras.Input((8, 8, 1)), *extra, keras.layers.Flatten(), keras.layers.Dense(3, "softmax")]
    )


def estimator(net=None, **params):
    defaults = dict(iterations=1, database=db, threads_per_segment=1, verbose=0, seed=0)
    return gpcnn.GreenplumCNN(net or model(), **{**defaults, **params})


report = {}
est = estimator().fit(table)  # no `with`, no close()
report["after_fit"] = {
    "backends": len(settled(accounted())),
    "accounted": accounted(),
    "idle_sessions": len(POOL),
}
idle_pids = set(backends())
est.predict(table)
est.evaluate(table)
report["after_predict"] = {
    "backends": len(settled(accounted())),
    "accounted": accounted(),
    "same_pids": set(backends()) == idle_pids,
}
again = estimator().fit(table)
report["second_fit_reused"] = set(backends()) == idle_pids
del est, again
gc.collect()
report["after_gc"] = {"backends": len(settled(accounted())), "accounted": accounted()}
try:
    estimator().fit(broken)
except gpcnn.TrainingError as e:
    report["error"] = str(e)
report["after_error"] = {
    "backends": len(settled(accounted())),
    "accounted": accounted(),
    "idle_sessions": len(POOL),
}
many = [SegmentSessions(db.engine, 6, threads=t) for t in (2, 3)]
for sessions in many:
    sessions.release()
report["after_twelve_released"] = {
    "backends": len(settled(accounted())),
    "accounted": accounted(),
    "idle_sessions": len(POOL),
    "pooled": db.engine.pool.checkedin(),
}
gpcnn.release_sessions()
report["after_release"] = {"backends": len(settled(0)), "idle_sessions": len(POOL)}
os.environ["GPCNN_IDLE_SESSION_TIMEOUT"] = "1"
SegmentSessions(db.engine, 2, threads=2).release()
report["idle_before_timeout"] = len(POOL)
time.sleep(2)
report["after_timeout"] = {
    "idle_sessions": len(POOL),
    "backends": len(settled(accounted())),
    "accounted": accounted(),
}
print(json.dumps(report))
