"""The label-skew index of the study's tables, which calibrates the fit's warning threshold
(``gpcnn.data.label_skew.SKEW_THRESHOLD``; docs/convergence.md, "Label skew measured in the table").

    .venv/bin/python reproduce/skew_calibration.py

No database: the index (largest segment, image-weighted mean) of the Fashion-MNIST training tables
at K = 4 as ``load_images`` deals them (IID, Dirichlet α = 1 and α = 0.1, seeds 0 to 2), and of small
IID tables, whose index is sampling noise.
"""

from __future__ import annotations

from gpcnn import datasets
from gpcnn.study.doc_sources import dealt_skew


def main() -> None:
    y = datasets.load_fashion_mnist().y_train
    print("| table (K = 4) | seed | largest segment | image-weighted mean |")
    print("|---|---|---|---|")
    for alpha in (None, 1.0, 0.1):
        for seed in (0, 1, 2):
            index = dealt_skew(y, 4, seed, alpha)
            label = "IID" if alpha is None else f"α = {alpha:g}"
            print(f"| {label} | {seed} | {index.max:.3f} | {index.mean:.3f} |")
    for n, k in ((1_000, 4), (1_000, 16), (4_000, 16)):
        index = dealt_skew(y[:n], k, 0)
        print(f"| IID, {n:,} images, K = {k} | 0 | {index.max:.3f} | {index.mean:.3f} |")


if __name__ == "__main__":
    main()
