"""The merge rules as plug-ins: how the K segment models of an iteration become the next model(s).

A merge rule turns the K segment models of one iteration into the next model(s). MADlib's rule, the
default, is the image-count-weighted average of ALL weights (trainable and not: BatchNorm moving
statistics are weights too). The weighted average is streamed inside the database
(``gpcnn.kernel.averaging``); the rules here act on its result between iterations, in the client,
and are never shipped into the database.

One module per rule, each registered by name (``register_rule``) in ``RULES``, the one list that
the estimator, the study, its plots and the command line take theirs from:
``average`` (MADlib), ``bmuf``, ``easgd``, ``none``, ``fedprox``, ``scaffold``, ``fedadam``,
``fedyogi``, ``fednova``, and the robust ``trimmed-mean`` and ``median`` (``robust``: what
they share). Momentum-like rules act on trainable weights only; non-trainable weights (BatchNorm
moving mean and variance) take the plain weighted average, so a variance can never be pushed
negative; or, with every rule's ``batchnorm_statistics="pooled"``, the moving variance is the
union's (``pooling``). The robust rules take their statistic of every weight, statistics too.

A rule declares its options (its dataclass fields, their defaults and ranges), its stored state
(``state_layout``) and what it adds to every local step in the database: the kernel's
local-step hooks it names in ``in_database`` (``gpcnn.kernel.local_steps``: ``proximal``,
``correction``), the extras those read from each segment's start (``start_extras``) and give
back to ``update``, by name (the start and trained vectors' parts: ``gpcnn.kernel.layout``).
Only code that ``gpcnn install`` ships runs in the database: a rule defined outside gpcnn (a
plug-in, registered with ``register_rule``, in a package that names its module in the entry-point
group ``gpcnn.rules``) combines the registered hooks, with a client-side
part of its own (tests/test_rule_plugins.py defines one).
"""

from gpcnn.fit.rules.merge_rule import MergeRule, Range, SegmentModels
from gpcnn.fit.rules.rule_registry import (
    RULES,
    check_options,
    make_rule,
    register_rule,
    state_layout,
    unregister_rule,
)

# The built-in rules, registered in this order as they are imported.
from gpcnn.fit.rules.average import Average  # isort: skip
from gpcnn.fit.rules.bmuf import BlockMomentum  # isort: skip
from gpcnn.fit.rules.easgd import ElasticAveraging  # isort: skip
from gpcnn.fit.rules.none import NoMerge  # isort: skip
from gpcnn.fit.rules.fedprox import FedProx  # isort: skip
from gpcnn.fit.rules.scaffold import Scaffold  # isort: skip
from gpcnn.fit.rules.fedadam import FedAdam  # isort: skip
from gpcnn.fit.rules.fedyogi import FedYogi  # isort: skip
from gpcnn.fit.rules.fednova import FedNova  # isort: skip
from gpcnn.fit.rules.trimmed_mean import TrimmedMean  # isort: skip
from gpcnn.fit.rules.median import Median  # isort: skip

from gpcnn.engines.engine_registry import load_plugins  # isort: skip

RULE_PLUGINS = "gpcnn.rules"  # the entry-point group of merge rules from other packages
load_plugins(RULE_PLUGINS)  # after the built-in rules, in the order installed

__all__ = [
    "RULES",
    "RULE_PLUGINS",
    "Average",
    "BlockMomentum",
    "ElasticAveraging",
    "FedAdam",
    "FedNova",
    "FedProx",
    "FedYogi",
    "Median",
    "MergeRule",
    "NoMerge",
    "Range",
    "Scaffold",
    "SegmentModels",
    "TrimmedMean",
    "check_options",
    "make_rule",
    "register_rule",
    "state_layout",
    "unregister_rule",
]
