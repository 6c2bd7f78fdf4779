"""The ``gpcnn-cli`` directive: the ``gpcnn`` command's reference, rendered from its argparse parser.

The parser is the one source of the command's options, so the page cannot drift from the code: each
sub-command becomes a section with its help line and its ``--help`` text.
"""

from __future__ import annotations

import argparse

from docutils import nodes
from sphinx.util.docutils import SphinxDirective

from gpcnn.tools.cli import build_parser


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    helps = {choice.dest: choice.help for choice in action._choices_actions}
    return [(name, helps.get(name) or "", sub) for name, sub in action.choices.items()]


class CliReference(SphinxDirective):
    """``.. gpcnn-cli::`` renders ``gpcnn --help`` and every sub-command's ``--help``."""

    def run(self) -> list[nodes.Node]:
        parser = build_parser()
        parser.prog = "gpcnn"
        out: list[nodes.Node] = [nodes.literal_block(text=parser.format_help())]
        for name, help_line, sub in _subcommands(parser):
            section = nodes.section(ids=[f"gpcnn-{name}"])
            section += nodes.title(text=f"gpcnn {name}")
            section += nodes.paragraph(text=help_line[:1].upper() + help_line[1:] + ".")
            sub.prog = f"gpcnn {name}"
            section += nodes.literal_block(text=sub.format_help())
            out.append(section)
        return out


def setup(app) -> dict:
    app.add_directive("gpcnn-cli", CliReference)
    return {"parallel_read_safe": True}
