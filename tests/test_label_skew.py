"""Label skew where the data lives: counted on the server when a table
is loaded or packed, kept in the catalog and shown; ``pack_table(distribute_by=...)`` keeping
equal values together; ``redeal``; a shared sample beside every segment's own rows."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
import sqlalchemy as sa

import gpcnn
from gpcnn.data.dealing import class_counts, deal, deal_groups, share_sample
from gpcnn.data.label_skew import SKEW_THRESHOLD, measure_skew
from gpcnn.data.tables import TableError, describe, load_images
from gpcnn.engines import migrations
from gpcnn.engines.catalog import Catalog
from gpcnn.engines.label_skew_sql import segment_distances, skew_index
from gpcnn.engines.table_records import TableRecords
from gpcnn.tools import cli

SRC = "gpcnn_skew_test"


# -- the index, the dealing (no database) -----------------------------------------------------


def test_the_index_is_zero_for_equal_mixes_and_one_less_the_share_for_disjoint_classes():
    assert skew_index([[5, 5], [10, 10]]) == (0.0, 0.0)
    assert skew_index([[4, 0], [0, 4]]) == (0.5, 0.5)
    # the table's mix is 0.6, 0.2, 0.2: distances 1 - 6/10 and 1 - 4/10
    assert skew_index([[6, 0, 0], [0, 2, 2]]) == pytest.approx((0.6, (6 * 0.4 + 4 * 0.6) / 10))


def test_the_index_by_hand_weights_segments_by_their_images():
    counts = [[3, 1], [1, 3], [2, 2]]  # the table: 6 and 6, half and half
    assert segment_distances(counts) == [0.25, 0.25, 0.0]
    assert skew_index(counts) == (0.25, pytest.approx((4 * 0.25 + 4 * 0.25) / 12))


def test_equal_values_are_dealt_whole_and_the_segments_stay_even():
    groups = np.repeat(np.arange(7), [50, 40, 30, 20, 10, 10, 5])
    order, counts = deal_groups(groups, 3, seed=1)
    assert sorted(order.tolist()) == list(range(len(groups))) and sum(counts) == len(groups)
    shard_of = np.empty(len(groups), dtype=int)
    for k, shard in enumerate(np.split(order, np.cumsum(counts)[:-1])):
        shard_of[shard] = k
    for g in range(7):
        assert len(set(shard_of[groups == g])) == 1
    assert sorted(counts) == [50, 55, 60]  # 50, 40, 30 | +20, +10 | +10 | +5: the emptiest
    with pytest.raises(TableError, match="2 distinct values cannot give each of 3 segments"):
        deal_groups(np.array([0, 1, 1]), 3, seed=0)


def test_a_shared_sample_is_added_to_every_shard_and_the_shards_stay_as_dealt():
    order = np.random.default_rng(0).permutation(100)
    counts = [34, 33, 33]
    dealt, sizes, sample = share_sample(order, counts, 0.1, seed=0)
    assert sizes == [44, 43, 43] and len(sample) == 10 and len(set(sample.tolist())) == 10
    own = np.split(order, np.cumsum(counts)[:-1])
    for k, shard in enumerate(np.split(dealt, np.cumsum(sizes)[:-1])):
        assert sorted(shard.tolist()) == sorted([*own[k].tolist(), *sample.tolist()])
    again = share_sample(order, counts, 0.1, seed=0)
    np.testing.assert_array_equal(again[0], dealt)  # chosen by the seed
    assert not np.array_equal(share_sample(order, counts, 0.1, seed=1)[2], sample)


# -- counted on the server, kept, shown ---------------------------------------------------------


@pytest.fixture
def url(db):
    return db.url.render_as_string(hide_password=False)


@pytest.fixture(scope="module")
def skewed(db, schema):
    rng = np.random.default_rng(2)
    x = rng.integers(0, 256, (400, 4, 4), dtype=np.uint8)
    y = rng.integers(0, 5, 400)
    info = load_images(
        db,
        f"{SRC}.skewed",
        x,
        y,
        segments=4,
        buffer_size=30,
        seed=3,
        distribution="label-skew",
        skew=0.1,
        class_names=list("abcde"),
        replace=True,
        progress=False,
    )
    return x, y, info


def test_a_load_counts_each_segments_labels_on_the_server_and_keeps_its_skew(skewed):
    _, y, info = skewed
    order, counts = deal(y, 4, 3, "label-skew", 0.1)
    expected = class_counts(y, order, counts, 5)
    assert [list(c) for c in info.class_counts] == expected
    assert info.label_skew == skew_index(expected)
    assert info.label_skew.max > SKEW_THRESHOLD and info.shared_images == 0


def test_tables_show_and_doctor_print_the_skew_and_every_segments_mix(db, skewed, url, capsys):
    info = skewed[2]
    cli.main(["tables", "show", str(info.table), "--database", url, "--schema", db.schema])
    shown = capsys.readouterr().out
    assert f"label skew: {info.label_skew.max:.3f} at the most" in shown
    assert "a fit warns" in shown
    first = " ".join(map(str, info.class_counts[0]))
    assert f"{info.images_per_segment[0]:>9,}" in shown and first in shown
    cli.main(
        ["tables", "show", str(info.table), "--json", "--database", url, "--schema", db.schema]
    )
    [table] = json.loads(capsys.readouterr().out)
    assert table["label_skew"] == {"max": info.label_skew.max, "mean": info.label_skew.mean}
    assert [s["class_counts"] for s in table["segments"]] == [list(c) for c in info.class_counts]
    cli.main(["doctor", "--table", str(info.table), "--database", url, "--schema", db.schema])
    assert f"label skew: {info.label_skew.max:.3f}" in capsys.readouterr().out


def test_a_catalog_of_shape_7_gains_the_skew_of_tables_whose_counts_it_knows(db, skewed):
    schema = "gpcnn_skew_migration_test"
    old = gpcnn.connect(db.url.render_as_string(hide_password=False), schema=schema)
    with old.begin() as conn:
        conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {schema}, {schema}_staging CASCADE")
        Catalog(conn, old.backend).ensure_tables()
        conn.exec_driver_sql(
            f"ALTER TABLE {schema}.image_tables DROP COLUMN label_skew_max, "
            "DROP COLUMN label_skew_mean, DROP COLUMN shared_images"
        )
        conn.exec_driver_sql(f"UPDATE {schema}.schema_version SET version = 7")
        for name, counts in (("known", "{3,1,1,3,2,2}"), ("unknown", None)):
            conn.execute(
                sa.text(
                    f"INSERT INTO {schema}.image_tables (table_schema, table_name, image_shape, "
                    "num_classes, dist_keys, images_per_segment, buffer_size, images, "
                    "gpcnn_version, class_counts) VALUES ('s', :n, '{1,1,1}', 2, '{0,1,2}', "
                    "'{4,4,4}', 4, 12, 'x', CAST(:c AS bigint[]))"
                ),
                {"n": name, "c": counts},
            )
    with old.begin() as conn:
        catalog = Catalog(conn, old.backend)
        catalog.ensure_tables()
        assert catalog.shape() == migrations.SHAPE_VERSION == 10
        rows = {r.table_name: r for r in TableRecords(conn, old.backend).image_tables()}
    assert (rows["known"].label_skew_max, rows["known"].label_skew_mean) == (
        0.25,
        pytest.approx(8 * 0.25 / 12),
    )
    assert rows["unknown"].label_skew_max is None and rows["unknown"].shared_images == 0
    with old.begin() as conn:
        conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {schema}, {schema}_staging CASCADE")


def test_measure_skew_counts_a_table_again_into_the_catalog(db, skewed):
    info = skewed[2]
    with db.begin() as conn:
        TableRecords(conn, db.backend).update_image_table(
            info.table.schema, info.table.name, {"label_skew_max": None, "class_counts": None}
        )
    assert describe(db, info.table).label_skew is None
    again = measure_skew(db, info.table)
    assert again.label_skew == info.label_skew and again.class_counts == info.class_counts


# -- distribute_by, redeal, the shared sample ------------------------------------------------


def _source(db, n: int = 240):
    """(table, ids, images, labels, sites): one row per image, 12 sites of uneven size whose
    images are mostly of one class."""
    rng = np.random.default_rng(4)
    ids = rng.choice(10**6, n, replace=False)
    sites = rng.integers(0, 12, n)
    labels = np.where(rng.random(n) < 0.8, sites % 4, rng.integers(0, 4, n))
    x = rng.integers(0, 256, (n, 4, 4), dtype=np.uint8)
    table = f"{SRC}.rows"
    with db.begin() as conn:
        conn.exec_driver_sql(f"CREATE SCHEMA IF NOT EXISTS {SRC}")
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {table}")
        conn.exec_driver_sql(
            f"CREATE TABLE {table} (id bigint, img bytea, label integer, site text, note json)"
        )
        conn.execute(
            sa.text(f"INSERT INTO {table} VALUES (:id, :img, :label, :site, '{{}}')"),
            [
                {"id": int(i), "img": x[k].tobytes(), "label": int(labels[k]), "site": f"s{s}"}
                for k, (i, s) in enumerate(zip(ids, sites, strict=True))
            ],
        )
    return table, ids, x, labels, sites


@pytest.fixture(scope="module")
def rows(db, schema):
    return _source(db)


def _ids_by_key(db, table: str) -> dict[int, list[int]]:
    with db.connect() as conn:
        found = conn.execute(sa.text(f"SELECT __dist_key__, ids FROM {table}")).all()
    by_key: dict[int, list[int]] = {}
    for key, ids in found:
        by_key.setdefault(key, []).extend(np.frombuffer(ids, "<i8").tolist())
    return {k: sorted(v) for k, v in sorted(by_key.items())}


def _pack(db, source, target, **options):
    return gpcnn.pack_table(
        db,
        source,
        target,
        x_column="img",
        y_column="label",
        id_column="id",
        segments=4,
        buffer_size=16,
        replace=True,
        **options,
    )


def test_distribute_by_keeps_every_value_on_one_segment_and_measures_the_skew(db, rows):
    table, ids, _, _, sites = rows
    info = _pack(db, table, f"{SRC}.by_site", distribute_by="site")
    site_of = dict(zip(ids.tolist(), sites.tolist(), strict=True))
    placed = _ids_by_key(db, f"{SRC}.by_site")
    homes = [{site_of[i] for i in members} for members in placed.values()]
    assert sum(len(h) for h in homes) == 12  # no site on two segments
    assert sorted(i for members in placed.values() for i in members) == sorted(ids.tolist())
    assert info.distribution == "distribute_by" and info.source.endswith("distributed by site")
    iid = _pack(db, table, f"{SRC}.iid")
    assert info.label_skew.max > 2 * iid.label_skew.max


@pytest.mark.parametrize(
    ("column", "match"),
    [
        ("nope", r"distribute_by='nope' is not a column of"),
        ("a%b", "cannot name a column holding '%'"),
        (5, "distribute_by=5: a column name"),
        ("note", "cannot distribute by note"),
    ],
)
def test_a_bad_distribute_by_is_refused_before_anything_is_written(db, rows, column, match):
    target = f"{SRC}.refused"
    with pytest.raises(TableError, match=match):
        _pack(db, rows[0], target, distribute_by=column)
    with db.connect() as conn:
        assert conn.execute(sa.select(sa.func.to_regclass(target))).scalar() is None


@pytest.mark.parametrize("fraction", [0, -0.1, 0.6, True, "0.1"])
def test_a_bad_shared_sample_is_refused_before_any_work(db, fraction):
    with pytest.raises(TableError, match="shared_sample"):
        _pack(db, f"{SRC}.no_such_table", f"{SRC}.refused", shared_sample=fraction)
    with pytest.raises(TableError, match="shared_sample"):
        gpcnn.redeal(db, f"{SRC}.no_such_table", f"{SRC}.refused", shared_sample=fraction)


def test_with_a_shared_sample_each_segment_holds_its_own_rows_plus_the_same_sample(db, rows):
    table, ids, *_ = rows
    plain = _pack(db, table, f"{SRC}.plain", seed=5)
    shared = _pack(db, table, f"{SRC}.shared", seed=5, shared_sample=0.1)
    own, held = _ids_by_key(db, f"{SRC}.plain"), _ids_by_key(db, f"{SRC}.shared")
    extra = [Counter(held[k]) - Counter(own[k]) for k in own]
    sample = sorted(extra[0].elements())
    assert len(sample) == len(set(sample)) == 24 == shared.shared_images
    for k in own:
        assert Counter(held[k]) == Counter(own[k]) + Counter(sample)
    assert shared.images_per_segment == tuple(n + 24 for n in plain.images_per_segment)
    assert shared.images == plain.images == len(ids)
    by_site = _pack(db, table, f"{SRC}.by_site_shared", distribute_by="site", shared_sample=0.2)
    skew = describe(db, f"{SRC}.by_site").label_skew
    assert by_site.label_skew.max < skew.max  # the sample pulls every mix toward the table's


def test_redeal_holds_the_images_as_load_images_of_them_in_id_order_would(db, rows):
    table, ids, x, labels, _ = rows
    skewed = _pack(db, table, f"{SRC}.by_site_again", distribute_by="site")
    redealt = gpcnn.redeal(db, skewed.table, f"{SRC}.redealt", segments=3, seed=7, replace=True)
    by_id = np.argsort(ids)
    loaded = load_images(
        db,
        f"{SRC}.loaded",
        x[by_id],
        labels[by_id],
        ids=ids[by_id],
        segments=3,
        seed=7,
        class_names=["0", "1", "2", "3"],
        replace=True,
        progress=False,
    )
    query = "SELECT __dist_key__, buffer_id, n, x, y, ids FROM {} ORDER BY buffer_id"
    with db.connect() as conn:
        stored = [
            conn.execute(sa.text(query.format(t))).all() for t in (redealt.table, loaded.table)
        ]
    assert stored[0] == stored[1]
    assert redealt.class_names == skewed.class_names and redealt.source.startswith("redeal of")
    assert redealt.label_skew.max < skewed.label_skew.max
    with pytest.raises(TableError, match="holds a shared sample"):
        gpcnn.redeal(db, f"{SRC}.shared", f"{SRC}.refused")


def test_add_shared_sample_keeps_every_image_on_its_segment_and_adds_the_same_sample(db, skewed):
    info = skewed[2]
    shared = gpcnn.add_shared_sample(
        db, info.table, f"{SRC}.skewed_shared", 0.05, seed=2, replace=True
    )
    own, held = _ids_by_key(db, str(info.table)), _ids_by_key(db, str(shared.table))
    sample = sorted((Counter(held[info.keys[0]]) - Counter(own[info.keys[0]])).elements())
    assert len(sample) == 20 == shared.shared_images
    for key in info.keys:
        assert Counter(held[key]) == Counter(own[key]) + Counter(sample)
    assert (shared.distribution, shared.skew, shared.images) == ("label-skew", 0.1, 400)
    assert shared.label_skew.max < info.label_skew.max
    with pytest.raises(TableError, match=r"shared_sample=0\.7"):
        gpcnn.add_shared_sample(db, info.table, f"{SRC}.refused", 0.7)
