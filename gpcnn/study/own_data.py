"""The convergence study on the user's own data and model (``gpcnn converge --table``): a table of
images already in the database, one row per image as MADlib's preprocessor takes it, packed afresh
for each K asked for (``pack_table``, dealt IID from the run's seed, or with the rows of one value
of a column on one segment: ``distribute_by``, the layout a source table keeps), and a model from the model
library by name or one of the study's named models; the runs, report and figures are the study's.

Everything that can be refused is refused before any work (``check_source``): a missing table or
column, a model name that is neither, a model whose input or classes do not match the rows. The
packed copies live in ``<gpcnn schema>_images`` under the source's name, are reused by a resumed
study and are dropped at its end unless kept (``drop_copies``).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from gpcnn.data.packing import pack_table
from gpcnn.data.tables import TableError, TableName, describe, drop_table, resolved_name
from gpcnn.engines import Database
from gpcnn.engines.identifiers import MAX_NAME_BYTES
from gpcnn.engines.packing_sql import PackingSource, column_types
from gpcnn.estimator.named_models import MODELS
from gpcnn.serving import model_library
from gpcnn.study.specs import RunSpec


@dataclass(frozen=True)
class SourceTable:
    """A table of images in the database and how ``pack_table`` reads it: its columns of pixels,
    labels and ids, pixels in 0..1 (``normalized``), the labels in class order (default: sorted),
    and the table the runs validate on (the same columns; default: the packed copy trained on,
    so the accuracy is then the merged model's on its own training rows)."""

    table: str
    x_column: str = "x"
    y_column: str = "y"
    id_column: str = "id"
    normalized: bool = False
    class_values: tuple | None = None
    validation_table: str | None = None


def model_for(db: Database, name: str, image_shape, classes: int) -> Any:
    """The study's named model built for the table, or the model stored under ``name`` in the
    model library (with its stored weights, if any). A named model wins over a stored one of the
    same name."""
    if name in MODELS:
        return MODELS[name](tuple(image_shape), classes)
    return model_library.load_model(db, name)


def is_library_model(name: str) -> bool:
    return name not in MODELS


def check_source(
    db: Database, source: SourceTable, model: str, layouts: Sequence[str] = ()
) -> None:
    """Refuse, before any work: a missing table or column (of the source or the validation
    table, or a ``distribute_by`` column of ``layouts`` in the source), a model that is neither
    a named model nor stored in the library, a stored model whose input does not take the rows'
    images or whose units are not the labels' classes."""
    stored = None
    if is_library_model(model):
        try:
            stored = model_library.load_model(db, model)
        except ValueError as e:
            raise ValueError(
                f"{e}; or name one of the study's models: {', '.join(MODELS)}"
            ) from None
    tables = [source.table] + ([source.validation_table] if source.validation_table else [])
    with db.connect() as conn:
        for table in tables:
            queries = _queries(db, conn, table, source, layouts if table == source.table else ())
            if stored is not None:
                _check_fits(conn, queries, table, source, stored)


def _is_image_table(db: Database, name: TableName) -> bool:
    try:
        describe(db, name)
    except TableError:
        return False
    return True


def _queries(
    db: Database, conn, table: str, source: SourceTable, layouts: Sequence[str] = ()
) -> PackingSource:
    name = resolved_name(db.backend, TableName.parse(table))
    types = column_types(conn, name.sql(db.backend))
    if not types:
        raise TableError(f"no table {name}: --table names a table of images, one row per image")
    if _is_image_table(db, name):
        raise TableError(
            f"{name} is an image table gpcnn loaded or packed (buffers of many images each): "
            "--table takes a table of one row per image, as MADlib's preprocessor does; give the "
            "table it was made from (gpcnn.read_images reads this one back into arrays)"
        )
    columns = {"x": source.x_column, "y": source.y_column, "id": source.id_column}
    missing = [f"{role}={column!r}" for role, column in columns.items() if column not in types]
    missing += [f"distribute_by={column!r}" for column in layouts if column not in types]
    if missing:
        raise TableError(
            f"{name} has no column {', '.join(missing)}: its columns are {', '.join(types)}"
        )
    return PackingSource(
        db.backend,
        name.sql(db.backend),
        source.x_column,
        source.y_column,
        source.id_column,
        types[source.x_column],
    )


def _check_fits(conn, queries: PackingSource, table: str, source: SourceTable, model) -> None:
    shape = tuple(model.input_shape[1:])
    lengths = queries.lengths(conn)
    if lengths and lengths[0][0] != math.prod(shape):
        raise ValueError(
            f"the model takes images of shape {shape} ({math.prod(shape)} values), but the row "
            f"of {table} with id {lengths[0][1]} holds {lengths[0][0]}: choose another model"
        )
    classes = len(source.class_values or queries.class_values(conn))
    units = int(model.output_shape[-1])
    if units != classes:
        raise ValueError(
            f"the model has {units} output units, but {table} has {classes} classes: choose "
            "another model"
        )


def copy_name(schema: str, source: str, spec: RunSpec, split: str) -> str:
    """The packed copy of ``source`` a run trains (``train``: per K and seed) or validates on, in
    the study's schema beside gpcnn's ``schema``: the source's name (and, for a ``distribute_by``
    layout, a tag of its column), cut to fit gpcnn's limit on table names with a hash of the
    whole name when it is too long."""
    suffix = ""
    if split == "train":
        suffix = f"_k{spec.segments}" + (f"_s{spec.seed}" if spec.seed else "")
        if spec.distribute_by is not None:  # a short tag: the column's name may be long
            suffix += "_by" + hashlib.sha1(spec.distribute_by.encode()).hexdigest()[:4]
    suffix += f"_{split}"
    base = re.sub(r"[^a-z0-9]+", "_", source.lower()).strip("_")
    room = MAX_NAME_BYTES - len(suffix)
    if len(base) > room:
        digest = hashlib.sha1(source.encode()).hexdigest()[:6]
        base = f"{base[: room - 7]}_{digest}"
    return f"{schema}_images.{base}{suffix}"


class _PackColumns(TypedDict):
    """The arguments of ``pack_table`` that the train and test copies share."""

    x_column: str
    y_column: str
    id_column: str
    shape: tuple[int, ...] | None
    normalized: bool
    replace: bool


def packed_copies(db: Database, source: SourceTable, spec: RunSpec) -> tuple[str, str]:
    """(train, validation) image tables for ``spec``: the source packed to K segments from the
    run's seed, IID or by ``spec.distribute_by`` (its images of a stored model's input shape;
    else square, as ``pack_table`` guesses), reused when a resumed study packed it already; the
    validation table packed once with the training copy's class names (or the training copy
    itself)."""
    train = copy_name(db.schema, source.table, spec, "train")
    shape = model_library.load_model(db, spec.model).input_shape[1:] if spec.library_model else None
    common: _PackColumns = {
        "x_column": source.x_column,
        "y_column": source.y_column,
        "id_column": source.id_column,
        "shape": None if shape is None else tuple(shape),
        "normalized": source.normalized,
        "replace": True,
    }
    info = _existing(db, train, spec.segments)
    if info is None:
        info = pack_table(
            db,
            source.table,
            train,
            segments=spec.segments,
            seed=spec.seed,
            class_values=source.class_values,
            distribute_by=spec.distribute_by,
            **common,
        )
    if source.validation_table is None:
        return train, train
    test = copy_name(db.schema, source.validation_table, spec, "test")
    if _existing(db, test, None) is None:
        pack_table(db, source.validation_table, test, class_values=info.class_names, **common)
    return train, test


def _existing(db: Database, table: str, segments: int | None):
    try:
        info = describe(db, table)
    except TableError:
        return None
    return info if segments is None or info.segments == segments else None


def drop_copies(db: Database, source: SourceTable, specs: Sequence[RunSpec]) -> list[str]:
    """Drop the packed copies of the ``specs``' runs; the names dropped."""
    names = {copy_name(db.schema, source.table, spec, "train") for spec in specs}
    if source.validation_table is not None:
        names |= {copy_name(db.schema, source.validation_table, spec, "test") for spec in specs}
    return [name for name in sorted(names) if drop_table(db, name, missing_ok=True)]
