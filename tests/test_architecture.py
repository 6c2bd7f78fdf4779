"""The layers of gpcnn, read from the code's own imports (ast, nothing imported or run).

Each layer is a folder of ``gpcnn/``; a module may import its own layer and the layers below it,
never one above (docs/design.md, Layers). The in-database layer needs nothing but the standard
library, numpy and TensorFlow; only the engine layer talks to the driver; only the command line
imports the study.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "gpcnn"

# Bottom to top. ``version``, ``deprecation`` and ``result_key`` are modules every layer may read;
# ``gpcnn`` and its public modules (``gpcnn.datasets``, ``gpcnn.models``) are the facade users import.
LAYERS = (
    "version",
    "deprecation",
    "result_key",
    "kernel",
    "engines",
    "data",
    "fit",
    "serving",
    "estimator",
    "madlib",
    "study",
    "tools",
)
FACADE = {"gpcnn", "gpcnn.datasets", "gpcnn.models"}
DRIVER = {"sqlalchemy", "psycopg2"}
# plpy: PL/Python's own module, there in every server process that runs the kernel
IN_DATABASE_ALLOWED = {"numpy", "tensorflow", "keras", "plpy"}


@dataclass(frozen=True)
class Import:
    source: str  # the importing module, dotted
    target: str  # the imported module, dotted (a name imported from a package counts as a module)
    at_load: bool  # at module level, not inside a function
    line: int


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_of(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def known_modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imports_of(path: Path, modules: dict[str, Path]) -> list[Import]:
    source = module_name(path)
    package = package_of(source, path)
    found = []

    def visit(node: ast.AST, at_load: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inside = at_load and not isinstance(
                child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
            )
            if isinstance(child, ast.Import):
                for alias in child.names:
                    found.append(Import(source, alias.name, inside, child.lineno))
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                    base_name = ".".join(base + ([child.module] if child.module else []))
                else:
                    base_name = child.module or ""
                for alias in child.names:
                    candidate = f"{base_name}.{alias.name}"
                    target = candidate if candidate in modules else base_name
                    found.append(Import(source, target, inside, child.lineno))
            visit(child, inside)

    visit(ast.parse(path.read_text(), str(path)), True)
    return found


MODULES = known_modules()
IMPORTS = [i for path in MODULES.values() for i in imports_of(path, MODULES)]
INTERNAL = [i for i in IMPORTS if i.target.split(".")[0] == "gpcnn"]


def layer_of(module: str) -> str | None:
    """The layer a module of gpcnn belongs to; None for the package facade ``gpcnn`` itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def rank(module: str) -> int:
    return LAYERS.index(layer_of(module))


def test_every_module_of_gpcnn_lies_in_a_layer():
    outside = [m for m in MODULES if m not in FACADE and layer_of(m) not in LAYERS]
    assert not outside, f"modules outside the layers {LAYERS}: {outside}"


def test_no_module_imports_a_layer_above_its_own():
    upward = [
        f"{i.source} -> {i.target} (line {i.line}{'' if i.at_load else ', inside a function'})"
        for i in INTERNAL
        if i.source not in FACADE and i.target not in FACADE and rank(i.target) > rank(i.source)
    ]
    assert not upward, "imports that point upwards:\n" + "\n".join(upward)


def test_no_module_imports_the_package_facade():
    """``gpcnn/__init__.py`` and the public modules import the layers: a module of a layer that
    imports them back imports upwards."""
    back = [
        f"{i.source} imports {i.target} (line {i.line})"
        for i in INTERNAL
        if i.target in FACADE and i.source not in FACADE
    ]
    assert not back, f"modules importing the gpcnn facade: {back}"


def test_the_imports_between_gpcnns_modules_have_no_cycle():
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for i in INTERNAL:
        if i.target in graph and i.target != i.source:
            graph[i.source].add(i.target)
    # A package imports its own modules to re-export them; that edge is no cycle.
    for m in graph:
        graph[m] = {t for t in graph[m] if not t.startswith(m + ".")}
    state: dict[str, int] = {}
    cycle: list[str] = []

    def walk(node: str, path: list[str]) -> bool:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycle.extend([*path[path.index(nxt) :], nxt] if nxt in path else [node, nxt])
                return True
            if nxt not in state and walk(nxt, [*path, nxt]):
                return True
        state[node] = 2
        return False

    for start in sorted(graph):
        if start not in state and walk(start, [start]):
            break
    assert not cycle, "an import cycle: " + " -> ".join(cycle)


def test_only_the_engine_layer_imports_the_database_driver():
    outside = [
        f"{i.source} imports {i.target} (line {i.line})"
        for i in IMPORTS
        if i.target.split(".")[0] in DRIVER and layer_of(i.source) != "engines"
    ]
    assert not outside, "\n".join(outside)


def test_the_in_database_layer_imports_only_the_standard_library_numpy_and_tensorflow():
    allowed = set(sys.stdlib_module_names) | IN_DATABASE_ALLOWED | {"__future__"}
    kernel = [i for i in IMPORTS if layer_of(i.source) == "kernel"]
    foreign = [
        f"{i.source} imports {i.target} (line {i.line})"
        for i in kernel
        if i.target.split(".")[0] not in allowed and not (i.target.startswith("gpcnn.kernel"))
    ]
    assert not foreign, "\n".join(foreign)


def test_the_in_database_modules_import_each_other_relatively():
    """The bundle loads them as a private package inside the server, where ``gpcnn`` is absent."""
    absolute = [
        f"{i.source} line {i.line}"
        for i in INTERNAL
        if layer_of(i.source) == "kernel" and i.line in _absolute_lines(MODULES[i.source])
    ]
    assert not absolute, absolute


def _absolute_lines(path: Path) -> set[int]:
    return {
        node.lineno
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Import | ast.ImportFrom) and not getattr(node, "level", 0)
    }


def test_only_the_command_line_imports_the_study():
    users = {
        i.source
        for i in INTERNAL
        if layer_of(i.target) == "study" and layer_of(i.source) != "study"
    }
    assert users <= {"gpcnn.tools.study_commands"}, f"the study is imported by {sorted(users)}"


def test_no_module_is_imported_under_another_name():
    renamed = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            for alias in node.names:
                imported = f"{node.module or ''}.{alias.name}".lstrip(".")
                is_module = any(m == imported or m.endswith("." + imported) for m in MODULES)
                if is_module and alias.asname and alias.asname.lstrip("_") != alias.name:
                    renamed.append(f"{name}: {alias.name} as {alias.asname}")
    assert not renamed, renamed


@pytest.mark.parametrize("layer", LAYERS[3:])  # the folders, above the three modules
def test_each_layer_says_what_it_is_for(layer):
    init = PACKAGE / layer / "__init__.py"
    assert init.exists() and ast.get_docstring(ast.parse(init.read_text())), layer


def documented_layout() -> set[str]:
    """The module paths the developers' page lists under Layout, read from its indented tree."""
    page = (ROOT / "docs" / "development.md").read_text()
    section = page[page.index("## Layout") :]
    block = section.split("```")[1]
    folders: list[str] = []
    listed = set()
    for line in block.splitlines()[1:]:
        if not line.strip():
            continue
        depth = (len(line) - len(line.lstrip())) // 2
        entry = line.split()[0]
        del folders[depth - 1 :]
        if entry.endswith("/"):
            folders.append(entry.rstrip("/"))
        else:
            listed.add("/".join([*folders, entry]))
    return listed


def test_the_documented_layout_lists_exactly_the_modules_of_the_tree():
    tree = {str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if p.name != "__init__.py"}
    listed = documented_layout()
    assert tree - listed == set(), f"docs/development.md's Layout lacks {sorted(tree - listed)}"
    assert listed - tree == set(), (
        f"docs/development.md's Layout lists modules that are gone: {sorted(listed - tree)}"
    )


def design_layers() -> dict[str, set[str]]:
    """Layer -> the modules (and sub-packages, with a trailing ``/``) that docs/design.md's Layers
    table names in its second column."""
    page = (ROOT / "docs" / "design.md").read_text()
    rows = {}
    for line in page.splitlines():
        cells = line.split("|")
        if len(cells) > 3 and cells[1].strip().startswith("`") and cells[1].strip().endswith("/`"):
            layer = cells[1].strip().strip("`").rstrip("/")
            rows[layer] = {name for name in cells[2].split("`")[1::2]}
    return rows


def test_the_design_pages_layers_table_names_every_module_of_each_layer():
    documented = design_layers()
    assert set(documented) == set(LAYERS[3:])
    for layer, listed in documented.items():
        folder = PACKAGE / layer
        tree = {p.stem for p in folder.glob("*.py") if p.name != "__init__.py"}
        tree |= {p.name + "/" for p in folder.iterdir() if (p / "__init__.py").exists()}
        assert listed == tree, (
            f"docs/design.md's {layer}/ row: lacks {sorted(tree - listed)}, "
            f"names what is gone {sorted(listed - tree)}"
        )
