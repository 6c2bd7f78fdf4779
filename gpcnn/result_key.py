"""What a run's result depends on: the digest of the parameters that change it (``result_key``),
which resume matches on. A module every layer may read: the fit compares keys, the catalog stores
them, and the first step of the tables' migrations computes them for runs stored before keys
were."""

from __future__ import annotations

import hashlib
import json

# Parameters that do not change what a run computes: a run may be resumed with other values.
NON_RESULT_PARAMS = frozenset(
    {
        "progress",  # gpcnn 0.1
        "verbose",
        "database",
        "schema",  # gpcnn 0.1
        "iterations",
        "warm_start",
        "validation_table",
        "validation_data",  # gpcnn 0.1
        "validation_freq",
        "label_skew",  # the table's, recorded by fit: the table is matched by its name
    }
)


def result_key(params: dict) -> str:
    """A digest of the parameters that change the result (what resume matches on)."""
    kept = {k: v for k, v in params.items() if k not in NON_RESULT_PARAMS}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()[:32]
