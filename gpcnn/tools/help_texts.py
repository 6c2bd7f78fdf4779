"""How each subcommand introduces itself: a one-line summary in ``gpcnn --help``, the same as its
own description, and examples after its options (``gpcnn <command> --help``)."""

from __future__ import annotations

import argparse

# The options every database command takes, described once (``gpcnn --help``).
DATABASE_OPTIONS = (
    "Every command that uses the database takes --database URL (default: $GPCNN_DATABASE_URL, "
    "else the embedded PostgreSQL), --schema (gpcnn's own objects, default gpcnn) and --dispatch "
    "(how iterations reach the segments; 'statement' runs PostgreSQL as Greenplum does)."
)


def subcommand(sub, name: str, summary: str, *examples: str) -> argparse.ArgumentParser:
    """The parser of ``gpcnn <name>``: ``summary`` as its help line and description, and its
    ``examples`` (command lines, with a comment after ``#`` if one helps) after the options."""
    lines = "\n".join(f"  {example}" for example in examples)
    return sub.add_parser(
        name,
        help=summary,
        description=summary[0].upper() + summary[1:] + ".",
        epilog=f"examples:\n{lines}" if examples else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
