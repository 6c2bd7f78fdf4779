"""examples/iris.py, MADlib's iris MLP in gpcnn, runs end to end: raw tables packed as feature
rows, a fit on the segments, predictions written into a table with the species' names."""

import importlib.util
from pathlib import Path

import pytest
import sqlalchemy as sa

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "iris.py"


@pytest.mark.slow
def test_the_iris_example_learns_the_species_and_writes_them_into_a_table(db, schema, capsys):
    spec = importlib.util.spec_from_file_location("iris_example", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    url = db.url.render_as_string(hide_password=False)
    accuracy = example.main(["--database", url, "--schema", schema, "--iterations", "20"])
    assert accuracy >= 0.9
    assert "test accuracy" in capsys.readouterr().out
    with db.connect() as conn:
        names = conn.execute(
            sa.text(f"SELECT class_name, count(*) FROM {example.PREDICTIONS} GROUP BY 1")
        ).all()
    assert sum(n for _, n in names) == 30  # every fifth of the 150 flowers
    assert {name for name, _ in names} <= {"setosa", "versicolor", "virginica"}
