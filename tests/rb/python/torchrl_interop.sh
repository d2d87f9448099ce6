#!/usr/bin/env bash
# Replay buffer checkpoints exchanged with the real TorchRL, for one sampler
# and a buffer of capacity 10 holding fewer rows (6), as many (10) and more
# (23: wrapped around):
#   torchrl_to_cpp: TorchRL writes (torchrl_checkpoint.py write), the C++
#                   library loads and checks (tensordict_rb_checkpoint_peer check);
#   cpp_to_torchrl: the C++ library writes by the same procedure
#                   (tensordict_rb_checkpoint_peer write), TorchRL loads and
#                   checks (torchrl_checkpoint.py check).
# With ENVS, the buffer is [env, time] (TorchRL's ndim=2) of ENVS envs and
# 24 elements (12 steps of 2 envs): 6, 10 and 23 steps of every env.
#   torchrl_interop.sh TORCHRL_PYTHON PEER WORK_DIR SAMPLER DIRECTION [ENVS]
set -euo pipefail
py=$1 peer=$2 work=$3 sampler=$4 direction=$5 envs=${6:-0}
capacity=10
if [ "$envs" -gt 0 ]; then capacity=$((12 * envs)); fi
shape=(--capacity "$capacity" --envs "$envs")
helper="$(dirname "$0")/torchrl_checkpoint.py"
rm -rf "$work"
mkdir -p "$work"
for rows in 6 10 23; do
  dir="$work/$sampler-$rows"
  case "$direction" in
    torchrl_to_cpp)
      "$py" "$helper" write "$dir" --sampler "$sampler" "${shape[@]}" --rows "$rows" --seed 5 >/dev/null
      "$peer" check "$dir" --sampler "$sampler" "${shape[@]}" --rows "$rows"
      ;;
    cpp_to_torchrl)
      "$peer" write "$dir" --sampler "$sampler" "${shape[@]}" --rows "$rows"
      "$py" "$helper" check "$dir" --sampler "$sampler" "${shape[@]}" --rows "$rows"
      ;;
    *)
      echo "unknown direction $direction" >&2
      exit 2
      ;;
  esac
done
echo "torchrl_interop: $sampler $direction: every checkpoint loaded and checked"
