"""TorchRL's replay buffer on the work of bench_rb.cpp, for the side-by-side rows.

Run with a Python environment where torchrl imports (it needs its own: torchrl
0.14 pins tensordict < 0.15), one intra-op thread as bench_rb:

    python benchmarks/torchrl_rb.py [--min-time 0.3]

Prints one line per operation: the best of 5 timings (ns per call) of the same
operations as bench_rb on a LazyTensorStorage of 100,000 tiny transitions
(obs float[4], action int64, reward float, done bool, next/obs float[4]).
The prioritized row is skipped (and says so) when TorchRL's C++ segment
trees do not load under the installed torch.
"""
from __future__ import annotations

import argparse
import time

import torch
from tensordict import TensorDict
from torchrl.data import (LazyTensorStorage, PrioritizedSampler, RandomSampler,
                          TensorDictReplayBuffer)

CAPACITY = 100_000
BATCH = 256


def transitions(n: int) -> TensorDict:
    return TensorDict({"obs": torch.randn(n, 4), "action": torch.randint(4, (n,)),
                       "reward": torch.randn(n), "done": torch.rand(n) < 0.02,
                       "next": TensorDict({"obs": torch.randn(n, 4)}, [n])}, [n])


def timed(fn, min_time: float) -> float:
    """Best of 5 runs of at least min_time / 5 seconds each: ns per call."""
    best = float("inf")
    for _ in range(5):
        calls, start = 0, time.perf_counter()
        while True:
            fn()
            calls += 1
            elapsed = time.perf_counter() - start
            if elapsed >= min_time / 5:
                break
        best = min(best, elapsed / calls * 1e9)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--min-time", type=float, default=1.0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)

    def buffer(sampler):
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(CAPACITY), sampler=sampler,
                                    batch_size=BATCH)
        rb.extend(transitions(CAPACITY))
        return rb

    rb = buffer(RandomSampler())
    one = transitions(1)[0]
    batch = transitions(BATCH)
    rows = {
        "BM_rb_add": lambda: rb.add(one),
        "BM_rb_extend256": lambda: rb.extend(batch),
        "BM_rb_sample256": lambda: rb.sample(),
    }
    try:
        prb = buffer(PrioritizedSampler(CAPACITY, alpha=0.6, beta=0.4))
        priority = torch.rand(BATCH, dtype=torch.float64) * 10

        def prioritized():
            s = prb.sample()
            prb.update_priority(s["index"], priority)

        rows["BM_rb_prioritized256"] = prioritized
    except RuntimeError as err:
        print(f"BM_rb_prioritized256/torchrl skipped: {err}")
    for name, fn in rows.items():
        print(f"{name}/torchrl {timed(fn, args.min_time):12.0f} ns")


if __name__ == "__main__":
    main()
