"""The measured numbers of the study's pages are rendered from the committed results
(``gpcnn.study.doc_numbers``): rendering them again changes nothing, a marked number whose source is
missing fails, one key reads the same wherever it is marked, the sections said to be generated hold
no typed measurement, and the rule lists follow the registry. No database: the results are files.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

from gpcnn.fit.rules import MergeRule, register_rule, unregister_rule
from gpcnn.study import doc_numbers, rule_docs
from gpcnn.study.doc_numbers import MissingSource
from gpcnn.study.doc_sources import facts

ROOT = Path(__file__).resolve().parents[1]

# The sections whose every measured number is marked: (page, first line, the heading after it).
GENERATED = (
    ("README.md", "## Does it converge?", "## Documentation"),
    ("docs/index.md", "## Does it converge?", "```{toctree}"),
    ("docs/convergence.md", "**Status", "## How it is run"),
    ("docs/merge.md", "## The answer for a CNN with BatchNorm", "## The model hopper"),
)
# A decimal number outside a marker, unless it is a setting the study chose (α = 0.1, μ 0.01) or
# SCAFFOLD's bytes per merge against the average's, which its formula fixes (docs/merge.md).
TYPED = re.compile(r"(?<![α=μ] )(?<!lr )\b\d+\.\d+(?! times the bytes)")


@pytest.fixture(scope="module")
def fact():
    return facts(ROOT)


def test_rendering_the_committed_pages_again_changes_nothing(fact):
    stale = doc_numbers.differences(ROOT, fact)
    assert not stale, "run `gpcnn study-docs`: " + "; ".join(
        f"{span.page}:{span.line} {span.key} holds {span.text!r}, renders {text!r}"
        for span, text in stale
    )


def test_one_key_reads_the_same_wherever_it_is_marked():
    assert doc_numbers.disagreements(ROOT) == {}


def test_the_facts_stated_in_several_pages_share_their_keys():
    """The headline numbers (the README, the home page, convergence.md, merge.md) are one key each,
    not several computations that could drift apart."""
    pages = {page: doc_numbers.spans(page, (ROOT / page).read_text()) for page in doc_numbers.PAGES}
    keys = {page: {span.key for span in found} for page, found in pages.items()}
    headline = keys["README.md"] & keys["docs/index.md"]
    assert len(headline) >= 5
    assert headline <= keys["docs/convergence.md"]


@pytest.mark.parametrize(("page", "start", "end"), GENERATED)
def test_the_generated_sections_hold_no_typed_measurement(page, start, end):
    text = (ROOT / page).read_text()
    section = text[text.index(start) : text.index(end, text.index(start))]
    typed = TYPED.findall(doc_numbers.SPAN.sub("", section))
    assert typed == [], f"{page}: numbers typed beside the markers: {typed}"


def test_no_number_marker_begins_a_line():
    """A line that begins with an HTML comment opens an HTML block in Markdown, which would cut the
    paragraph around the number; only a block span (a table, its text set off by blank lines) may."""
    for page in doc_numbers.PAGES:
        for span in doc_numbers.spans(page, (ROOT / page).read_text()):
            if not span.text.startswith("\n"):
                line = (ROOT / page).read_text().split("\n")[span.line - 1]
                assert not line.lstrip().startswith("<!-- n:"), f"{page}:{span.line} {span.key}"


def test_a_marked_number_whose_source_is_missing_fails(tmp_path):
    page = tmp_path / "docs" / "convergence.md"
    page.parent.mkdir()
    page.write_text("ends <!-- n:gap/a/average-k4-os-local/single-k1/15/pts -->0.7<!-- /n -->\n")
    with pytest.raises(MissingSource, match=r"history\.csv is not there"):
        doc_numbers.differences(tmp_path, facts(tmp_path), ["docs/convergence.md"])


def test_a_key_that_names_no_computation_fails(fact):
    with pytest.raises(MissingSource, match="no computation 'median'"):
        fact("median/a/average-k4-os-local/15")
    with pytest.raises(MissingSource, match="has no setting 'average-k5'"):
        fact("acc/a/average-k5/15")


def test_rendering_replaces_the_spans_and_keeps_the_markers():
    text = "a <!-- n:x -->1<!-- /n --> b <!-- n:y -->\n\n| t |\n\n<!-- /n --> c"
    rendered = doc_numbers.render(text, {"x": "2", "y": "3"}.__getitem__)
    assert rendered == "a <!-- n:x -->2<!-- /n --> b <!-- n:y -->3<!-- /n --> c"
    assert [(s.key, s.line) for s in doc_numbers.spans("p", text)] == [("x", 1), ("y", 1)]


def test_the_verdict_words_are_the_studys_rule(fact):
    """Part a: block momentum at K = 4 is within noise of one worker at epoch 15 (+0.11 ± 0.42
    points), the average is not (−0.66 ± 0.17)."""
    assert fact("gap/a/bmuf-k4-os-local/single-k1/15/verdict") == "within noise"
    assert fact("gap/a/bmuf-k4-os-local/single-k1/15/says") == "within noise of"
    assert fact("gap/a/average-k4-os-local/single-k1/15/pm") == "−0.66 ± 0.17"
    assert fact("gap/a/average-k4-os-local/single-k1/15/says") == "0.7 points below"


@dataclass
class _Clipped(MergeRule):
    """A rule registered only here: the lists of rules in the pages must grow with it."""

    state_layout: ClassVar[str | None] = "the clipped mean's memory (one model-sized vector)"


def test_a_rule_registered_later_appears_in_the_rule_pages():
    register_rule("clipped")(_Clipped)
    try:
        assert rule_docs.names().endswith("`median`, `clipped`")
        assert "`clipped`" in rule_docs.merged_in_database()
        assert "| `clipped` | weights only | – |" in rule_docs.table()
        assert "the clipped mean's memory" in rule_docs.table()
    finally:
        unregister_rule("clipped")
    assert "clipped" not in rule_docs.names()
    assert rule_docs.unknown_rule_message().endswith("fednova, trimmed-mean, median`")
    assert rule_docs.from_gradients() == "`scaffold`"
