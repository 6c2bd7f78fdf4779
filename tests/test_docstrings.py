"""Every public name is documented in numpydoc, and every command of the CLI says what it does.

The public names are ``gpcnn.__all__``, ``gpcnn.datasets.__all__`` and ``gpcnn.models.__all__``, and
the public methods and properties of their classes, and the plug-in API (``PLUGIN_API``).
numpydoc's own validator checks them with the rules below; the API reference of the documentation
site is generated from the same docstrings.
"""

from __future__ import annotations

import argparse
import inspect

import pytest
from numpydoc.validate import validate

import gpcnn
import gpcnn.datasets
import gpcnn.models
from gpcnn.tools.cli import build_parser

# numpydoc's checks that a user of the reference would notice when broken. Left out: the style rules
# (SS05 "infinitive verb", SA01 "See Also", EX01 "Examples" for every name, PR07/RT03 descriptions
# for self-explanatory parameters such as ``batch_size : int, default 32``).
CHECKS = {
    "GL08": "no docstring",
    "SS01": "no summary line",
    "PR01": "a parameter is not documented",
    "PR02": "a documented parameter does not exist",
    "PR10": "a parameter's colon needs a space",
    "RT01": "no Returns section",
    "YD01": "no Yields section",
}
PUBLIC_MODULES = (gpcnn, gpcnn.datasets, gpcnn.models)
# The plug-in API (docs/api.md, "Plug-ins"): what a package implements and registers to add an
# engine, a merge rule or an image reader.
PLUGIN_API = (
    "gpcnn.engines.register_engine",
    "gpcnn.engines.unregister_engine",
    "gpcnn.engines.load_plugins",
    "gpcnn.engines.Backend",
    "gpcnn.engines.Dispatch",
    "gpcnn.engines.ServerFacts",
    "gpcnn.fit.rules.register_rule",
    "gpcnn.fit.rules.unregister_rule",
    "gpcnn.fit.rules.MergeRule",
    "gpcnn.fit.rules.Range",
    "gpcnn.data.sources.ImageSource",
)
# Methods of GreenplumCNN that come from its mixins (the same object, documented once there).
MIXED_IN = ("predict", "predict_proba", "evaluate", "score", "save", "load")


def public_names() -> list[str]:
    names = []
    for module in PUBLIC_MODULES:
        for name in module.__all__:
            obj = getattr(module, name)
            if name.isupper() or name.startswith("__"):
                continue  # constants and __version__
            qualified = f"{module.__name__}.{name}"
            names.append(qualified)
            if inspect.isclass(obj):
                members = [
                    m
                    for m, v in vars(obj).items()
                    if not m.startswith("_") and (inspect.isfunction(v) or isinstance(v, property))
                ]
                if obj is gpcnn.GreenplumCNN:
                    members += MIXED_IN
                names += [f"{qualified}.{m}" for m in sorted(set(members))]
    return names + list(PLUGIN_API)


@pytest.mark.parametrize("name", public_names())
def test_every_public_name_has_a_numpydoc_docstring(name):
    errors = [
        f"{code} ({CHECKS[code]}): {text}"
        for code, text in validate(name)["errors"]
        if code in CHECKS
    ]
    assert not errors, f"{name}:\n" + "\n".join(errors)


def test_the_public_names_cover_every_export():
    names = public_names()
    assert "gpcnn.GreenplumCNN.fit" in names and "gpcnn.list_runs" in names
    assert len(names) > 60


def commands(parser: argparse.ArgumentParser, prefix: str = "gpcnn"):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            for name, sub in action.choices.items():
                yield f"{prefix} {name}", helps.get(name), sub
                yield from commands(sub, f"{prefix} {name}")


@pytest.mark.parametrize(
    "command,help_line,parser",
    [pytest.param(*c, id=c[0]) for c in commands(build_parser())],
)
def test_every_command_and_option_of_the_cli_says_what_it_does(command, help_line, parser):
    assert help_line, f"{command} has no help line"
    silent = [
        "/".join(a.option_strings) or a.dest
        for a in parser._actions
        if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)) and not a.help
    ]
    assert not silent, f"{command}: options without help: {silent}"
