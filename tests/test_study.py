"""`gpcnn converge` end to end on tiny real data: CSV, report, and figures whose data match the CSV."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import sqlalchemy as sa

from gpcnn import models
from gpcnn.engines.identifiers import TableError
from gpcnn.fit import runs, training
from gpcnn.study import experiments, plots, report
from gpcnn.tools import cli, study_arguments

pytestmark = pytest.mark.every_dispatch


@pytest.fixture(scope="module", autouse=True)
def keep_every_checkpoint():
    """The interrupted-run test drops a run's last iteration row, as if the client had died
    before storing it: the checkpoint before it must then exist (by default only the last, the
    best and every 10th are kept)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(training, "DEFAULT_RETENTION", training.Retention(every=1))
        yield


@pytest.fixture(scope="module")
def study(db, schema, tmp_path_factory):
    out = tmp_path_factory.mktemp("study")
    url = db.url.render_as_string(hide_password=False)
    argv = [
        "converge",
        "--dataset",
        "mnist-sample",
        "--segments",
        "2",
        "--merge",
        "average,none",
        "--iterations",
        "2",
        "--out",
        str(out),
        "--database",
        url,
        "--schema",
        schema,
    ]
    if db.dispatch:
        argv += ["--dispatch", db.dispatch]
    assert cli.main(argv) == 0
    return out, argv


def test_history_csv_has_a_row_per_run_and_iteration(study):
    out, _ = study
    rows = report.read_csv(out / "history.csv")
    assert sorted({r["run"] for r in rows}) == [
        "mnist-sample-average-k2-m1",
        "mnist-sample-none-k2-m1",
    ]
    assert len(rows) == 4
    for row in rows:
        assert (
            row["segments"] == 2 and row["iteration"] in (1, 2) and row["epoch"] == row["iteration"]
        )
        assert 0 <= row["val_accuracy"] <= 1 and row["val_loss"] > 0 and row["images"] == 4000
    none = [r for r in rows if r["merge"] == "none"]
    for row in none:  # K workers that never merge: mean of their own curves, and each one
        per_segment = [v for k, v in row.items() if k.startswith("val_loss_segment_")]
        assert len(per_segment) == 2
        assert row["val_loss"] == pytest.approx(np.mean(per_segment))
        assert row["val_loss_average"] is not None


def test_report_tables_hold_the_csv_numbers(study):
    out, _ = study
    rows = report.read_csv(out / "history.csv")
    text = (out / "report.md").read_text()
    for row in rows:
        if row["iteration"] == 1:
            line = next(ln for ln in text.splitlines() if ln.startswith(f"| {row['run']} |"))
            assert f"{row['val_accuracy']:.4f}" in line


def test_figures_plot_the_csv_series(study):
    out, _ = study
    rows = report.read_csv(out / "history.csv")
    figures = plots.figures(rows, experiments.STUDY_RULES)
    assert set(figures) >= {
        "mnist-sample_merge_vs_nomerge_k2",
        "mnist-sample_rules_k2",
        "mnist-sample_merge_vs_nomerge_k2_epochs",
    }
    for name in figures:
        assert (out / f"{name}.png").stat().st_size > 10_000
    by_run = {}
    for row in rows:
        by_run.setdefault(row["run"], []).append(row)
    fig = figures["mnist-sample_merge_vs_nomerge_k2"]
    for ax, (metric, _) in zip(fig.axes, plots.PANELS, strict=True):
        lines = {line.get_gid(): line for line in ax.get_lines()}
        assert set(lines) == set(by_run)
        for run, line in lines.items():
            history = sorted(by_run[run], key=lambda r: r["iteration"])
            np.testing.assert_allclose(line.get_xdata(), [r["iteration"] for r in history])
            np.testing.assert_allclose(line.get_ydata(), [r[metric] for r in history])


def test_a_second_run_reuses_and_an_interrupted_run_resumes(study, db, schema):
    out, argv = study
    count = f"SELECT count(*) FROM {schema}.runs WHERE table_name LIKE '{schema}_images.%%'"
    with db.connect() as conn:
        before = conn.execute(sa.text(count)).scalar()
    assert cli.main(argv) == 0  # everything finished: nothing runs again
    with db.connect() as conn:
        assert conn.execute(sa.text(count)).scalar() == before
    # Interrupt the `average` run after its first iteration: drop its result file and its
    # last stored iteration, and leave it "running" as a killed client does; the study must
    # resume that run, not start a new one.
    result = out / "runs" / "mnist-sample-average-k2-m1.json"
    first = json.loads(result.read_text())["history"]
    result.unlink()
    with db.begin() as conn:
        run_id = conn.execute(
            sa.text(
                f"SELECT max(run_id) FROM {schema}.runs WHERE table_name LIKE '{schema}_images.%%' "
                f'AND params LIKE \'%%"merge": "average"%%\''
            )
        ).scalar()
        conn.execute(
            sa.text(f"DELETE FROM {schema}.run_iterations WHERE run_id = :r AND iteration = 2"),
            {"r": run_id},
        )
        conn.execute(
            sa.text(f"UPDATE {schema}.runs SET status = 'running' WHERE run_id = :r"), {"r": run_id}
        )
    assert cli.main(argv) == 0
    with db.connect() as conn:
        assert conn.execute(sa.text(count)).scalar() == before
    again = json.loads(result.read_text())["history"]
    assert [r["val_loss"] for r in again] == pytest.approx([r["val_loss"] for r in first])


def test_unknown_rule_is_refused_before_any_work():
    with pytest.raises(ValueError, match="unknown rules"):
        experiments.plan("mnist-sample", [2], ["average", "mean"], [1], 2)


def test_merge_frequency_figure_pairs_each_rule_by_colour_and_line_style():
    def history(merge, k, m):
        return [
            {
                "run": f"d-{merge}-k{k}-m{m}",
                "dataset": "d",
                "merge": merge,
                "segments": k,
                "merges_per_epoch": m,
                "iteration": i,
                "epoch": i / m,
                "loss": 1 / i,
                "val_loss": 1 / i,
                "val_accuracy": 1 - 1 / (i + 1),
            }
            for i in range(1, 2 * m + 1)
        ]

    rows = [
        r
        for merge, k in (("single", 1), ("average", 4), ("bmuf", 4), ("bmuf", 2))
        for m in (1, 4)
        for r in history(merge, k, m)
    ]
    figure = plots.figures(rows, experiments.STUDY_RULES)["d_merges_per_epoch_epochs"]
    lines = {line.get_gid(): line for line in figure.axes[0].get_lines()}
    assert sorted(lines) == sorted(
        f"d-{rule}-m{m}" for rule in ("single-k1", "average-k4", "bmuf-k4") for m in (1, 4)
    )
    for rule in ("single-k1", "average-k4", "bmuf-k4"):
        one, four = lines[f"d-{rule}-m1"], lines[f"d-{rule}-m4"]
        assert one.get_color() == four.get_color()
        assert (one.get_linestyle(), four.get_linestyle()) == ("-", "--")
        np.testing.assert_allclose(four.get_xdata(), np.arange(1, 9) / 4)  # against epochs
    assert lines["d-average-k4-m1"].get_color() != lines["d-bmuf-k4-m1"].get_color()


def test_sync_is_one_model_trained_on_the_replicas_combined_batch(study, db, schema, tmp_path):
    """``sync`` (MirroredStrategy, 32 images per replica on K logical CPUs) takes the same steps
    as plain Keras with one batch of 32·K: the replicas' gradients are averaged every batch."""
    from gpcnn.data.tables import read_images
    from gpcnn.kernel import keras_setup, segment

    if db.dispatch:
        pytest.skip("sync trains outside the database: one dispatch mode covers it")
    spec = experiments.RunSpec("mnist-sample", "sync", 2, 1, 1)
    (sync,) = experiments.run_one(db, spec, tmp_path, progress=False)

    keras = keras_setup.keras_module()
    keras.utils.set_random_seed(spec.seed)
    model = models.small_cnn()
    model.compile(
        optimizer=keras.optimizers.SGD(spec.learning_rate),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    tables = f"{schema}_images.mnist_sample"
    x, y = read_images(db, f"{tables}_k2_train")
    x_val, y_val = read_images(db, f"{tables}_test")
    fitted = model.fit(segment.to_model_input(x), y, batch_size=64, shuffle=False, verbose=0)
    val_loss, _ = model.evaluate(segment.to_model_input(x_val), y_val, verbose=0)
    assert sync["images"] == len(x) == 4000
    # Equal up to the order of float sums across replicas, which 63 steps at learning rate 0.05
    # amplify to about 0.2 % here; a different batch or step count moves these by tens of percent.
    assert sync["loss"] == pytest.approx(fitted.history["loss"][0], rel=1e-3)
    assert sync["val_loss"] == pytest.approx(val_loss, rel=1e-2)


def test_shuffled_runs_have_their_own_names_and_read_back_from_the_csv(tmp_path):
    specs = experiments.plan("mnist-sample", [2], ["average"], [1], 1, shuffle=True)
    assert [s.name for s in specs] == ["mnist-sample-average-k2-m1-shuffled"]
    row = {"run": specs[0].name, "dataset": "mnist-sample", "merge": "average", "shuffle": True}
    report.write_csv([row, {**row, "shuffle": False}], tmp_path / "history.csv")
    back = report.read_csv(tmp_path / "history.csv")
    assert [r["shuffle"] for r in back] == [True, False]


def test_plan_runs_each_setting_per_seed_skew_and_optimizer_state():
    specs = experiments.plan(
        "d",
        [1, 4],
        ["single", "average", "sync"],
        [1],
        3,
        seeds=[0, 1],
        skews=[None, 0.1],
        optimizer_states=["reset", "local"],
        optimizer="momentum",
        model="bn-cnn",
    )
    names = {s.name for s in specs}
    assert "d-single-k1-m1-bn-cnn-momentum" in names  # one worker: no skew, no state policy
    assert "d-single-k1-m1-bn-cnn-momentum-s1" in names
    assert "d-average-k4-m1-bn-cnn-momentum-os-local-skew0.1-s1" in names
    assert not any("sync" in n and "os-local" in n for n in names)  # sync keeps no state policy
    assert len(specs) == 2 * (1 + 2 * 2 + 2)
    scaled = experiments.RunSpec("d", "sync", 4, 1, 1, learning_rate=0.05, scale_lr=True)
    assert scaled.effective_learning_rate == pytest.approx(0.2) and scaled.name.endswith("-lrxk")
    with pytest.raises(ValueError, match="model 'vgg'"):
        experiments.plan("d", [2], ["average"], [1], 1, model="vgg")


def _rows(setting: str, merge: str, seeds_accuracies: dict[int, list[float]], **meta):
    rows = []
    for seed, accuracies in seeds_accuracies.items():
        for i, acc in enumerate(accuracies, start=1):
            rows.append(
                {
                    "run": setting if seed == 0 else f"{setting}-s{seed}",
                    "setting": setting,
                    "dataset": "d",
                    "merge": merge,
                    "segments": 1 if merge == "single" else 4,
                    "merges_per_epoch": 1,
                    "seed": seed,
                    "iteration": i,
                    "epoch": float(i),
                    "loss": 1.0 / i,
                    "val_loss": 1.0 / i,
                    "val_accuracy": acc,
                    **meta,
                }
            )
    return rows


def test_report_gives_mean_sd_and_calls_a_difference_real_only_beyond_two_standard_errors():
    rows = (
        _rows("d-single-k1-m1", "single", {0: [0.50, 0.80], 1: [0.52, 0.82], 2: [0.48, 0.81]})
        + _rows("d-average-k4-m1", "average", {0: [0.40, 0.805], 1: [0.42, 0.815], 2: [0.38, 0.80]})
        + _rows("d-bmuf-k4-m1", "bmuf", {0: [0.30, 0.70]})
    )
    text = report.report(rows, target=0.8)
    line = next(ln for ln in text.splitlines() if ln.startswith("| d-average-k4-m1 | 3 |"))
    assert "0.4000 ± 0.0200" in line  # epoch 1: mean ± sample sd over three seeds
    gap = [ln for ln in text.splitlines() if ln.startswith("| d-average-k4-m1 |")][-2]
    assert "-0.1000 ± 0.0327 (real)" in gap  # epoch 1: 0.1 > 2 * sqrt(2 * 0.02**2 / 3)
    assert "(within noise)" in gap  # epoch 2: 0.8067 vs 0.81
    assert "one seed: no error bar" in text
    assert "| d-average-k4-m1 | 3 of 3 | 2.0000 ± 0.0000 |" in text
    assert "| d-bmuf-k4-m1 | 0 of 1 |" in text
    diff, se, verdict = report.difference([1.0, 1.2], [0.0, 0.2])
    assert (diff, verdict) == (pytest.approx(1.0), "real") and se == pytest.approx(0.1414, 1e-3)


def test_rules_are_compared_with_the_average_and_policies_with_the_local_state():
    rows = (
        _rows("d-average-k4-m1-os-local", "average", {0: [0.5, 0.8]}, optimizer_state="local")
        + _rows("d-bmuf-k4-m1-os-local", "bmuf", {0: [0.6, 0.9]}, optimizer_state="local")
        + _rows("d-average-k4-m1-os-average", "average", {0: [0.4, 0.6]}, optimizer_state="average")
        + _rows(
            "d-average-k8-m1-os-average",
            "average",
            {0: [0.3, 0.5]},
            optimizer_state="average",
            segments=8,
        )
    )
    text = report.report(rows)
    to_average = text.split("### Gap to the average at the same K")[1].split("###")[0]
    assert "| d-bmuf-k4-m1-os-local | +0.1000 (one seed: no error bar) |" in to_average
    assert "d-average-k4" not in to_average  # the references themselves have no row
    to_local = text.split("### Gap to the local optimizer state")[1]
    assert "| d-average-k4-m1-os-average | -0.1000 (one seed" in to_local
    assert "d-average-k8" not in to_local  # no local run at K = 8 to compare with
    assert "### Gap to one worker" not in text  # no one-worker run


def test_time_to_target_is_each_seeds_epochs_times_the_settings_seconds_per_epoch():
    rows = _rows("d-single-k1-m1", "single", {0: [0.7, 0.8], 1: [0.8, 0.9]}) + _rows(
        "d-none-k4-m1", "none", {0: [0.5, 0.6]}
    )
    seconds = {"d-single-k1-m1": 60.0, "d-none-k4-m1": 30.0}
    text = report.report(rows, target=0.8, seconds=seconds)
    assert "| setting | reached | epochs | s per epoch | minutes to target |" in text
    # seeds reach 0.8 after 2 and 1 epochs: 2 and 1 minutes at 60 s per epoch
    assert "| d-single-k1-m1 | 2 of 2 | 1.5000 ± 0.7071 | 60.0 | 1.50 ± 0.71 |" in text
    assert "| d-none-k4-m1 | 0 of 1 |  | 30.0 | – |" in text
    assert "minutes to target" not in report.report(rows, target=0.8)


def test_the_gap_to_one_worker_survives_the_round_trip_through_the_csv(tmp_path):
    """Read back, counts are numbers like 1.0: the report still finds each setting's one
    worker, by the values of its fields, and not the one of another optimizer."""
    rows = (
        _rows("d-single-k1-m1-momentum", "single", {0: [0.5, 0.8]}, optimizer="momentum")
        + _rows("d-single-k1-m1-adam", "single", {0: [0.9, 0.9]}, optimizer="adam")
        + _rows(
            "d-average-k4-m1-momentum-os-local",
            "average",
            {0: [0.4, 0.7]},
            optimizer="momentum",
            optimizer_state="local",
        )
    )
    report.write_csv(rows, tmp_path / "history.csv")
    text = report.report(report.read_csv(tmp_path / "history.csv"), target=0.8)
    gap = [ln for ln in text.splitlines() if ln.startswith("| d-average-k4-m1-momentum-os-local |")]
    assert gap[-2].count("-0.1000 (one seed") == 2  # against momentum's one worker, both epochs


def test_figures_show_each_setting_as_its_mean_with_a_band_over_seeds():
    rows = _rows("d-single-k1-m1", "single", {0: [0.5, 0.7], 1: [0.7, 0.9]}) + _rows(
        "d-average-k4-m1", "average", {0: [0.4, 0.6]}
    )
    fig = plots.figures(rows, experiments.STUDY_RULES)["d_merge_vs_nomerge_k4"]
    ax = fig.axes[2]  # validation accuracy
    lines = {line.get_gid(): line for line in ax.get_lines()}
    assert set(lines) == {"d-single-k1-m1", "d-average-k4-m1"}
    np.testing.assert_allclose(lines["d-single-k1-m1"].get_ydata(), [0.6, 0.8])
    assert len(ax.collections) == 1  # one band: only one worker ran with several seeds


def test_legends_say_what_each_curve_is_rather_than_its_run_name():
    rows = (
        _rows("d-single-k1-m1", "single", {0: [0.5, 0.7]})
        + _rows("d-average-k4-m1", "average", {0: [0.4, 0.6]})
        + _rows("d-none-k4-m1", "none", {0: [0.3, 0.5]})
        + _rows("d-bmuf-k4-m1", "bmuf", {0: [0.45, 0.65]})
    )
    figures = plots.figures(rows, experiments.STUDY_RULES)
    ax = figures["d_merge_vs_nomerge_k4"].axes[-1]
    assert sorted(t.get_text() for t in ax.get_legend().get_texts()) == [
        "K = 4, average",
        "K = 4, never merged",
        "one worker",
    ]
    labels = {line.get_gid(): line.get_label() for line in figures["d_rules_k4"].axes[0].lines}
    assert labels["d-bmuf-k4-m1"] == "K = 4, BMUF"


@pytest.mark.slow
def test_a_study_with_seeds_skew_and_momentum_end_to_end(db, schema, tmp_path):
    if db.dispatch:
        pytest.skip("the study's bookkeeping is the same in both dispatch modes")
    url = db.url.render_as_string(hide_password=False)
    argv = [
        "converge",
        "--dataset",
        "mnist-sample",
        "--segments",
        "2",
        "--merge",
        "single,average",
        "--seeds",
        "0,1",
        "--skew",
        "0.5",
        "--optimizer",
        "momentum",
        "--optimizer-state",
        "local",
        "--learning-rate",
        "0.02",
        "--iterations",
        "1",
        "--target",
        "0.2",
        "--out",
        str(tmp_path),
        "--database",
        url,
        "--schema",
        schema,
    ]
    assert cli.main(argv) == 0
    text = (tmp_path / "report.md").read_text()
    assert "| mnist-sample-average-k2-m1-momentum-os-local-skew0.5 | 2 |" in text
    assert "± " in text and "segment 1:" in text
    from gpcnn.data.tables import describe

    info = describe(db, f"{schema}_images.mnist_sample_k2_skew0_5_s1_train")
    assert info.distribution == "label-skew" and info.skew == 0.5
    assert sum(info.images_per_segment) == 4000 and len(set(info.images_per_segment)) == 2


def test_plan_names_rule_options_and_merge_schedules_and_checks_options_before_any_work():
    common = {"optimizer": "momentum", "model": "bn-cnn", "optimizer_states": ["local"]}
    with pytest.raises(ValueError, match=r"mu=0\.01 is not an option: bmuf takes eta"):
        experiments.plan("d", [8], ["bmuf", "fedprox"], [1], 15, merge_options=[{"mu": 0.01}])
    with pytest.raises(ValueError, match="mu=-1 is out of range"):
        experiments.plan("d", [8], ["fedprox"], [1], 15, merge_options=[{"mu": -1}])
    with pytest.raises(ValueError, match="sync runs a fixed count"):
        experiments.plan("d", [2], ["sync"], [[2, 1]], 2)
    with pytest.raises(ValueError, match="merges per epoch 0"):
        experiments.plan("d", [2], ["average"], [0], 2)
    specs = experiments.plan("d", [8], ["single", "bmuf"], [1, 2, [8, 8, 1]], 15, **common)
    assert {s.name: s.iterations for s in specs} == {
        "d-single-k1-m1-bn-cnn-momentum": 15,  # the names without options or schedule: as before
        "d-bmuf-k8-m1-bn-cnn-momentum-os-local": 15,
        "d-single-k1-m2-bn-cnn-momentum": 30,
        "d-bmuf-k8-m2-bn-cnn-momentum-os-local": 30,
        "d-single-k1-m8-8-1-bn-cnn-momentum": 29,  # 8 + 8 + 13 merges
        "d-bmuf-k8-m8-8-1-bn-cnn-momentum-os-local": 29,
    }
    options = [{"mu": 0.01}, {"mu": 0.1}]
    proxes = experiments.plan("d", [4], ["fedprox"], [1], 1, merge_options=options)
    assert [s.name for s in proxes] == ["d-fedprox-k4-m1-mu0.01", "d-fedprox-k4-m1-mu0.1"]
    post_local = specs[-1]
    back = experiments.RunSpec(**json.loads(json.dumps(dataclasses.asdict(proxes[1]))))
    assert back == proxes[1] and back.merge_options == (("mu", 0.1),)
    back = experiments.RunSpec(**json.loads(json.dumps(dataclasses.asdict(post_local))))
    assert back == post_local and back.schedule == (8, 8, 1)


def test_the_command_line_reads_merge_schedules_and_option_values():
    args = cli.build_parser().parse_args(
        [
            "converge",
            "--dataset",
            "mnist-sample",
            "--merges-per-epoch",
            "1,8/8/1",
            "--merge-option",
            "mu=0.01,0.1",
            "--merge-option",
            "nesterov=false",
        ]
    )
    assert args.merges_per_epoch == [1, [8, 8, 1]]
    assert study_arguments.option_sets(args.merge_option) == [
        {"mu": 0.01, "nesterov": False},
        {"mu": 0.1, "nesterov": False},
    ]
    assert study_arguments.option_sets([]) == [{}]
    for bad in (["--merges-per-epoch", "8/x"], ["--merge-option", "mu"]):
        with pytest.raises(SystemExit):
            cli.build_parser().parse_args(["converge", "--dataset", "mnist-sample", *bad])


def test_one_worker_at_one_merge_per_epoch_is_the_reference_of_more_merges_and_schedules():
    rows = (
        _rows("d-single-k1-m1", "single", {0: [0.5, 0.8]})
        + _rows("d-bmuf-k4-m2", "bmuf", {0: [0.4, 0.7]}, merges_per_epoch=2)
        + _rows(
            "d-average-k4-m8-1-mu0.1",
            "average",
            {0: [0.6, 0.9]},
            early_merges="8",
            merge_options="mu0.1",
        )
    )
    to_single = report.report(rows).split("### Gap to one worker")[1]
    assert "| d-bmuf-k4-m2 | -0.1000 (one seed" in to_single
    assert "| d-average-k4-m8-1-mu0.1 | +0.1000 (one seed" in to_single
    labels = {
        line.get_gid(): line.get_label()
        for line in plots.figures(rows, experiments.STUDY_RULES)["d_rules_k4"].axes[0].lines
    }
    assert labels["d-average-k4-m8-1-mu0.1"] == "K = 4, average mu0.1, merges per epoch 8, then 1"


def test_a_study_of_rule_options_and_a_merge_schedule_end_to_end(db, schema, tmp_path):
    if db.dispatch:
        pytest.skip("the study's bookkeeping is the same in both dispatch modes")
    url = db.url.render_as_string(hide_password=False)
    argv = [
        "converge",
        "--dataset",
        "mnist-sample",
        "--segments",
        "2",
        "--merge",
        "fedprox",
        "--merge-option",
        "mu=0.1",
        "--merges-per-epoch",
        "2/1",
        "--iterations",
        "2",
        "--out",
        str(tmp_path),
        "--database",
        url,
        "--schema",
        schema,
    ]
    assert cli.main(argv) == 0
    done = json.loads((tmp_path / "runs" / "mnist-sample-fedprox-k2-m2-1-mu0.1.json").read_text())
    assert [r["epoch"] for r in done["history"]] == [0.5, 1.0, 2.0]  # 2 merges, then 1
    newest = max(r["run_id"] for r in runs.list_runs(db))
    params = runs.show_run(db, newest)["params"]
    assert params["merge_options"] == {"mu": 0.1} and params["merges_per_epoch"] == [2, 1]
    assert "| mnist-sample-fedprox-k2-m2-1-mu0.1 | 1 |" in (tmp_path / "report.md").read_text()


def test_plan_runs_each_shared_sample_and_refuses_a_bad_fraction_before_any_work():
    specs = experiments.plan(
        "d", [1, 4], ["single", "average"], [1], 3, skews=[0.1], shared_samples=[None, 0.05]
    )
    names = {s.name for s in specs}
    assert names == {
        "d-single-k1-m1",
        "d-average-k4-m1-skew0.1",
        "d-average-k4-m1-skew0.1-shared0.05",
    }
    with pytest.raises(TableError, match=r"0 < p <= 0\.5"):
        experiments.plan("d", [4], ["average"], [1], 1, shared_samples=[0.7])
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["converge", "--dataset", "d", "--shared-sample", "2"])


@pytest.mark.slow
def test_a_study_with_a_shared_sample_trains_every_segment_on_its_rows_and_the_sample(
    db, schema, tmp_path
):
    if db.dispatch:
        pytest.skip("the study's bookkeeping is the same in both dispatch modes")
    url = db.url.render_as_string(hide_password=False)
    argv = [
        "converge",
        "--dataset",
        "mnist-sample",
        "--segments",
        "2",
        "--merge",
        "average",
        "--skew",
        "0.5",
        "--shared-sample",
        "none,0.05",
        "--iterations",
        "1",
        "--out",
        str(tmp_path),
        "--database",
        url,
        "--schema",
        schema,
    ]
    assert cli.main(argv) == 0
    text = (tmp_path / "report.md").read_text()
    assert "mnist-sample-average-k2-m1-skew0.5-shared0.05" in text
    from gpcnn.data.tables import describe

    base = describe(db, f"{schema}_images.mnist_sample_k2_skew0_5_train")
    shared = describe(db, f"{schema}_images.mnist_sample_k2_skew0_5_sh0_05")
    assert shared.shared_images == 200  # 5 % of 4,000, on each of the 2 segments
    own = [n - shared.shared_images for n in shared.images_per_segment]
    assert own == list(base.images_per_segment)
