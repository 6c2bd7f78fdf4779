#!/usr/bin/env bash
# The convergence study behind docs/convergence.md (hours on 2 cores; resumable: rerun to continue).
# Each part adds runs to the same folder; the CSV, figures and report cover all finished runs.
set -euo pipefail
cd "$(dirname "$0")/.."
gpcnn=".venv/bin/gpcnn"
# A schema of its own: nothing else upgrades its functions while the study runs.
schema=(--schema gpcnn_study)
rules=single,none,average,bmuf,easgd,sync
$gpcnn install "${schema[@]}"  # upgrade the study's functions to this checkout's code

# MNIST (the real 5,000-digit sample): every rule at K = 2, 4, 8, one and four merges per epoch.
$gpcnn converge --dataset mnist-sample --segments 2,4,8 --merge $rules \
  --merges-per-epoch 1,4 --iterations 20 --out docs/img/mnist-sample "${schema[@]}"

# Fashion-MNIST (60,000 / 10,000): every rule at K = 2, 4, 8 with one merge per epoch...
$gpcnn converge --dataset fashion-mnist --segments 2,4,8 --merge $rules \
  --merges-per-epoch 1 --iterations 20 --out docs/img/fashion-mnist "${schema[@]}"
# ...and MADlib's average against one worker at four merges per epoch.
$gpcnn converge --dataset fashion-mnist --segments 4 --merge single,average \
  --merges-per-epoch 4 --iterations 20 --out docs/img/fashion-mnist "${schema[@]}"
