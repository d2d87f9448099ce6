#!/usr/bin/env python
"""TorchRL's side of the replay buffer benchmarks: the same operations the C++
rows time (tensordict::rb next to its hand-written floors), done by TorchRL on
the same machine and the same torch. Run it with TorchRL's environment
(scripts/torchrl-env.sh):

    .venv-torchrl/bin/python benchmarks/torchrl_rb.py --lines [--repeats 9] [--benchmark-out FILE]
    .venv-torchrl/bin/python benchmarks/torchrl_rb.py [--filter REGEX] [--out FILE]

Every buffer is ReplayBuffer(storage=LazyTensorStorage(100,000)) with
RoundRobinWriter and rows of 5 leaves: obs float32[4], action int64, reward
float32, done bool, ("next", "obs") float32[4]. Each row is timed over calls
repeated for at least --min-time seconds, after one untimed warm-up round, and
that --repeats times; it prints one JSON object per line on stdout:
{"name": "BM_<op>/torchrl", "us_per_call": <median of the repeats>,
"min_us_per_call": ..., "repeats": ..., "calls_per_repeat": ...,
"torch_threads": ...}; a row that
cannot run prints "us_per_call": null and the reason in "skipped".

Names follow benchmarks/README.md ("BM_<op>/<variant>"), so that a C++ row
BM_<op>/floor of the same op pairs with them. --benchmark-out writes the rows
as a Google Benchmark JSON document as well (times in ns, one entry per
repeat), the shape benchmarks/run.py reads.

That is the output with --lines or --benchmark-out (docs/replay_buffer_library.md
quotes it). Without either, the script is a peer of bench_rb for
`benchmarks/run.py --peer`: it runs on one torch thread as bench_rb does
(--num-threads), times each row as Google Benchmark does (calibrated to
--min-time, then --repetitions runs), and writes one Google Benchmark JSON
document (stdout, or --out FILE) whose rows carry bench_rb's op names with the
variant torchrl: BM_rb_add/torchrl, BM_rb_extend256/torchrl,
BM_rb_sample256/torchrl, BM_rb_prioritized256/torchrl, BM_rb_sumtree256/torchrl,
BM_rb_sample256_without_replacement/torchrl, BM_rb_slice256/torchrl,
BM_rb_maxvalue_extend256/torchrl. The last two store 7 leaves: the 5 above and
("next", "done") (an episode ends every 50 rows on average) and ("next",
"reward"), the rank of TensorDictMaxValueWriter.
--filter is then a regular expression on those names, and --suite names the
binary whose rows are wanted (only "rb" has any).
"""
import argparse
import json
import logging
import os
import platform
import statistics
import sys
import time

import torch
from tensordict import TensorDict
from torchrl.data import (
    LazyTensorStorage,
    PrioritizedSampler,
    RandomSampler,
    ReplayBuffer,
    RoundRobinWriter,
    SamplerWithoutReplacement,
    SliceSampler,
    TensorDictMaxValueWriter,
)
from torchrl.data.replay_buffers.samplers import prioritized as torchrl_prioritized

logging.getLogger("torchrl").setLevel(logging.WARNING)  # it logs on stdout

CAPACITY = 100_000
BATCH = 256
ALPHA, BETA = 0.7, 0.5


def transitions(n):
    """n rows of the 5-leaf transition (batch [] when n is None)."""
    shape = [] if n is None else [n]
    return TensorDict(
        {
            "obs": torch.randn(*shape, 4),
            "action": torch.randint(0, 4, shape),
            "reward": torch.randn(shape),
            "done": torch.rand(shape) < 0.02,
            "next": {"obs": torch.randn(*shape, 4)},
        },
        batch_size=shape,
    )


def episode_steps(n):
    """n rows of the 7-leaf transition: ("next", "done") ends an episode,
    ("next", "reward") ranks a row."""
    rows = transitions(n)
    rows["next", "done"] = rows["done"].clone()
    rows["next", "reward"] = torch.randn(n)
    return rows


def buffer(sampler=None, fill=True, writer=None, rows=transitions):
    rb = ReplayBuffer(
        storage=LazyTensorStorage(CAPACITY),
        sampler=sampler if sampler is not None else RandomSampler(),
        writer=writer if writer is not None else RoundRobinWriter(),
    )
    if fill:
        rb.extend(rows(CAPACITY))
    return rb


def timed(call, min_time, repeats):
    """Per-call times (s) of `repeats` rounds, each of as many calls as fill
    min_time, after one untimed warm-up round."""
    number, start = 1, time.perf_counter()
    while True:  # warm-up, and the number of calls per round
        for _ in range(number):
            call()
        elapsed = time.perf_counter() - start
        if elapsed >= min_time:
            break
        number = max(number * 2, int(number * min_time / max(elapsed, 1e-9)) + 1)
        start = time.perf_counter()
    per_call = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(number):
            call()
        per_call.append((time.perf_counter() - start) / number)
    return per_call, number


def prioritized_unavailable():
    if torchrl_prioritized.SumSegmentTreeFp32 is None:
        return ("TorchRL's compiled segment trees do not load under this torch "
                "(scripts/torchrl-env.sh compiles them from torchrl's own sources)")
    return None


def cases():
    """(op, what it times, setup returning the call) of every row."""

    def add_one():
        rb, row = buffer(fill=False), transitions(None)
        return lambda: rb.add(row)

    def extend():
        rb, rows = buffer(fill=False), transitions(BATCH)
        return lambda: rb.extend(rows)

    def sample_uniform():
        rb = buffer()
        return lambda: rb.sample(BATCH)

    def sample_prioritized_update():
        rb = buffer(PrioritizedSampler(CAPACITY, alpha=ALPHA, beta=BETA))
        priority = torch.rand(BATCH) + 0.1

        def call():
            _, info = rb.sample(BATCH, return_info=True)
            rb.update_priority(info["index"], priority)

        return call

    def sum_tree():
        # TorchRL's compiled SumSegmentTreeFp32 alone: set 256 leaves, then
        # find 256 prefix sums.
        tree = torchrl_prioritized.SumSegmentTreeFp32(CAPACITY)
        tree[torch.arange(CAPACITY)] = torch.rand(CAPACITY) + 0.1
        index = torch.randint(0, CAPACITY, (BATCH,))
        value = torch.rand(BATCH) + 0.1
        total = tree.query(0, CAPACITY)
        mass = torch.rand(BATCH) * total * 0.999

        def call():
            tree[index] = value
            tree.scan_lower_bound(mass)

        return call

    def sample_without_replacement():
        rb = buffer(SamplerWithoutReplacement())
        return lambda: rb.sample(BATCH)

    def sample_slices():
        rb = buffer(SliceSampler(slice_len=16, end_key=("next", "done")), rows=episode_steps)
        return lambda: rb.sample(BATCH)

    def max_value_extend():
        rb = buffer(writer=TensorDictMaxValueWriter(rank_key=("next", "reward")),
                    rows=episode_steps)
        rows = episode_steps(BATCH)
        return lambda: rb.extend(rows)

    return [
        ("rb_add_one", "add one transition", add_one, None),
        ("rb_extend256", "extend by 256 transitions", extend, None),
        ("rb_sample256_uniform", "sample 256 (RandomSampler)", sample_uniform, None),
        ("rb_sample256_prioritized_update",
         "sample 256 (PrioritizedSampler) and update their 256 priorities",
         sample_prioritized_update, prioritized_unavailable()),
        ("sum_tree_update_sample256", "SumSegmentTreeFp32: set 256 leaves, 256 prefix sums",
         sum_tree, prioritized_unavailable()),
        ("rb_sample256_without_replacement", "sample 256 (SamplerWithoutReplacement)",
         sample_without_replacement, None),
        ("rb_slice256", "sample 256 (SliceSampler, slice_len 16, end_key (next, done))",
         sample_slices, None),
        ("rb_maxvalue_extend256",
         "extend by 256 (TensorDictMaxValueWriter, rank_key (next, reward))",
         max_value_extend, None),
    ]


# bench_rb's op of each row (the names the lines output keeps).
BENCH_RB_OPS = {
    "rb_add_one": "rb_add",
    "rb_extend256": "rb_extend256",
    "rb_sample256_uniform": "rb_sample256",
    "rb_sample256_prioritized_update": "rb_prioritized256",
    "sum_tree_update_sample256": "rb_sumtree256",
    "rb_sample256_without_replacement": "rb_sample256_without_replacement",
    "rb_slice256": "rb_slice256",
    "rb_maxvalue_extend256": "rb_maxvalue_extend256",
}


def context():
    import tensordict
    import torchrl
    return {
        "executable": "benchmarks/torchrl_rb.py",
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host_name": platform.node(),
        "num_cpus": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torchrl": torchrl.__version__,
        "tensordict": tensordict.__version__,
        "torch_num_threads": torch.get_num_threads(),
        "load_avg": list(os.getloadavg()),
        "library_build_type": "python",
    }


def peer_main(args):
    """The rows as one Google Benchmark document named after bench_rb's ops."""
    import re
    torch.set_num_threads(args.num_threads)
    pattern = re.compile(args.filter) if args.filter else None
    rows = []
    for index, (op, what, setup, skipped) in enumerate(cases()):
        name = f"BM_{BENCH_RB_OPS[op]}/torchrl"
        if (args.suite and "rb" not in args.suite) or (pattern and not pattern.search(name)):
            continue
        if args.list:
            print(f"rb\t{name}")
            continue
        print(f"torchrl_rb: {name}", file=sys.stderr, flush=True)
        base = {"name": name, "run_name": name, "run_type": "iteration",
                "family_index": index, "per_family_instance_index": 0}
        if skipped:
            rows.append({**base, "error_occurred": True, "error_message": skipped})
            continue
        per_call, number = timed(setup(), args.min_time, args.repetitions)
        for i, t in enumerate(per_call):
            rows.append({**base, "repetitions": args.repetitions, "repetition_index": i,
                         "threads": 1, "iterations": number, "real_time": t * 1e9,
                         "cpu_time": t * 1e9, "time_unit": "ns", "what": what,
                         "torch_num_threads": torch.get_num_threads()})
    if args.list:
        return 0
    text = json.dumps({"context": context(), "benchmarks": rows}, indent=2) + "\n"
    if args.out:
        with open(args.out, "w") as out:
            out.write(text)
    else:
        sys.stdout.write(text)
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", action="store_true",
                        help="the one-JSON-object-per-line output (default without "
                        "--benchmark-out: one Google Benchmark document)")
    parser.add_argument("--out", help="where the Google Benchmark document goes (default stdout)")
    parser.add_argument("--list", action="store_true",
                        help="print the rows of the Google Benchmark document (suite and name)")
    parser.add_argument("--suite", action="append",
                        help="the binary whose rows are wanted (rows exist for rb only)")
    parser.add_argument("--repetitions", type=int, default=1,
                        help="runs of each row in the Google Benchmark document (default 1)")
    parser.add_argument("--num-threads", type=int, default=1,
                        help="torch threads for the Google Benchmark document (default 1, "
                        "as bench_rb)")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--min-time", type=float, default=0.2,
                        help="seconds of calls per repeat (default 0.2)")
    parser.add_argument("--filter", default="", help="only the ops containing this text (with "
                        "--lines); a regular expression on the names otherwise")
    parser.add_argument("--benchmark-out", help="with the lines, also write a Google Benchmark "
                        "JSON document")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    if not args.lines and not args.benchmark_out:
        return peer_main(args)
    gbench = []
    for op, what, setup, skipped in cases():
        if args.filter not in op:
            continue
        name = f"BM_{op}/torchrl"
        if skipped:
            print(json.dumps({"name": name, "us_per_call": None, "skipped": skipped}), flush=True)
            continue
        per_call, number = timed(setup(), args.min_time, args.repeats)
        print(json.dumps({
            "name": name,
            "us_per_call": round(statistics.median(per_call) * 1e6, 3),
            "min_us_per_call": round(min(per_call) * 1e6, 3),
            "repeats": args.repeats,
            "calls_per_repeat": number,
            "torch_threads": torch.get_num_threads(),
            "what": what,
        }), flush=True)
        for i, t in enumerate(per_call):
            gbench.append({
                "name": name, "run_name": name, "run_type": "iteration",
                "repetitions": args.repeats, "repetition_index": i,
                "iterations": number, "real_time": t * 1e9, "cpu_time": t * 1e9,
                "time_unit": "ns",
            })
    if args.benchmark_out:
        with open(args.benchmark_out, "w") as out:
            json.dump({"context": context(), "benchmarks": gbench}, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
