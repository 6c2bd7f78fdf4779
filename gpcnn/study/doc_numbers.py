"""Numbers in the documentation rendered from the stored results, never typed by hand.

A measured number in a Markdown page is a marked span::

    the average ends <!-- n:gap/a/average-k4-os-local/single-k1/15/pts -->0.7<!-- /n --> points below

The comments are invisible on the site and on GitHub; the key names the computation and its
source (``gpcnn.study.doc_facts``, ``doc_seconds``, ``doc_warning`` and ``doc_sources`` list the
keys), the text between the comments is what the key renders to. ``rewrite`` renders every span
of the pages again from the stored results, so that a part rerun updates its prose;
``differences`` says which spans differ, which a test runs on the committed pages
(``gpcnn study-docs --check``). A span may hold several lines: a generated table or list, set off
by blank lines.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

SPAN = re.compile(r"<!-- n:(?P<key>[^\s>]+) -->(?P<text>.*?)<!-- /n -->", re.DOTALL)

# The pages whose measured numbers are generated, relative to the repository's root.
PAGES = (
    "README.md",
    "docs/index.md",
    "docs/convergence.md",
    "docs/merge.md",
    "docs/design.md",
    "docs/guide/troubleshooting.md",
)


class MissingSource(LookupError):
    """A marked key that names no known computation, or whose stored result is not there."""


@dataclass(frozen=True)
class Span:
    """One marked number of a page: its key, the text it holds, and where (1-based line)."""

    page: str
    line: int
    key: str
    text: str


def spans(page: str, text: str) -> list[Span]:
    """Every marked span of ``text`` (the page named ``page``), in order."""
    return [
        Span(page, text.count("\n", 0, m.start()) + 1, m["key"], m["text"])
        for m in SPAN.finditer(text)
    ]


def render(text: str, fact: Callable[[str], str]) -> str:
    """``text`` with every marked span's content replaced by ``fact(key)``.

    Parameters
    ----------
    text : str
        A Markdown page.
    fact : callable
        A key -> its rendered text; raises ``MissingSource`` for a key it cannot compute.

    Returns
    -------
    str
        The page with its spans rendered; the markers themselves are kept.
    """
    return SPAN.sub(lambda m: f"<!-- n:{m['key']} -->{fact(m['key'])}<!-- /n -->", text)


def differences(
    root: Path, fact: Callable[[str], str], pages: Iterable[str] = PAGES
) -> list[tuple[Span, str]]:
    """Each span of ``pages`` (under ``root``) whose text is not what its key renders to now,
    with the rendered text."""
    found = []
    for page in pages:
        for span in spans(page, (root / page).read_text()):
            rendered = fact(span.key)
            if span.text != rendered:
                found.append((span, rendered))
    return found


def rewrite(root: Path, fact: Callable[[str], str], pages: Iterable[str] = PAGES) -> list[str]:
    """Render the spans of ``pages`` under ``root`` in place; the pages that changed."""
    changed = []
    for page in pages:
        path = root / page
        before = path.read_text()
        after = render(before, fact)
        if after != before:
            path.write_text(after)
            changed.append(page)
    return changed


def disagreements(root: Path, pages: Iterable[str] = PAGES) -> dict[str, list[Span]]:
    """Keys that hold different texts in different places of ``pages``: one fact stated twice,
    differently."""
    by_key: dict[str, list[Span]] = {}
    for page in pages:
        for span in spans(page, (root / page).read_text()):
            by_key.setdefault(span.key, []).append(span)
    return {key: found for key, found in by_key.items() if len({s.text for s in found}) > 1}
