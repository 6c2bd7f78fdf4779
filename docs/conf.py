"""Sphinx configuration of gpcnn's documentation site (``make docs``).

Sphinx with numpydoc and the PyData theme, as scikit-learn, pandas and NumPy use: the API reference is
generated from the numpydoc docstrings, the pages are the Markdown files of ``docs/`` (MyST), and the
example notebook is executed at build time against the embedded PostgreSQL (myst-nb).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))  # the checkout's gpcnn, whatever the environment has installed

from gpcnn import __version__  # noqa: E402

project = "gpcnn"
author = "the gpcnn developers"
copyright = "2026, the gpcnn developers"
version = release = __version__

extensions = [
    "myst_nb",  # Markdown pages (MyST) and executed notebooks
    "numpydoc",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.intersphinx",
    "cli_reference",  # docs/_ext: the `gpcnn` command's reference from its argparse parser
]
sys.path.insert(0, str(HERE / "_ext"))

# .rst first: autosummary writes its generated pages with the first suffix.
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = ["_build", "_ext", "_templates", "jupyter_execute"]
templates_path = ["_templates"]
root_doc = "index"

# The API reference: one page per public name, from numpydoc docstrings.
autosummary_generate = True
autodoc_typehints = "none"  # numpydoc's Parameters sections carry the types
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
intersphinx_mapping = {}  # offline: the build reaches no other site

# MyST: headings get anchors so pages can link to sections; `$` math for the merge formulas.
myst_heading_anchors = 3
myst_enable_extensions = ["dollarmath", "colon_fence"]

# The notebook runs at build time against the embedded cluster (or $GPCNN_DATABASE_URL); its
# parameters cell is set by ``_copy_notebook`` below (NOTEBOOK_PARAMETERS: 12,000 images, 3 iterations).
nb_execution_mode = "force"
nb_execution_timeout = 900
nb_execution_raise_on_error = True
nb_execution_show_tb = True

html_theme = "pydata_sphinx_theme"
html_title = f"gpcnn {release}"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "secondary_sidebar_items": ["page-toc"],
    "footer_start": ["copyright"],
    "footer_end": [],
}
html_static_path: list[str] = []
html_show_sourcelink = False

# No page may link to a missing one: every warning (a missing document, a broken cross-reference, a
# duplicate label) fails `make docs` (-W).
nitpicky = False
suppress_warnings: list[str] = []


def _copy_notebook(app) -> None:
    """examples/convergence.ipynb becomes docs/examples/convergence.ipynb with the build's parameters."""
    source = json.loads((ROOT / "examples" / "convergence.ipynb").read_text())
    for cell in source["cells"]:
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            cell["source"] = NOTEBOOK_PARAMETERS
    target = HERE / "examples" / "convergence.ipynb"
    target.parent.mkdir(exist_ok=True)
    target.write_text(json.dumps(source, indent=1) + "\n")


NOTEBOOK_PARAMETERS = (
    "# Parameters of this page's build (the notebook's own default trains on all 60,000 images)\n"
    'DATASET = "fashion-mnist"\n'
    "LIMIT = 12000\n"
    "SEGMENTS = 4\n"
    "ITERATIONS = 3\n"
    'RULES = ["average", "bmuf"]\n'
    "FORECAST_EPOCHS = 4\n"
    "LEARNING_RATE = 0.05\n"
    f"DATABASE = {os.environ.get('GPCNN_DATABASE_URL')!r}\n"
    'SCHEMA = "gpcnn_docs"\n'
)


def setup(app) -> None:
    app.connect("builder-inited", _copy_notebook)
