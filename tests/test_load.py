"""Load: 4 fits (two on each of two tables), 2 loads and 2
predictions into tables, all at once from separate processes, each end exactly as the same call
run alone: the same weights, the same table, the same predictions, bit for bit; no deadlock and
no error."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa
from processes import run_together
from tiny import dense_net

import gpcnn
from gpcnn.data.tables import describe, load_images, read_images
from gpcnn.fit import runs
from gpcnn.kernel import wire

DATA = "gpcnn_load_test"
CHILDREN = Path(__file__).parent / "children"
LOADED = 3000  # images per load


def estimator(db) -> gpcnn.GreenplumCNN:
    """The fit every fitting process runs (deterministic: seeds, one TF thread per segment)."""
    return gpcnn.GreenplumCNN(
        dense_net(), iterations=2, seed=3, database=db, threads_per_segment=1, verbose=0
    )


def images(seed: int, n: int):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 255, (n, 8, 8), dtype=np.uint8), rng.integers(0, 3, n)


@pytest.fixture(scope="module")
def tables(db):
    names = [f"{DATA}.first", f"{DATA}.second"]
    for seed, name in enumerate(names):
        load_images(db, name, *images(seed, 120), segments=2, replace=True, progress=False)
    with db.begin() as conn:  # what an earlier run of this module made
        for name in ("pred_alone", "pred_0", "pred_1"):
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS {DATA}.{name} CASCADE")
    for name in ("load_alone", "load_0", "load_1"):
        gpcnn.drop_table(db, f"{DATA}.{name}", missing_ok=True)
    return names


def _predictions(db, table: str) -> list[tuple]:
    with db.connect() as conn:
        return conn.exec_driver_sql(f"SELECT * FROM {table} ORDER BY 1").all()


@pytest.mark.slow
def test_fits_loads_and_predictions_at_once_each_equal_the_call_alone(db, tables, tmp_path):
    alone = {name: estimator(db).fit(name) for name in tables}
    weights = {name: wire.flatten(est.model_.get_weights()) for name, est in alone.items()}
    saved = tmp_path / "first.keras"
    alone[tables[0]].save(saved)
    alone[tables[0]].predict(tables[0], output_table=f"{DATA}.pred_alone")
    predicted = _predictions(db, f"{DATA}.pred_alone")
    load_images(db, f"{DATA}.load_alone", *images(9, LOADED), segments=2, progress=False)
    loaded = read_images(db, f"{DATA}.load_alone", ids=True)

    url = db.url.render_as_string(hide_password=False)
    fits = [tables[0], tables[0], tables[1], tables[1]]
    jobs = [
        [
            str(CHILDREN / "fit.py"),
            url,
            db.schema,
            name,
            str(tmp_path / f"{i}.npy"),
            f"{__name__}:estimator",
        ]
        for i, name in enumerate(fits)
    ] + [
        [str(CHILDREN / "call.py"), url, db.schema, json.dumps(job)]
        for job in [
            *(
                {"call": "load", "table": f"{DATA}.load_{i}", "seed": 9, "images": LOADED}
                for i in range(2)
            ),
            *(
                {
                    "call": "predict",
                    "estimator": str(saved),
                    "table": tables[0],
                    "output": f"{DATA}.pred_{i}",
                }
                for i in range(2)
            ),
        ]
    ]
    reports = run_together(jobs)
    for i, name in enumerate(fits):
        np.testing.assert_array_equal(np.load(tmp_path / f"{i}.npy"), weights[name])
        stored = runs.load_run(db, reports[i]["run_id"])
        assert (stored.status, len(stored.iterations), stored.table) == ("finished", 2, name)
    for i in range(2):
        for mine, theirs in zip(read_images(db, f"{DATA}.load_{i}", ids=True), loaded, strict=True):
            np.testing.assert_array_equal(mine, theirs)
        info = describe(db, f"{DATA}.load_{i}")
        assert (info.images, info.segments) == (LOADED, 2)
        assert _predictions(db, f"{DATA}.pred_{i}") == predicted
    with db.connect() as conn:  # no lock is still waited for
        waiting = conn.execute(sa.text("SELECT count(*) FROM pg_locks WHERE NOT granted"))
        assert waiting.scalar() == 0
