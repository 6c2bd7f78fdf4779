"""Label skew (issue 47, items 2 to 4): the index of the study's tables, what counting it costs a
load, and the seconds of the layouts that keep rows in place against IID dealing.

    .venv/bin/python bench/label_skew.py calibrate
    .venv/bin/python bench/label_skew.py cost [--database URL] [--repeats 3] [--segments 4]

``calibrate`` (no database): the skew index (largest segment, image-weighted mean) of the study's
Fashion-MNIST training tables at K = 4, as ``load_images`` deals them: IID, Dirichlet α = 1 and
α = 0.1, seeds 0 to 2; and of small IID tables, whose index is sampling noise.

``cost``: interleaved repetitions of ``load_images`` of the 60,000 images (its time includes the
count), the counting statement alone on the loaded table, and, on the 60,000 smallint[] rows of
bench/pack.py, ``pack_table`` dealt IID, by a ``site`` column (60 values) and by the label,
``redeal`` of the table packed by site, and ``pack_table`` IID with a 5 % shared sample.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from pack import DATA, SOURCE, build_source, time_load

import gpcnn
from gpcnn import datasets
from gpcnn.data.dealing import class_counts, deal
from gpcnn.engines.label_skew import label_counts, skew_index

SCHEMA = "gpcnn_bench_pack"
SITES = f"{DATA}.fashion_sites"  # the source with a site column, as a view


def calibrate() -> None:
    y = datasets.load_fashion_mnist().y_train
    print("| table (K = 4) | seed | largest segment | image-weighted mean |")
    print("|---|---|---|---|")
    for distribution, alpha in (("iid", None), ("label-skew", 1.0), ("label-skew", 0.1)):
        for seed in (0, 1, 2):
            order, counts = deal(y, 4, seed, distribution, alpha)
            index = skew_index(class_counts(y, order, counts, 10))
            label = "IID" if alpha is None else f"α = {alpha:g}"
            print(f"| {label} | {seed} | {index.max:.3f} | {index.mean:.3f} |")
    for n, k in ((1_000, 4), (1_000, 16), (4_000, 16)):
        order, counts = deal(y[:n], k, 0)
        index = skew_index(class_counts(y[:n], order, counts, 10))
        print(f"| IID, {n:,} images, K = {k} | 0 | {index.max:.3f} | {index.mean:.3f} |")


def timed(run) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def cost(args) -> None:
    data = datasets.load_fashion_mnist()
    x, y = data.x_train, data.y_train
    db = gpcnn.connect(args.database, schema=SCHEMA)
    gpcnn.install(db)
    build_source(db, x, y)
    with db.begin() as conn:
        conn.exec_driver_sql(
            f"CREATE VIEW {SITES} AS SELECT *, mod(id * 7919, 60) AS site FROM {SOURCE}"
        )
    loaded = f"{SCHEMA}.loaded"
    packed = {"by_site": f"{SCHEMA}.by_site", "iid": f"{SCHEMA}.iid"}
    k = args.segments

    def pack(target, **options):
        return lambda: gpcnn.pack_table(
            db, SITES, target, x_column="img", y_column="label", id_column="id", segments=k,
            replace=True, **options,
        )  # fmt: skip

    time_load(db, x, y, k)  # once before the clock: the keys, and a warm server
    info = gpcnn.describe_table(db, loaded)

    def count():
        with db.connect() as conn:
            label_counts(conn, info.table.sql(db.backend), info.keys, info.num_classes)

    runs = {
        "load_images (with its count)": lambda: time_load(db, x, y, k),
        "the count alone": count,
        "pack_table, IID": pack(packed["iid"]),
        "pack_table, distribute_by='site'": pack(packed["by_site"], distribute_by="site"),
        "pack_table, distribute_by='label'": pack(f"{SCHEMA}.by_label", distribute_by="label"),
        "redeal of the table by site, IID": lambda: gpcnn.redeal(
            db, packed["by_site"], f"{SCHEMA}.redealt", segments=k, replace=True
        ),
        "pack_table, IID + shared_sample=0.05": pack(f"{SCHEMA}.shared", shared_sample=0.05),
    }
    times: dict[str, list[float]] = {what: [] for what in runs}
    for _ in range(args.repeats):  # interleaved: the machine is shared and noisy
        for what, run in runs.items():
            times[what].append(timed(run))
    print(f"\nK = {k}, {len(x):,} images, {args.repeats} interleaved repetitions\n")
    print("| what | median s | runs (s) |")
    print("|---|---|---|")
    for what, each in times.items():
        print(f"| {what} | {statistics.median(each):.2f} | {', '.join(f'{t:.2f}' for t in each)} |")
    share = statistics.median(
        c / t
        for c, t in zip(
            times["the count alone"], times["load_images (with its count)"], strict=True
        )
    )
    print(f"\nthe count / the load (median of the paired ratios): {share:.1%}")
    for name in ("by_site", "by_label", "redealt", "shared"):
        info = gpcnn.describe_table(db, f"{SCHEMA}.{name}")
        print(
            f"{name}: label skew {info.label_skew.max:.3f} (largest), "
            f"{info.label_skew.mean:.3f} (mean); images per segment {info.images_per_segment}"
        )
    for name in ("loaded", "iid", "by_site", "by_label", "redealt", "shared"):
        gpcnn.drop_table(db, f"{SCHEMA}.{name}")
    with db.begin() as conn:
        conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {DATA} CASCADE")
    gpcnn.uninstall(db)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=["calibrate", "cost"])
    parser.add_argument("--database", help="SQLAlchemy URL (default: the embedded PostgreSQL)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--segments", type=int, default=4)
    args = parser.parse_args(argv)
    if args.what == "calibrate":
        calibrate()
    else:
        cost(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
