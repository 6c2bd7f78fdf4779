"""The forecast's pilots as stored runs: where they train (``pilot_table``: a table's copy dealt
over K segments), the one-worker setting of a fit (``ONE_WORKER``), and the one-worker pilot a
later fit of the same table, model and parameters measures its early warning against
(``one_worker_reference``, gathered with the rest of what the warning stands on by
``early_basis``, or ``stored_basis`` for a stored run)."""

from __future__ import annotations

import re

from gpcnn.data.tables import TableName, describe
from gpcnn.engines import Database
from gpcnn.engines.catalog import Catalog
from gpcnn.fit import runs
from gpcnn.fit.forecast.early_warning import CALIBRATED_LAYERS, EarlyBasis, layer_signature
from gpcnn.fit.forecast.pilot_law import PILOT_EPOCHS

# The rule parameters of one worker: on one segment a merge changes nothing, so its pilot has
# the estimator's defaults here and the fit's values for everything else.
ONE_WORKER = {"merge": "average", "merge_options": None, "merges_per_epoch": 1, "local_epochs": 1}
_COPY = re.compile(r"_pilot_k\d+(_shared[\dp]+)?_s\d+$")


def pilot_table(table: TableName, segments: int, seed: int, shared: float = 0.0) -> TableName:
    """The copy of ``table`` for the pilots of ``seed``, beside it: dealt IID over ``segments``,
    or with a shared sample of the share ``shared`` added (``add_shared_sample``); a copy's own
    copies are named from the table it copies."""
    base = _COPY.sub("", table.name)
    sample = f"_shared{100 * shared:g}".replace(".", "p") if shared else ""
    return TableName(table.schema, f"{base}_pilot_k{segments}{sample}_s{seed}")


def epoch_seconds(db: Database, table: str) -> float | None:
    """Seconds per epoch of the newest finished run of ``table`` (None: none finished): what a
    pilot of it is expected to cost before it starts."""
    with db.begin() as conn:
        catalog = Catalog(conn, db.backend)
        catalog.ensure_tables()
        done = [
            r.run_id
            for r in catalog.run_summaries(None)
            if r.table == table and r.status == "finished"
        ]
        rows = catalog.iterations(max(done)) if done else []
    if not rows or not rows[-1]["epoch"]:
        return None
    return sum(r["seconds"] for r in rows) / rows[-1]["epoch"]


def one_worker_reference(
    db: Database, table: TableName, params: dict, model_json: str
) -> tuple[int, float] | None:
    """(run id, validation accuracy at epoch 3) of the one-worker pilot of a fit of ``table``
    with the stored ``params`` and ``model_json``: a finished run on the one-segment copy for
    the fit's seed, with the fit's result-changing parameters (its rule's aside) and validation
    table, reaching ``PILOT_EPOCHS``; None if there is none, or the fit has no seed or
    validation table to match."""
    seed, validated_on = params.get("seed"), params.get("validation_table")
    if seed is None or validated_on is None:
        return None
    copy = pilot_table(table, 1, int(seed))
    alone = {**params, **ONE_WORKER}
    run_id, history = runs.finished_like(
        db, str(copy), alone, model_json, PILOT_EPOCHS, validation_table=validated_on
    )
    row = next((r for r in history if r["epoch"] >= PILOT_EPOCHS), None)
    if row is None or row.get("val_accuracy") is None:
        return None
    return run_id, float(row["val_accuracy"])


def early_basis(
    db: Database,
    table: TableName,
    params: dict,
    model_json: str,
    *,
    final_epoch: float,
    segments: int,
) -> EarlyBasis:
    """What the early warning of a fit (or a stored run) of ``table`` stands on."""
    skew = params.get("label_skew") or {}
    return EarlyBasis(
        reference=one_worker_reference(db, table, params, model_json) if segments > 1 else None,
        calibrated=layer_signature(model_json) == CALIBRATED_LAYERS,
        final_epoch=final_epoch,
        segments=segments,
        skew_max=float(skew.get("max", 0.0)),
    )


def stored_basis(db: Database, shown: dict) -> EarlyBasis | None:
    """The early warning's basis of a stored run (``show_run``'s dict, up to its last stored
    epoch); None when its table is gone."""
    try:
        info = describe(db, shown["table"])
    except ValueError:  # TableError included: the table was dropped since
        return None
    with db.begin() as conn:
        run = Catalog(conn, db.backend).run(shown["run_id"])
    history = shown["history"]
    return early_basis(
        db,
        info.table,
        shown["params"],
        run.model_json if run is not None else "{}",
        final_epoch=history[-1]["epoch"] if history else 0.0,
        segments=info.segments,
    )
