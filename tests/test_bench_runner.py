"""The benchmark runner's pure parts (bench/run.py, bench/suite/): parameters, the metadata a
result file records, and docs/benchmarks.md generated from result files. Nothing here is timed
and nothing needs the database."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # bench/ is no package of gpcnn's: it lives beside it
    sys.path.insert(0, str(ROOT))

from bench.suite import (  # noqa: E402
    diagnostics,
    epoch,
    greenplum,
    layouts,
    loading,
    metadata,
    registry,
    report,
    runner,
)
from bench.suite.base import Benchmark, Context, Outcome, Table, Target  # noqa: E402

CPUINFO = "processor\t: 0\nmodel name\t: Example CPU 9000\nprocessor\t: 1\nmodel name\t: Example CPU 9000\n"
MEMINFO = "MemTotal:       25165824 kB\nMemFree:         1000 kB\n"


def example_benchmark() -> Benchmark:
    return Benchmark(
        name="epoch",
        title="An epoch against plain Keras",
        question="How long is an epoch?",
        method="Rounds, interleaved.",
        defaults={"rounds": 5, "batches": [32, 100]},
        quick={"rounds": 1},
        run=lambda context: Outcome(),
    )


def example_metadata() -> dict:
    return {
        "date": "2026-12-06 05:00 UTC",
        "commit": "0123456789abcdef0123456789abcdef01234567",
        "dirty": False,
        "machine": metadata.machine(CPUINFO, MEMINFO),
        "versions": {
            "python": "3.11.2",
            "tensorflow": "2.21.0",
            "keras": "3.15.1",
            "numpy": "2.4.6",
            "postgresql": "15.20",
        },
        "load_average": [1.5, 1.2, 1.0],
    }


def example_result() -> dict:
    times = {
        "batch 32, metrics none": {
            epoch.FIT2: [10.0, 12.0, 11.0],
            epoch.FIT1: [16.0, 16.0, 16.0],
            epoch.HALVES: [9.0, 9.0, 9.0],
            "train_on_batch loop 2 threads": [10.0, 10.0, 10.0],
            epoch.K1: [10.5, 11.0, 12.0],
            epoch.K2: [9.5, 9.6, 9.7],
        }
    }
    return runner.result(
        example_benchmark(),
        {"rounds": 3, "batches": [32]},
        epoch.outcome(times),
        example_metadata(),
        runner.command("epoch", False, ["rounds=3"], False, False),
        notes="a shared machine",
    )


def test_a_set_parameter_is_read_as_json_and_otherwise_kept_as_text():
    assert runner.parse_sets(["rounds=3", "sizes=[1,25]", "label=fast"]) == {
        "rounds": 3,
        "sizes": [1, 25],
        "label": "fast",
    }


def test_a_set_without_an_equals_sign_is_refused_by_name():
    with pytest.raises(ValueError, match="NAME=VALUE"):
        runner.parse_sets(["rounds"])


def test_parameters_take_the_defaults_then_quick_then_the_command_line():
    bench = example_benchmark()
    assert runner.parameters(bench, False, {}) == {"rounds": 5, "batches": [32, 100]}
    assert runner.parameters(bench, True, {}) == {"rounds": 1, "batches": [32, 100]}
    assert runner.parameters(bench, True, {"rounds": 2}) == {"rounds": 2, "batches": [32, 100]}


def test_a_parameter_the_benchmark_lacks_is_refused_before_anything_runs():
    with pytest.raises(ValueError, match="epoch has no parameter sizes; it has: rounds, batches"):
        runner.parameters(example_benchmark(), False, {"sizes": [1]})


def test_the_registry_names_each_benchmark_once_and_refuses_an_unknown_one():
    names = registry.names()
    assert len(names) == len(set(names)) <= 8
    assert {"loading", "epoch", "fixed_cost", "diagnostics", "predict", "soak", "greenplum"} <= set(
        names
    )
    with pytest.raises(KeyError, match="no benchmark 'nope'"):
        registry.get("nope")


def test_the_machine_is_read_from_procs_texts():
    found = metadata.machine(CPUINFO, MEMINFO)
    assert found["cpu"] == "Example CPU 9000"
    assert found["memory_gib"] == 24.0
    assert found["cores"] >= 1 and 1 <= found["cores_usable"] <= found["cores"]


def test_the_commit_is_this_checkouts_and_dirty_is_a_boolean():
    found = metadata.commit()
    assert re.fullmatch(r"[0-9a-f]{40}", found["commit"])
    assert isinstance(found["dirty"], bool)


def test_versions_name_python_tensorflow_keras_numpy_and_the_server():
    found = metadata.versions("15.20")
    assert {"python", "tensorflow", "keras", "numpy"} <= set(found)
    assert found["postgresql"] == "15.20"


def test_a_result_file_records_where_when_and_with_what_it_ran(tmp_path):
    path = runner.write(tmp_path, example_result())
    assert path.name == "epoch.json"
    saved = json.loads(path.read_text())
    assert saved["metadata"]["machine"]["cpu"] == "Example CPU 9000"
    assert saved["parameters"] == {"rounds": 3, "batches": [32]}
    assert saved["command"] == ".venv/bin/python bench/run.py epoch --set rounds=3"
    assert saved["data"]["seconds"]["batch 32, metrics none"][epoch.K1] == [10.5, 11.0, 12.0]


def test_the_recorded_command_quotes_a_set_so_that_a_shell_reads_it_back():
    line = runner.command("epoch", True, ['metrics=["accuracy"]'], True, False)
    assert line == (
        ".venv/bin/python bench/run.py epoch --quick --set 'metrics=[\"accuracy\"]' --database URL"
    )


def test_the_epoch_targets_are_ratios_of_the_medians_within_the_run():
    targets = {t["target"]: t for t in example_result()["targets"]}
    k1 = targets["batch 32, metrics none: K = 1 ≤ 1.05× `fit` with 2 threads"]
    assert k1 == {"target": k1["target"], "value": "1.00", "met": True}  # 11 / 11
    k2 = targets["batch 32, metrics none: K = 2 ≤ 1.1× the 2-core limit (`fit` 1 thread ÷ 2)"]
    assert (k2["value"], k2["met"]) == ("1.20", False)  # 9.6 / (16 / 2)


def test_the_diagnostics_target_is_the_median_of_each_rounds_share_of_the_fixed_cost():
    outcome = diagnostics.outcome(
        {
            1.0: {
                "fixed": [0.05, 0.1, 0.2],
                "passes": [0.002, 0.001, 0.002],
                "floor": [0.001, 0.001, 0.001],
                "share": [0.04, 0.01, 0.01],
            },
            25.0: {
                "fixed": [1.0, 1.0, 1.0],
                "passes": [0.1, 0.1, 0.1],
                "floor": [0.04, 0.05, 0.05],
                "share": [0.1, 0.1, 0.1],
            },
        }
    )
    small, big = outcome.targets
    assert (small.value, small.met) == ("1.0 %", True)
    assert (big.value, big.met) == ("10.0 %", False)
    assert outcome.tables[0].rows[0][5:] == ["1.0–4.0 %", "1.0 %", "2.0×"]
    assert outcome.tables[0].rows[1][6:] == ["5.0 %", "2.0×"]


def test_the_loading_targets_hold_each_load_to_100_mbs_and_half_the_raw_copy():
    outcome = loading.outcome(
        {
            "raw": [0.4, 0.5, 0.6],
            "`gpcnn.load_images`, K = 2": [0.9, 1.0, 1.1],
            "`gpcnn.pack_table`, K = 2": [2.0, 2.0, 2.0],
        },
        100.0,
    )
    load, pack = outcome.targets
    assert (load.value, load.met) == ("100 MB/s, 0.50×", True)
    assert pack.met is None  # no target: reported only


def test_the_layouts_result_gives_each_copy_and_pack_its_rows_moved_and_plan_motions():
    plan = (
        "Insert on t  (cost=0.00..1.00 rows=1 width=8)\n"
        "  ->  Redistribute Motion 2:2  (slice1; segments: 2)  (cost=0.00..1.00 rows=1)\n"
        "        ->  HashAggregate  (cost=0.00..1.00 rows=1 width=8)"
    )
    outcome = layouts.outcome(
        {"kept copy": [1.0, 2.0, 3.0], "pack": [4.0, 4.0, 5.0]},
        {"kept copy": 0, "pack": 500},
        1000,
        2000.0,
        {"iid": plan, "by_site": "Insert on t"},
        {"iid": (0.01, 0.005), "by_site": (0.5, 0.4)},
    )
    seconds, plans = outcome.tables
    assert seconds.rows[1] == ["pack", 4.0, "4.00, 4.00, 5.00", "2.00", 500, "50.0%", 1.0]
    assert plans.rows == [
        ["iid", "0.01 / 0.01", "Redistribute Motion 2:2"],
        ["by_site", "0.50 / 0.40", "none"],
    ]
    assert layouts.run(Context({"rounds": 1, "seed": 0})).skipped.startswith("it needs")


def test_the_report_has_one_section_per_result_with_its_targets_table_and_machine():
    text = report.render({"epoch": example_result()})
    assert text.startswith("# Benchmarks\n")
    assert "## An epoch against plain Keras" in text
    assert "| target | measured | status |" in text
    assert "**met**" in text and "**not met**" in text
    assert "at commit `0123456789`" in text and "Example CPU 9000" in text
    assert "PostgreSQL 15.20" in text and "Notes: a shared machine" in text
    assert "| [An epoch against plain Keras](#an-epoch-against-plain-keras) | 1 of 2 met |" in text
    assert "| fixed_cost | no result file yet |" in text


def test_a_skipped_benchmark_says_why_and_how_to_run_it():
    content = runner.result(
        greenplum.BENCHMARK,
        {"sizes": [1], "rounds": 1},
        greenplum.run(Context({"sizes": [1], "rounds": 1})),
        example_metadata(),
        "bench/run.py greenplum",
    )
    text = report.render({"greenplum": content})
    assert "**Not run**: it needs a Greenplum cluster" in text
    assert "bench/run.py greenplum --greenplum postgresql://" in text


def test_table_cells_round_floats_and_escape_pipes():
    lines = report.table("caption", ["a", "b"], [[0.123456, "x|y"], [12345.6, 3]])
    assert lines[2:] == ["| a | b |", "|---|---|", "| 0.123 | x\\|y |", "| 12346 | 3 |", ""]


def test_the_report_reads_every_result_file_of_a_folder(tmp_path):
    runner.write(tmp_path, example_result())
    (tmp_path / "other.txt").write_text("not a result")
    assert list(report.load(tmp_path)) == ["epoch"]


def test_outcome_tables_and_targets_survive_a_round_trip_through_json(tmp_path):
    outcome = Outcome([Table("c", ["x"], [[1]])], [Target("t", "v", None)], {"k": 1})
    content = runner.result(example_benchmark(), {}, outcome, example_metadata(), "cmd")
    saved = json.loads(runner.write(tmp_path, content).read_text())
    assert saved["tables"] == [{"caption": "c", "columns": ["x"], "rows": [[1]]}]
    assert saved["targets"] == [{"target": "t", "value": "v", "met": None}]
