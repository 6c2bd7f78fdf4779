"""examples/convergence.ipynb runs top to bottom (on tiny data: the parameters cell is replaced) and
is committed without outputs."""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parents[1] / "examples" / "convergence.ipynb"


def test_the_notebook_is_committed_without_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(not c.outputs and c.execution_count is None for c in code)
    assert [c for c in code if "parameters" in c.metadata.get("tags", [])]


def test_the_documentations_build_sets_every_parameter_the_notebook_has():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    (parameters,) = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    spec = importlib.util.spec_from_file_location("docs_conf", NOTEBOOK.parents[1] / "docs/conf.py")
    assert spec is not None and spec.loader is not None
    conf = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conf)

    def names(source: str) -> set[str]:
        return {t.id for node in ast.parse(source).body for t in getattr(node, "targets", [])}

    assert names(conf.NOTEBOOK_PARAMETERS) == names(parameters.source)


@pytest.mark.slow
def test_the_notebook_runs_top_to_bottom_on_tiny_data(db, schema, tmp_path):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    (parameters,) = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    url = db.url.render_as_string(hide_password=False)
    parameters.source = (
        'DATASET = "mnist-sample"\nLIMIT = 400\nSEGMENTS = 2\nITERATIONS = 3\n'
        'RULES = ["average", "bmuf"]\nLEARNING_RATE = 0.05\nFORECAST_EPOCHS = 4\n'
        f"DATABASE = {url!r}\nSCHEMA = {schema!r}\n"
    )
    NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": tmp_path}}
    ).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "average: run" in text and "bmuf: run" in text
    assert "best validation accuracy after 3 iterations" in text
    assert "average: drift ratio" in text and "bmuf: drift ratio" in text  # the diagnostics
    assert "at epoch 4 with 2 segments: about" in text  # the forecast
    assert "cheapest within 1 points" in text or "no setting gpcnn knows" in text  # the plan
    assert re.search(r"measured -?\d+\.\d: (inside|outside) the interval", text)  # the score
    assert any("image/png" in o.get("data", {}) for o in outputs)  # the figure, inline
