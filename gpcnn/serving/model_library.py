"""The model library: Keras models stored in the database under a name (MADlib's model
architecture table), their architecture and optionally their weights, to list, load, delete, fit
(``GreenplumCNN(model=name)``) and predict with (``gpcnn.predict``).

What is stored is the model's JSON, which is rebuilt in safe mode when it is stored and when it is
loaded, as every model the segments build is: no code travels with a model, so a ``Lambda`` layer
is refused. Frozen layers (``trainable=False``) stay frozen: the flag is part of the JSON.
"""

from __future__ import annotations

from typing import Any

from gpcnn.deprecation import database_argument
from gpcnn.engines import Database, connect
from gpcnn.engines.library_sql import Library, StoredModel
from gpcnn.kernel import wire
from gpcnn.kernel.keras_setup import rebuilt


def _safe(model_json: str, name: str) -> Any:
    """The model of ``model_json`` rebuilt in safe mode, or an error saying what to change."""
    try:
        return rebuilt(model_json)
    except Exception as e:
        raise ValueError(
            f"model {name!r} cannot be rebuilt in safe mode ({type(e).__name__}: {e}): gpcnn "
            "runs no code that comes with a model, so replace Lambda layers and custom objects "
            "with built-in layers"
        ) from e


def _checked_name(name: str) -> str:
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"a stored model needs a non-empty name, got {name!r}")
    return name


@database_argument
def store_model(
    database: Database | str | None,
    name: str,
    model: Any,
    *,
    weights: bool = True,
    description: str | None = None,
    replace: bool = False,
) -> str:
    """Store a Keras model under a name: its architecture, and its weights unless told not to.

    MADlib's ``load_keras_model``. The model is refused before anything is written if it does not
    rebuild in Keras's safe mode (a ``Lambda`` layer) or its weights are not float32.

    Parameters
    ----------
    database : Database, str or None
        A handle from ``gpcnn.connect``, a URL, or None: ``$GPCNN_DATABASE_URL``, else the
        embedded PostgreSQL.
    name : str
        The library name (letters, digits, ``-``, ``_`` and ``.``).
    model : keras.Model
        The model; only its architecture and weights are stored, not its optimizer.
    weights : bool, default True
        Store the weights too; without them a fit starts from the weights Keras initialises.
    description : str, optional
        Free text shown by ``list_models``.
    replace : bool, default False
        Overwrite a model stored under the same name (otherwise that is an error).

    Returns
    -------
    str
        ``name``, checked.

    Raises
    ------
    ValueError
        For a bad name, a name taken (without ``replace``), or a model that does not rebuild in
        safe mode.

    Examples
    --------
    >>> gpcnn.store_model(db, "fm-base", models.small_cnn(), description="for fm.train")
    'fm-base'
    >>> GreenplumCNN("fm-base", database=db).fit("fm.train")  # doctest: +SKIP
    """
    name = _checked_name(name)
    model_json = model.to_json()
    wire.manifest(_safe(model_json, name))  # refuses mixed precision
    vector = wire.flatten(model.get_weights()) if weights else None
    db = connect(database)
    with db.begin() as conn:
        Library(conn, db.backend).store(name, model_json, vector, description, replace)
    return name


@database_argument
def list_models(database: Database | str | None = None) -> list[dict]:
    """The models stored in the library.

    Parameters
    ----------
    database : Database, str or None
        A handle from ``gpcnn.connect``, a URL, or None: ``$GPCNN_DATABASE_URL``, else the
        embedded PostgreSQL.

    Returns
    -------
    list of dict
        One per model: ``name``, ``owner`` (the role that stored it: yours, or a role you
        hold), ``description``, ``weights`` (whether weights are stored), ``stored_bytes``,
        ``created_at`` (ISO 8601) and ``gpcnn_version``.
    """
    db = connect(database)
    with db.begin() as conn:
        entries = Library(conn, db.backend).entries()
    return [_summary(e) for e in entries]


def _summary(entry: StoredModel) -> dict:
    return {
        "name": entry.name,
        "owner": entry.owner,
        "description": entry.description,
        "weights": entry.has_weights,
        "stored_bytes": entry.stored_bytes,
        "created_at": entry.created_at.isoformat(),
        "gpcnn_version": entry.gpcnn_version,
    }


@database_argument
def load_model(database: Database | str | None, name: str) -> Any:
    """A stored model, rebuilt in safe mode (uncompiled), with its stored weights if any.

    Parameters
    ----------
    database : Database, str or None
        A handle from ``gpcnn.connect``, a URL, or None: ``$GPCNN_DATABASE_URL``, else the
        embedded PostgreSQL.
    name : str
        Its name in the library.

    Returns
    -------
    keras.Model
        A new, uncompiled model.

    Raises
    ------
    ValueError
        When no model is stored under ``name``.
    """
    db = connect(database)
    with db.begin() as conn:
        entry = Library(conn, db.backend).load(_checked_name(name))
    if entry is None:
        raise ValueError(
            f"no model {name!r} in {db.schema}.models: store one with gpcnn.store_model(db, "
            f"{name!r}, model) (gpcnn.list_models(db) lists them)"
        )
    model = _safe(entry.model_json, name)
    if entry.weights is not None:
        wire.set_model_weights(model, entry.weights)
    return model


@database_argument
def delete_model(database: Database | str | None, name: str) -> bool:
    """Delete a stored model and its weights.

    Parameters
    ----------
    database : Database, str or None
        A handle from ``gpcnn.connect``, a URL, or None: ``$GPCNN_DATABASE_URL``, else the
        embedded PostgreSQL.
    name : str
        Its name in the library.

    Returns
    -------
    bool
        Whether a model of that name was there.
    """
    db = connect(database)
    with db.begin() as conn:
        return Library(conn, db.backend).delete(_checked_name(name))


def keras_model(db: Database | str | None, model: Any) -> Any:
    """A Keras model as it is, or the one stored under that name (``GreenplumCNN(model=name)``,
    ``gpcnn.predict(db, name, ...)``)."""
    return load_model(db, model) if isinstance(model, str) else model
