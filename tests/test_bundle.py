"""What ``gpcnn install`` ships is the in-database layer alone: a client-side change (a merge rule,
the loop, the estimator) changes neither the shipped code nor its bundle id, so it never forces a
reinstall; a change to ``gpcnn/kernel`` does both."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpcnn import kernel
from gpcnn.engines import install

PACKAGE = Path(__file__).resolve().parent.parent / "gpcnn"


def test_the_bundle_is_every_module_of_the_kernel_and_nothing_else():
    shipped = [name for name, _ in install._sources()]
    in_folder = sorted(p.stem for p in (PACKAGE / "kernel").glob("*.py") if p.stem != "__init__")
    assert sorted(shipped) == in_folder
    assert shipped == list(kernel.BUNDLE)


def test_the_shipped_statements_carry_no_client_side_code():
    text = "\n".join(install.statements("gpcnn"))
    rules_source = (PACKAGE / "fit" / "rules" / "bmuf.py").read_text()
    assert "class BlockMomentum" in rules_source
    assert "class BlockMomentum" not in text
    assert "def weighted_average" in text  # the kernel's averaging is shipped


def _bundle_id_of_copy(tmp_path: Path, edit: str | None) -> str:
    """The bundle id computed by a fresh interpreter from a copy of the package, ``edit`` (a path
    inside ``gpcnn/``) changed by one appended comment."""
    root = tmp_path / (edit or "unchanged").replace("/", "_")
    shutil.copytree(PACKAGE, root / "gpcnn", ignore=shutil.ignore_patterns("__pycache__"))
    if edit is not None:
        with (root / "gpcnn" / edit).open("a") as f:
            f.write("\n# an edit\n")
    done = subprocess.run(
        [sys.executable, "-c", "from gpcnn.engines import install; print(install.bundle_id())"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root), "GPCNN_HOME": str(tmp_path)},
    )
    return done.stdout.strip()


@pytest.fixture(scope="module")
def unchanged(tmp_path_factory) -> str:
    return _bundle_id_of_copy(tmp_path_factory.mktemp("bundle"), None)


@pytest.mark.parametrize(
    "client_side", ["fit/rules/bmuf.py", "fit/training.py", "estimator/greenplum_cnn.py"]
)
def test_a_client_side_change_keeps_the_bundle_id(tmp_path, unchanged, client_side):
    assert _bundle_id_of_copy(tmp_path, client_side) == unchanged


@pytest.mark.parametrize(
    "in_database", ["kernel/averaging.py", "kernel/segment.py", "kernel/local_steps.py"]
)
def test_a_change_to_the_kernel_changes_the_bundle_id(tmp_path, unchanged, in_database):
    assert _bundle_id_of_copy(tmp_path, in_database) != unchanged
