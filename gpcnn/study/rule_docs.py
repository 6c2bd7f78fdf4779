"""What the documentation says about the merge rules, taken from their registry (``gpcnn.fit.rules``),
so that a rule registered tomorrow appears in every list, table and message of the pages.

Each rule is made with its default options at K = 4 (``make_rule``) and asked what it declares:
whether each segment's model comes back to the client (``needs_segments``), whether each segment
starts from a model of its own (``per_segment``), the state it keeps between merges beyond the model
(``state_layout``), and its local steps in the database (``in_database``, with the extras they send
and return: ``gpcnn.kernel.local_steps``). A rule whose local steps return extras keeps state that
the segments compute from their own steps, i.e. from their gradients (SCAFFOLD's control variates).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from gpcnn.fit import rules
from gpcnn.kernel import local_steps

SEGMENTS = 4  # the K the rules are made for; what they declare does not depend on it


def _rules() -> dict[str, rules.MergeRule]:
    return {name: rules.make_rule(name, np.ones(1, bool), SEGMENTS) for name in rules.RULES}


def listed(names: Sequence[str]) -> str:
    """``a``, ``b`` and ``c``, in Markdown code."""
    quoted = [f"`{name}`" for name in names]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]


def names() -> str:
    """Every rule, in the registry's order."""
    return ", ".join(f"`{name}`" for name in rules.RULES)


def merged_in_database() -> str:
    """The rules that need only the segments' average, summed inside the database."""
    return listed([name for name, rule in _rules().items() if not rule.needs_segments])


def per_key() -> str:
    """The rules that take each segment's model back to the client."""
    return listed([name for name, rule in _rules().items() if rule.needs_segments])


def own_start() -> str:
    """The rules whose segments each start from a model of their own."""
    return listed([name for name, rule in _rules().items() if rule.per_segment])


def from_gradients() -> str:
    """The rules whose local steps return state the segments compute from their steps."""
    found = [name for name, rule in _rules().items() if local_steps.returns(rule.in_database())]
    return listed(found) if found else "none"


def unknown_rule_message() -> str:
    """The error ``merge=`` with an unknown name raises, as the user sees it."""
    try:
        rules.check_options("mean", None, SEGMENTS)
    except ValueError as error:
        return f"`{error}`"
    raise AssertionError('merge="mean" was accepted')


def _steps(rule: rules.MergeRule) -> str:
    steps = rule.in_database()
    if not steps:
        return "–"
    extras = [
        *(f"reads `{e}` from its start" for e in local_steps.sends(steps)),
        *(f"returns `{e}`" for e in local_steps.returns(steps)),
    ]
    return ", ".join(f"`{s}`" for s in steps) + (f" ({'; '.join(extras)})" if extras else "")


def _needs(rule: rules.MergeRule) -> str:
    if local_steps.returns(rule.in_database()):
        return "state derived from the segments' gradients (what its local steps return)"
    return "weights only"


def table() -> str:
    """One row per rule: what it needs, where it runs, what it keeps (a Markdown table, set off by
    blank lines so that it parses inside its span)."""
    rows = [
        "| rule (`merge=`) | needs | local steps in the database | each segment's model back "
        "to the client | each segment starts from | kept between merges beyond the model |",
        "|---|---|---|---|---|---|",
    ]
    for name, rule in _rules().items():
        cells = [
            f"`{name}`",
            _needs(rule),
            _steps(rule),
            "yes" if rule.needs_segments else "no: averaged in the database",
            "its own model" if rule.per_segment else "the model",
            rule.state_layout or "–",
        ]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n\n" + "\n".join(rows) + "\n\n"


NAMED: dict[str, Callable[[], str]] = {
    "rules/names": names,
    "rules/merged-in-database": merged_in_database,
    "rules/per-key": per_key,
    "rules/own-start": own_start,
    "rules/from-gradients": from_gradients,
    "rules/unknown": unknown_rule_message,
    "rules/table": table,
}
