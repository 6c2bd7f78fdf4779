"""Engines and merge rules from other packages reach gpcnn through entry points: a tiny package,
installed into a temporary path as pip would (a module and its dist-info), names an engine in the
group ``gpcnn.engines`` and a rule in ``gpcnn.rules``; a fresh interpreter that imports gpcnn has
them registered, the command line offers the rule, ``gpcnn doctor`` names them, and a plug-in that
fails to import is skipped with a warning instead of breaking gpcnn."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpcnn.engines import ENGINE_PLUGINS
from gpcnn.fit.rules import RULE_PLUGINS
from gpcnn.tools.environment import EnvironmentReport

ROOT = Path(__file__).resolve().parents[1]
MODULES = {
    "rule.py": """
        from gpcnn.fit.rules import Average, register_rule

        @register_rule("plugin-average", "a plug-in's average")
        class PluginAverage(Average):
            pass
    """,
    "engine.py": """
        from gpcnn.engines import PostgresBackend, register_engine

        class PluginBackend(PostgresBackend):
            pass

        register_engine("plugin-postgresql", PluginBackend)
    """,
    "broken.py": """
        raise ImportError("this plug-in needs a library that is not installed")
    """,
}
ENTRY_POINTS = f"""
[{RULE_PLUGINS}]
plugin-average = gpcnn_test_plugin.rule

[{ENGINE_PLUGINS}]
plugin-postgresql = gpcnn_test_plugin.engine
broken = gpcnn_test_plugin.broken
"""
PROBE = """
import json, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import gpcnn.fit.rules
    from gpcnn.engines import engine_registry
from gpcnn.fit.rules import RULES
print(json.dumps({
    "rules": list(RULES),
    "engines": engine_registry.engine_names(),
    "plugins": engine_registry.PLUGINS,
    "warnings": [str(w.message) for w in caught if "plug-in" in str(w.message)],
}))
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """A directory holding the plug-in package and its dist-info, as an install would leave them."""
    root = tmp_path_factory.mktemp("site")
    package = root / "gpcnn_test_plugin"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name, source in MODULES.items():
        (package / name).write_text(textwrap.dedent(source))
    info = root / "gpcnn_test_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: gpcnn-test-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    return root


def run(site: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, env=env, timeout=300, check=False
    )


@pytest.mark.slow
def test_an_installed_packages_engine_and_rule_are_registered_and_a_broken_one_is_skipped(site):
    done = run(site, "-c", PROBE)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["rules"][-1] == "plugin-average" and "average" in found["rules"]
    assert found["engines"][-1] == "plugin-postgresql"
    assert found["plugins"] == {
        ENGINE_PLUGINS: ["plugin-postgresql"],
        RULE_PLUGINS: ["plugin-average"],
    }
    (warning,) = found["warnings"]
    assert "'broken'" in warning and "not installed" in warning


@pytest.mark.slow
def test_the_command_line_offers_a_plug_ins_rule(site):
    done = run(site, "-m", "gpcnn.tools.cli", "converge", "--help")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "plugin-average" in "".join(done.stdout.split())  # argparse wraps at the hyphen


def test_the_doctor_names_the_plug_ins_it_loaded():
    report = EnvironmentReport(
        engine_kind="postgresql",
        dispatch="sessions",
        server_version="PostgreSQL 15.18 on x86_64",
        segments=2,
        installed="0.2.0+abc",
        plugins={ENGINE_PLUGINS: ["plugin-postgresql"], RULE_PLUGINS: []},
    )
    assert f"plug-ins: {ENGINE_PLUGINS} plugin-postgresql" in str(report).splitlines()
