#!/usr/bin/env bash
# The convergence study of docs/convergence.md: the BatchNorm CNN on Fashion-MNIST
# 60k/10k, shuffled buffers, 15 epochs at one merge per epoch. One part per invocation:
#
#   bash reproduce/study.sh sweep   # learning rates for one worker, per optimizer (run first)
#   bash reproduce/study.sh a       # with merge vs without: single, none, average, bmuf (K = 4, 8)
#   bash reproduce/study.sh b       # the optimizer's state: momentum/Adam x reset/local/average, K = 4
#                               # (and one worker per optimizer)
#   bash reproduce/study.sh c       # label skew: alpha 1 and 0.1 x average, bmuf, none, K = 4
#   bash reproduce/study.sh d       # the FedAvg CNN on the MNIST sample, K = 4
#   bash reproduce/study.sh e       # sync with and without lr x K, K = 4
#   bash reproduce/study.sh f       # K = 8, IID: bmuf at 1 (part a's), 2 and 4 merges per
#                               # epoch, post-local SGD (average at 8/8/1), fedadam, then fedprox,
#                               # scaffold, fedyogi; seed 0 of all first
#   bash reproduce/study.sh f ARGS  # the best of them at K = 4, e.g. f --merge bmuf --merges-per-epoch 4
#   bash reproduce/study.sh g       # label skew alpha 0.1, K = 4: average, bmuf (part c's), scaffold,
#                               # fedprox (mu 0.01, 0.1), fedadam; gn-cnn (GroupNorm) with one
#                               # worker and average; seed 0 of all first
#   bash reproduce/study.sh g ARGS  # gn-cnn with the best of them, e.g. g --merge scaffold
#   bash reproduce/study.sh i       # remedies for label skew alpha 0.1, K = 4: a shared
#                               # sample of 1 % and 5 %, pooled BatchNorm statistics, FedNova,
#                               # SCAFFOLD with GroupNorm at 4 merges per epoch; seed 0 of all first
#   bash reproduce/study.sh i3 ARGS # the third seed (its own Dirichlet draw) of the average, the IID
#                               # average (part a's) and the best remedy, e.g. i3 --merge fednova
#   bash reproduce/study.sh j       # K = 16 and 2: average, bmuf, bmuf at 4 merges per
#                               # epoch, IID; K = 4, 8 and one worker are parts a's and f's; the
#                               # segment processes' peak memory into j/peak-rss.txt
#   bash reproduce/study.sh j3      # epochs 1-3 of the reused K = 4, 8 settings again, for their
#                               # drift ratios, into j/early/ (not bit-identical to parts a and f,
#                               # made by earlier code: per setting, not per run)
#   bash reproduce/study.sh cg3     # epochs 1-3 of parts c's and g's K = 4 settings again (seed 0),
#                               # for their drift ratios, into c/early/ and g/early/
#   bash reproduce/study.sh h       # MOP against the merge: 4 configurations (momentum, adam x batch
#                               # 32, 64) by the model hopper and one after another with average
#                               # and bmuf, K = 4, seeds 0 and 1 (docs/merge.md, "The model hopper")
#
# Every part is resumable: rerun it and finished runs are reused, a half-done run continues from
# its last stored iteration. Results land in docs/img/study/<part>/ (history.csv, report.md,
# figures). Parts a-e take their learning rates from the sweep's committed results
# (reproduce/learning_rates.py); f and g run the rules with their default options (docs/merge.md) unless
# given (--merge-option), and g's gn-cnn takes bn-cnn's learning rate. STUDY_SEEDS (default
# "0 1") limits f's and g's loops to some seeds, e.g. STUDY_SEEDS=0 for a first pass over both
# parts. STUDY_NICE (default 0) lowers the priority of the client and, when this
# script starts the embedded server, of the server too. With the kernel's autogroup scheduling
# (Debian's default) nice orders processes only within one session: the server daemonizes into
# its own, so also `echo 19 > /proc/<postmaster pid>/autogroup` to let other work go first.
set -euo pipefail
cd "$(dirname "$0")/.."
part=${1:?usage: reproduce/study.sh sweep|a|b|c|d|e|f|g|h|i|i3|j|j3}
py=(nice -n "${STUDY_NICE:-0}" .venv/bin/python)
gpcnn=("${py[@]}" -m gpcnn.tools.cli)
schema=(--schema gpcnn_study)  # a schema of its own: nothing else upgrades its functions
out=docs/img/study
"${gpcnn[@]}" db start >/dev/null
"${gpcnn[@]}" install "${schema[@]}" >/dev/null  # this checkout's in-database code

fashion=(--dataset fashion-mnist --model bn-cnn --shuffle --iterations 15 "${schema[@]}")
lr() { "${py[@]}" reproduce/learning_rates.py "$out/sweep" "$1"; }
# Part a's runs of settings that part $1 shares with it (seeds 0, 1), copied into it: the same
# specs, so the part reuses them instead of training them again (a rerun is bit-identical:
# docs/convergence.md, part b). $2...: the settings.
reuse_from_a() {
  local part=$1 setting
  shift
  mkdir -p "$out/$part/runs"
  for setting in "$@"; do
    cp -n "$out/a/runs/$setting.json" "$out/a/runs/$setting-s1.json" "$out/$part/runs/"
  done
}
single=fashion-mnist-single-k1-m1-shuffled-bn-cnn-momentum  # one worker, for the gaps

case $part in
sweep)
  # Four epochs of one worker per learning rate; learning_rates.py picks the best mean validation
  # accuracy over epochs 3-4.
  for rate in 0.003 0.01 0.03 0.1; do
    "${gpcnn[@]}" converge "${fashion[@]}" --iterations 4 --segments 1 --merge single \
      --optimizer momentum --learning-rate $rate --out "$out/sweep/momentum-lr$rate"
  done
  for rate in 0.0003 0.001 0.003; do
    "${gpcnn[@]}" converge "${fashion[@]}" --iterations 4 --segments 1 --merge single \
      --optimizer adam --learning-rate $rate --out "$out/sweep/adam-lr$rate"
  done
  "${py[@]}" reproduce/learning_rates.py "$out/sweep"
  ;;
a)
  momentum=(--optimizer momentum --learning-rate "$(lr momentum)" --optimizer-state local)
  "${gpcnn[@]}" converge "${fashion[@]}" "${momentum[@]}" --segments 4 \
    --merge single,none,average,bmuf --seeds 0,1,2 --target 0.9 --out "$out/a"
  "${gpcnn[@]}" converge "${fashion[@]}" "${momentum[@]}" --segments 8 \
    --merge average,bmuf,none --seeds 0,1 --target 0.9 --out "$out/a"
  ;;
b)
  # One worker per optimizer, for the gaps; momentum's, and its local policy, are part a's.
  reuse_from_a b $single fashion-mnist-average-k4-m1-shuffled-bn-cnn-momentum-os-local
  for opt in momentum adam; do
    "${gpcnn[@]}" converge "${fashion[@]}" --optimizer $opt --learning-rate "$(lr $opt)" \
      --segments 4 --merge single,average --optimizer-state reset,local,average --seeds 0,1 \
      --target 0.9 --out "$out/b"
  done
  ;;
c)
  reuse_from_a c $single
  "${gpcnn[@]}" converge "${fashion[@]}" --optimizer momentum --learning-rate "$(lr momentum)" \
    --optimizer-state local --segments 4 --merge average,bmuf,none --skew 1,0.1 --seeds 0,1 \
    --target 0.9 --out "$out/c"
  ;;
d)
  "${gpcnn[@]}" converge --dataset mnist-sample --model fedavg-cnn --shuffle --iterations 20 \
    "${schema[@]}" --optimizer momentum --learning-rate "$(lr momentum)" --optimizer-state local \
    --segments 4 --merge single,average,bmuf --seeds 0,1 --target 0.95 --out "$out/d"
  ;;
e)
  reuse_from_a e $single
  momentum=(--optimizer momentum --learning-rate "$(lr momentum)")
  "${gpcnn[@]}" converge "${fashion[@]}" "${momentum[@]}" --segments 4 --merge sync \
    --target 0.9 --out "$out/e"
  "${gpcnn[@]}" converge "${fashion[@]}" "${momentum[@]}" --segments 4 --merge sync --scale-lr \
    --target 0.9 --out "$out/e"
  ;;
f)
  reuse_from_a f $single fashion-mnist-average-k8-m1-shuffled-bn-cnn-momentum-os-local \
    fashion-mnist-bmuf-k8-m1-shuffled-bn-cnn-momentum-os-local
  momentum=(--optimizer momentum --learning-rate "$(lr momentum)" --optimizer-state local)
  study=("${gpcnn[@]}" converge "${fashion[@]}" "${momentum[@]}" --target 0.9 --out "$out/f")
  if (($# > 1)); then  # the best, at K = 4
    "${study[@]}" --segments 4 --seeds 0,1 "${@:2}"
    exit
  fi
  for seed in ${STUDY_SEEDS:-0 1}; do
    "${study[@]}" --segments 8 --seeds $seed --merge bmuf --merges-per-epoch 1,2,4
    "${study[@]}" --segments 8 --seeds $seed --merge average --merges-per-epoch 8/8/1
    "${study[@]}" --segments 8 --seeds $seed --merge fedadam
  done
  "${study[@]}" --segments 8 --seeds 0,1 --merge fedprox,scaffold,fedyogi  # if the budget allows
  ;;
g)
  mkdir -p "$out/g/runs"
  for rule in average bmuf; do
    skewed=fashion-mnist-$rule-k4-m1-shuffled-bn-cnn-momentum-os-local-skew0.1
    cp -n "$out/c/runs/$skewed.json" "$out/c/runs/$skewed-s1.json" "$out/g/runs/"
  done
  reuse_from_a g $single
  momentum=(--optimizer momentum --learning-rate "$(lr momentum)" --optimizer-state local)
  study=("${gpcnn[@]}" converge "${fashion[@]}" "${momentum[@]}" --segments 4 --skew 0.1
    --target 0.9 --out "$out/g")
  if (($# > 1)); then  # gn-cnn with the best
    "${study[@]}" --model gn-cnn --seeds 0,1 "${@:2}"
    exit
  fi
  for seed in ${STUDY_SEEDS:-0 1}; do
    "${study[@]}" --seeds $seed --merge scaffold,fedadam
    "${study[@]}" --seeds $seed --merge fedprox --merge-option mu=0.01,0.1
    "${study[@]}" --seeds $seed --model gn-cnn --merge single,average
  done
  ;;
i | i3)
  # Part g's tables and settings; the average under skew (part c's) and one worker (part a's)
  # are reused. FedNova's momentum correction assumes each segment starts its momentum at zero,
  # so it runs with optimizer_state reset; the others keep part g's local state.
  mkdir -p "$out/i/runs"
  skewed=fashion-mnist-average-k4-m1-shuffled-bn-cnn-momentum-os-local-skew0.1
  cp -n "$out/c/runs/$skewed.json" "$out/c/runs/$skewed-s1.json" "$out/i/runs/"
  reuse_from_a i $single
  momentum=(--optimizer momentum --learning-rate "$(lr momentum)")
  study=("${gpcnn[@]}" converge "${fashion[@]}" "${momentum[@]}" --segments 4 --target 0.9
    --out "$out/i")
  keep_state=(--optimizer-state local)
  if [ "$part" = i3 ]; then
    cp -n "$out/a/runs/fashion-mnist-average-k4-m1-shuffled-bn-cnn-momentum-os-local-s2.json" \
      "$out/a/runs/$single-s2.json" "$out/i/runs/"
    "${study[@]}" --seeds 2 "${keep_state[@]}" --skew 0.1 --merge average
    "${study[@]}" --seeds 2 --skew 0.1 "${@:2}"
    exit
  fi
  for seed in ${STUDY_SEEDS:-0 1}; do
    "${study[@]}" --seeds $seed "${keep_state[@]}" --skew 0.1 --merge average --shared-sample 0.01,0.05
    "${study[@]}" --seeds $seed "${keep_state[@]}" --skew 0.1 --merge average \
      --merge-option batchnorm_statistics=pooled
    "${study[@]}" --seeds $seed --optimizer-state reset --skew 0.1 --merge fednova
    "${study[@]}" --seeds $seed "${keep_state[@]}" --skew 0.1 --model gn-cnn --merge scaffold \
      --merges-per-epoch 4
  done
  ;;
j | j3)
  mkdir -p "$out/j/runs"
  iid=shuffled-bn-cnn-momentum-os-local
  reuse_from_a j $single fashion-mnist-{average,bmuf}-k{4,8}-m1-$iid
  for k in 4 8; do
    cp -n "$out/f/runs/fashion-mnist-bmuf-k$k-m4-$iid.json" \
      "$out/f/runs/fashion-mnist-bmuf-k$k-m4-$iid-s1.json" "$out/j/runs/"
  done
  momentum=(--optimizer momentum --learning-rate "$(lr momentum)" --optimizer-state local)
  if [ "$part" = j3 ]; then
    for seed in 0 1; do
      for k in 4 8; do
        "${gpcnn[@]}" converge "${fashion[@]}" "${momentum[@]}" --iterations 3 --segments $k \
          --seeds $seed --merge average,bmuf --out "$out/j/early"
        "${gpcnn[@]}" converge "${fashion[@]}" "${momentum[@]}" --iterations 3 --segments $k \
          --seeds $seed --merge bmuf --merges-per-epoch 4 --out "$out/j/early"
      done
    done
    exit
  fi
  study=("${gpcnn[@]}" converge "${fashion[@]}" "${momentum[@]}" --target 0.9 --out "$out/j")
  # The largest VmHWM (peak resident memory, kB) of any server process, sampled every 5 s.
  (
    while sleep 5; do
      peak=$(cat "$out/j/peak-rss.txt" 2>/dev/null || echo 0)
      now=$(for pid in $(pgrep -x postgres); do awk '/VmHWM/ {print $2}' "/proc/$pid/status"; done \
        2>/dev/null | sort -n | tail -1)
      now=${now:-0}
      ((now > peak)) && echo "$now" >"$out/j/peak-rss.txt"
    done
  ) &
  sampler=$!
  trap 'kill $sampler' EXIT
  # K = 16 for every seed first: it is what the prediction is scored on.
  for k in 16 2; do
    for seed in ${STUDY_SEEDS:-0 1}; do
      "${study[@]}" --segments $k --seeds $seed --merge average,bmuf
      "${study[@]}" --segments $k --seeds $seed --merge bmuf --merges-per-epoch 4
    done
  done
  ;;
cg3)
  # Epochs 1-3 of parts c and g's K = 4 settings again, seed 0, now with the diagnostics (their
  # 15-epoch runs came before them): each setting's early drift ratio beside its final gap
  # (early_warning.py pairs them by name). About 11 x 3 epochs, 15 min.
  momentum=(--optimizer momentum --learning-rate "$(lr momentum)" --optimizer-state local)
  early=("${gpcnn[@]}" converge "${fashion[@]}" "${momentum[@]}" --iterations 3 --segments 4
    --seeds 0)
  "${early[@]}" --merge average,bmuf,none --skew 1,0.1 --out "$out/c/early"
  "${early[@]}" --skew 0.1 --merge scaffold,fedadam --out "$out/g/early"
  "${early[@]}" --skew 0.1 --merge fedprox --merge-option mu=0.01,0.1 --out "$out/g/early"
  "${early[@]}" --skew 0.1 --model gn-cnn --merge average --out "$out/g/early"
  ;;
h)
  # ~12 bn-cnn runs' worth per seed (4 configurations x 3 methods x 15 epochs), about 1.5 h at
  # part a's 30 s per K = 4 epoch; the hopper's run ids are kept in $out/h/hopper-runs*.json to
  # resume. Seed 0 first: a study stopped after it has part h's first seed whole.
  configs="momentum:$(lr momentum):32,momentum:$(lr momentum):64,adam:$(lr adam):32,adam:$(lr adam):64"
  "${gpcnn[@]}" mop "${fashion[@]}" --optimizer-state local --segments 4 --merge average,bmuf \
    --configs "$configs" --target 0.9 --seeds 0,1 --out "$out/h"
  ;;
*)
  echo "unknown part $part: sweep, a, b, c, cg3, d, e, f, g, h, i, i3, j or j3" >&2
  exit 2
  ;;
esac
