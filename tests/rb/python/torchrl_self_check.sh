#!/usr/bin/env bash
# TorchRL alone through tests/rb/python/torchrl_checkpoint.py: for each
# sampler, a buffer of capacity 10 with fewer rows (6), as many (10) and more
# (23: wrapped around) is written, then loaded and checked by TorchRL; the
# prioritized layout is also written with TorchRL's compiled segment trees
# and checked with the stand-in, and the other way round. It proves the
# helper the C++ checkpoint tests exchange directories with.
#   torchrl_self_check.sh TORCHRL_PYTHON WORK_DIR
set -euo pipefail
py=$1 work=$2
helper="$(dirname "$0")/torchrl_checkpoint.py"
rm -rf "$work"
mkdir -p "$work"
for sampler in random without_replacement prioritized; do
  for rows in 6 10 23; do
    dir="$work/$sampler-$rows"
    "$py" "$helper" write "$dir" --sampler "$sampler" --capacity 10 --rows "$rows" --seed 3 >"$dir.json"
    "$py" "$helper" check "$dir" --sampler "$sampler" --capacity 10 --rows "$rows"
  done
done
for rows in 6 23; do
  for trees in "compiled standin" "standin compiled"; do
    read -r writer checker <<<"$trees"
    dir="$work/prioritized-$writer-$rows"
    "$py" "$helper" write "$dir" --sampler prioritized --capacity 10 --rows "$rows" \
      --segment-trees "$writer" >/dev/null
    "$py" "$helper" check "$dir" --sampler prioritized --capacity 10 --rows "$rows" \
      --segment-trees "$checker"
  done
done
echo "torchrl_self_check: every checkpoint TorchRL wrote, TorchRL loaded and checked"
