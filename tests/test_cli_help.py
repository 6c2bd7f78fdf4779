"""The command line speaks to users: every subcommand has a description and an example, the shared
database options are described once, and no help text names the study's parts or a work item."""

from __future__ import annotations

import argparse
import re

import pytest

from gpcnn.tools import cli


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = cli.build_parser()
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


@pytest.mark.parametrize("name", sorted(subcommands()))
def test_every_subcommand_has_a_description_and_an_example(name):
    text = subcommands()[name].format_help()
    description = subcommands()[name].description
    assert description and description[0].isupper() and description.endswith(".")
    assert f"examples:\n  gpcnn {name}" in text


def test_the_database_options_are_described_once_at_the_top():
    top = cli.build_parser().format_help()
    assert "--dispatch" in top and "'statement' runs PostgreSQL as Greenplum does" in top
    assert all("as Greenplum does" not in p.format_help() for p in subcommands().values())


def test_no_help_text_names_a_study_part_or_a_work_item():
    texts = [cli.build_parser().format_help()] + [p.format_help() for p in subcommands().values()]
    for text in texts:
        assert not re.search(r"\bpart [a-l]\b|\bissue\b|\(mop:", text), text
