"""Part k's numbers from its files: the forecasts' table, and their score once runs are stored
(each configuration judged on the mean of its seeds), on files written here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpcnn.study.doc_numbers import MissingSource
from gpcnn.study.doc_sources import facts

CONFIG = {"alpha": None, "merge": "average", "merges_per_epoch": 1, "model": "small_cnn"}


def forecast(number: int, seed: int, gap: float, alpha: float | None = None) -> dict:
    config = {**CONFIG, "number": number, "optimizer": "momentum", "segments": 6, "alpha": alpha}
    return {
        "config": config,
        "seed": seed,
        "epochs": 8,
        "gap": gap,
        "low": gap - 1,
        "high": gap + 1,
        "skew_max": 0.01 if alpha is None else 0.5,
    }


def history(accuracy_at_8: float, seconds: float = 10.0) -> dict:
    rows = [
        {"epoch": e, "val_accuracy": accuracy_at_8 - 0.01 * (8 - e), "seconds": seconds}
        for e in range(1, 9)
    ]
    return {"history": rows}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    part = tmp_path / "docs/img/study/k"
    (part / "runs").mkdir(parents=True)
    forecasts = {
        "1-s0": forecast(1, 0, 1.0),
        "1-s1": forecast(1, 1, 2.0),
        "2-s0": forecast(2, 0, 5.0, alpha=0.3),
    }
    (part / "forecasts.json").write_text(json.dumps(forecasts))
    runs = {
        "1-s0": history(0.88),
        "1-single-s0": history(0.90),  # measured 2.0
        "1-s1": history(0.89),
        "1-single-s1": history(0.90),  # measured 1.0: the mean 1.5 against the forecast's 1.5
        "2-s0": history(0.80),
        "2-single-s0": history(0.90, seconds=5.0),  # measured 10.0, outside [4, 6]
    }
    for name, value in runs.items():
        (part / "runs" / f"{name}.json").write_text(json.dumps(value))
    return tmp_path


def test_the_forecasts_table_has_a_row_per_configuration_with_each_seed(root):
    table = facts(root)("forecast/table")
    assert (
        "| 1 | `small_cnn`, momentum | 6 | IID (0.01, 0.01) | average | 1.0 [0.0, 2.0]; "
        "2.0 [1.0, 3.0] | 1.5 |" in table
    )
    assert (
        "| 2 | `small_cnn`, momentum | 6 | Dirichlet α = 0.3 (0.50) | average | 5.0 [4.0, 6.0] "
        "| 5.0 |" in table
    )


def test_each_configuration_is_scored_on_the_mean_of_its_seeds(root):
    fact = facts(root)
    score = fact("forecast/score")
    assert "| 1.50 [0.50, 2.50] | 1.50 (2 seeds) | yes |" in score
    assert "| 5.00 [4.00, 6.00] | 10.00 (1 seed) | no |" in score
    assert fact("forecast/held") == "1 of 2"
    assert fact("forecast/mae/iid") == "0.00" and fact("forecast/mae/skewed") == "5.00"
    assert fact("forecast/rms/skewed") == "5.00"
    # pilots: 3 epochs at K (30 s) and 3 of one worker (30 s, or 15 s) against 80 s of the run
    assert fact("forecast/cost") == "56–75 % (the one worker's alone 19–38 %)"


def test_before_any_run_the_score_is_missing(root):
    for stored in (root / "docs/img/study/k/runs").iterdir():
        stored.unlink()
    with pytest.raises(MissingSource, match="no configuration's runs"):
        facts(root)("forecast/score")
