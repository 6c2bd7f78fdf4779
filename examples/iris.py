"""MADlib's own deep-learning example, in gpcnn: an MLP on the 4 features of iris, from a table.

    .venv/bin/python examples/iris.py [--database URL] [--schema gpcnn] [--segments 2]

The 150 flowers (scikit-learn ships them: no download) go into two plain tables, one row per
flower (``id``, ``attributes real[]``, ``class_text``), as a MADlib user has them; every fifth
flower is held out for testing. ``pack_table`` packs each into an image table of feature rows
(``shape=(4,)``; the attributes divided by 10, MADlib's ``normalizing_const``, so that they lie in
0..1 as ``normalized=True`` stores them), ``GreenplumCNN`` trains a Dense(10)-Dense(10)-Dense(3)
Keras model on the segments, and ``predict`` writes the test flowers' classes into a table on the
segments, with the species' names (``class_name``), as ``madlib_keras_predict`` does.

The database is ``--database``, else ``$GPCNN_DATABASE_URL``, else the embedded PostgreSQL.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import sqlalchemy as sa
from sklearn.datasets import load_iris

import gpcnn
from gpcnn import GreenplumCNN
from gpcnn.models import keras_module

# In schema public, named with it: SQL sent through gpcnn's connections finds no table by the
# search path (docs/guide/privileges.md).
RAW = {"train": "public.iris_train_raw", "test": "public.iris_test_raw"}
PACKED = {"train": "public.iris_train_packed", "test": "public.iris_test_packed"}
PREDICTIONS = "public.iris_predict"
NORMALIZING_CONST = 10.0  # the attributes are 0.1..7.9 cm: /10 puts them in 0..1


def write_raw_tables(db: gpcnn.Database) -> None:
    """The flowers as MADlib's iris example has them: one row per flower."""
    iris = load_iris()
    species = [str(iris.target_names[t]) for t in iris.target]
    with db.begin() as conn:
        for split, table in RAW.items():
            conn.execute(sa.text(f"DROP TABLE IF EXISTS {table}"))
            conn.execute(
                sa.text(f"CREATE TABLE {table} (id int, attributes real[], class_text text)")
            )
            rows = [
                {"id": i, "attributes": [float(v) for v in iris.data[i]], "class_text": species[i]}
                for i in range(len(species))
                if (i % 5 == 0) == (split == "test")
            ]
            conn.execute(
                sa.text(f"INSERT INTO {table} VALUES (:id, :attributes, :class_text)"), rows
            )
            conn.execute(
                sa.text(f"UPDATE {table} SET attributes = array(SELECT unnest(attributes) / :c)"),
                {"c": NORMALIZING_CONST},
            )


def mlp():
    """MADlib's iris model: 4 inputs, two hidden layers of 10, 3 classes (seeded weights)."""
    keras = keras_module()
    keras.utils.set_random_seed(0)
    return keras.Sequential(
        [
            keras.Input((4,)),
            keras.layers.Dense(10, activation="relu"),
            keras.layers.Dense(10, activation="relu"),
            keras.layers.Dense(3, activation="softmax"),
        ]
    )


def main(argv: Sequence[str] | None = None) -> float:
    """Run the example; returns the test accuracy."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", help="SQLAlchemy URL (default: $GPCNN_DATABASE_URL)")
    parser.add_argument("--schema", default="gpcnn", help="gpcnn's schema in the database")
    parser.add_argument("--segments", type=int, default=2, help="segments to spread rows over")
    parser.add_argument("--iterations", type=int, default=20, help="merges (here: epochs)")
    args = parser.parse_args(argv)

    db = gpcnn.connect(args.database, schema=args.schema)
    print(f"gpcnn {gpcnn.install(db)} installed")
    write_raw_tables(db)
    train = gpcnn.pack_table(
        db,
        RAW["train"],
        PACKED["train"],
        x_column="attributes",
        y_column="class_text",
        id_column="id",
        shape=(4,),
        normalized=True,
        segments=args.segments,
        replace=True,
    )
    gpcnn.pack_table(
        db,
        RAW["test"],
        PACKED["test"],
        x_column="attributes",
        y_column="class_text",
        id_column="id",
        shape=(4,),
        normalized=True,
        segments=args.segments,
        replace=True,
        class_values=train.class_names,  # the training table's classes, in its order
    )
    print(f"packed {train.images} flowers of {train.num_classes} species: {train.class_names}")

    estimator = GreenplumCNN(
        mlp(),
        optimizer="adam",
        learning_rate=0.02,
        batch_size=8,
        iterations=args.iterations,
        seed=0,
        verbose=0,
        database=db,
    )
    with estimator:
        estimator.fit(PACKED["train"])
        accuracy = estimator.score(PACKED["test"])
        estimator.predict(PACKED["test"], output_table=PREDICTIONS, replace=True)
    with db.connect() as conn:
        rows = conn.execute(
            sa.text(
                f"SELECT p.id, p.class_name, r.class_text, p.prob FROM {PREDICTIONS} p "
                f"JOIN {RAW['test']} r ON r.id = p.id ORDER BY p.id LIMIT 5"
            )
        ).all()
    print(f"test accuracy {accuracy:.3f}; {PREDICTIONS} begins:")
    for row in rows:
        print(
            f"  flower {row.id:3d}: {row.class_name:<10} (truly {row.class_text}) p={row.prob:.2f}"
        )
    return accuracy


if __name__ == "__main__":
    main()
