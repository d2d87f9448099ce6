#!/usr/bin/env bash
# The distributed replay buffer end to end (examples/replay_buffer, --storage
# redis): a private redis-server on a Unix socket (no TCP port), a learner with
# 2 actor processes writing 300 transitions each while it samples, then a
# restarted learner resuming from the store (100 more each). Checks the exit
# codes and the printed totals; the server is stopped whatever happens.
#   run_replay_buffer.sh <replay_buffer binary> <redis-server binary>
set -euo pipefail
example=$1
server=$2
dir=$(mktemp -d /tmp/td-rb-redis-XXXXXX)
pid=
cleanup() {
  if [[ -n $pid ]]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$dir"
}
trap cleanup EXIT
"$server" --port 0 --unixsocket "$dir/redis.sock" --unixsocketperm 700 --save '' \
  --appendonly no --daemonize no --dir "$dir" --logfile "$dir/redis.log" &
pid=$!
for _ in $(seq 500); do [[ -S $dir/redis.sock ]] && break; sleep 0.01; done
[[ -S $dir/redis.sock ]] || { echo "redis-server did not start"; cat "$dir/redis.log"; exit 1; }

expect() {  # expect <file> <extended regex>
  grep -Eq -- "$2" "$1" || { echo "missing in the output: $2"; exit 1; }
}

"$example" --storage redis --redis "$dir/redis.sock" --actors 2 --capacity 256 --steps 300 \
  --batch-size 32 --samples 20 --no-progress | tee "$dir/first.out"
expect "$dir/first.out" '^  actor 0 +300 transitions'
expect "$dir/first.out" '^  actor 1 +300 transitions'
expect "$dir/first.out" '^  total: 600 transitions written by 2 actors in [0-9.]+ s: [0-9.]+k? transitions/s'
expect "$dir/first.out" '^  in the store: 600 transitions written in all'
expect "$dir/first.out" '^all checks passed'
id=$(sed -n 's/.*--resume \([0-9a-f-]*\)$/\1/p' "$dir/first.out")
[[ -n $id ]] || { echo "no td_id to resume from"; exit 1; }

"$example" --storage redis --redis "$dir/redis.sock" --resume "$id" --steps 100 --batch-size 32 \
  --samples 10 --no-progress | tee "$dir/second.out"
expect "$dir/second.out" "td_id $id"
expect "$dir/second.out" '^resumed: 600 transitions already written, priorities restored'
expect "$dir/second.out" '^  total: 200 transitions written by 2 actors'
expect "$dir/second.out" '^  in the store: 800 transitions written in all'
expect "$dir/second.out" '^all checks passed'
echo "distributed replay buffer: OK"
