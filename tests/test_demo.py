"""`gpcnn demo`, the quick start's main job, end to end: the same preset on the MNIST sample for
one iteration (the quick start itself runs Fashion-MNIST for five)."""

import pytest

from gpcnn.study import report
from gpcnn.tools import cli


@pytest.mark.slow
def test_the_demo_installs_reports_the_environment_and_writes_its_study(
    db, schema, tmp_path, capsys
):
    if db.dispatch:
        pytest.skip("the demo's preset is the same in both dispatch modes")
    url = db.url.render_as_string(hide_password=False)
    argv = [
        "demo",
        "--dataset",
        "mnist-sample",
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
    printed = capsys.readouterr().out
    assert printed.startswith("engine:") and "convergence study: 4 runs" in printed
    runs = {row["run"] for row in report.read_csv(tmp_path / "history.csv")}
    assert runs == {
        f"mnist-sample-{rule}-k{k}-m1"
        for rule, k in [("single", 1), ("none", 4), ("average", 4), ("bmuf", 4)]
    }
    assert sorted(p.name for p in tmp_path.glob("*.png")) and (tmp_path / "report.md").exists()
