#!/usr/bin/env bash
# The convergence study behind docs/convergence.md: about 3 hours of runs on 2 cores. Resumable:
# rerun it and finished runs are reused, a half-done in-database run continues from its last stored
# iteration. Each part adds runs to its folder; the CSV, figures and report cover all finished runs
# there. The tables in the docs come from `python bench/study_tables.py <folder>/history.csv`.
set -euo pipefail
cd "$(dirname "$0")/.."
gpcnn=".venv/bin/gpcnn"
# A schema of its own: nothing else upgrades its functions while the study runs.
schema=(--schema gpcnn_study)
rules=single,none,average,bmuf,easgd,sync
$gpcnn install "${schema[@]}"  # upgrade the study's functions to this checkout's code

mnist=(--dataset mnist-sample --iterations 20 --out docs/img/mnist-sample "${schema[@]}")
fashion=(--dataset fashion-mnist --iterations 20 --out docs/img/fashion-mnist "${schema[@]}")

# MNIST (the real 5,000-digit sample): every rule at K = 2, 4, 8.
$gpcnn converge "${mnist[@]}" --segments 2,4,8 --merge $rules --merges-per-epoch 1
# Fashion-MNIST (60,000 / 10,000): every rule at K = 2, 4, 8.
$gpcnn converge "${fashion[@]}" --segments 2,4,8 --merge $rules --merges-per-epoch 1
# Four merges per epoch against one (same epochs of data, four times the iterations).
$gpcnn converge "${mnist[@]}" --segments 4 --merge $rules --merges-per-epoch 4
$gpcnn converge "${fashion[@]}" --segments 4 --merge $rules --merges-per-epoch 4
# The stored-order caveat: one worker and the average again, with shuffled buffers.
$gpcnn converge --dataset fashion-mnist --iterations 20 --out docs/img/fashion-mnist-shuffled \
  "${schema[@]}" --shuffle --segments 2,4 --merge single,average --merges-per-epoch 1
