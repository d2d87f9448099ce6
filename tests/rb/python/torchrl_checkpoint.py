#!/usr/bin/env python
"""TorchRL's side of the replay buffer checkpoint tests: real TorchRL writes a
checkpoint (ReplayBuffer.dumps) or reads one written by someone else
(ReplayBuffer.loads) and checks it, so that the C++ library's dumps/loads are
tried against TorchRL both ways. Runs in TorchRL's environment
(scripts/torchrl-env.sh, TENSORDICT_TORCHRL_PYTHON). The layout is described
in docs/formats.md, "TorchRL replay buffer checkpoints".

  torchrl_checkpoint.py write DIR --sampler S --capacity C --rows N [--seed X]
  torchrl_checkpoint.py check DIR --sampler S --capacity C --rows N
  (either with --segment-trees auto|compiled|standin, for the prioritized one)

With --envs E the buffer is [env, time] (TorchRL's ndim=2 storage, of
C // E steps of E envs): N counts the steps of every env, written by extends
of batch [E, CHUNK], env e's step j being row number j * E + e (its place in
TorchRL's time-major storage). Prioritized, slot s is element s of that
numbering (C elements, one priority each), its priority given through the
2-D (time, env) index.

S is random, without_replacement or prioritized. The buffer is otherwise always
ReplayBuffer(storage=LazyMemmapStorage(C), sampler=..., writer=RoundRobinWriter(),
batch_size=BATCH). Row i (the i-th row ever written, from 0) holds values
derived from i (expected_rows), so that after N writes slot s holds the last
i < N with i % C == s. `write` prints a JSON summary on stdout; `check` exits
with status 1 and a message naming what differed.

A checkpoint given to `check` must come from the procedure `write` follows:
rows 0..N-1 written by extends of up to CHUNK rows; then SAMPLES samples of
BATCH rows (so a without-replacement sampler has drawn an order for the full
storage); then, prioritized, every filled slot s given the raw priority
slot_priority(s) = 0.5 + (s % 7) / 4 with ALPHA, BETA, EPS. Rows:
  obs = i + [0, 0.25, 0.5, 0.75] (float32[4]), action = 10 i + 1 (int64),
  reward = i / 2 - 3 (float32), done = (i % 3 == 0), next.obs = obs + 1.

The prioritized sampler needs TorchRL's compiled segment trees. The 0.14.1
wheel's library was built against another torch and does not load under torch
2.13; scripts/torchrl-env.sh compiles the wheel's own sources of it against
the environment's torch. Where they still do not load (or with
--segment-trees standin), this file puts a pure-Python stand-in in their
place (StandIn*SegmentTree* below): it replaces only the compiled trees,
every other line that runs (sampler, dumps, loads) is TorchRL's own.
"""
import argparse
import json
import logging
import sys
from pathlib import Path

import numpy as np
import torch
from tensordict import TensorDict
from torchrl.data import (
    LazyMemmapStorage,
    PrioritizedSampler,
    RandomSampler,
    ReplayBuffer,
    RoundRobinWriter,
    SamplerWithoutReplacement,
)
from torchrl.data.replay_buffers.samplers import prioritized as torchrl_prioritized

# TorchRL logs its INFO lines on stdout, where `write` prints its JSON.
logging.getLogger("torchrl").setLevel(logging.WARNING)

BATCH = 4  # the buffer's batch_size and the size of every sample drawn here
SAMPLES = 3  # batches drawn after the writes, so that the sampler state moves
CHUNK = 7  # rows per extend: a wrap-around falls inside a chunk
ALPHA, BETA, EPS = 0.7, 0.5, 1e-8
LEAF_KEYS = ["obs", "action", "reward", "done", ("next", "obs")]


class CheckFailed(Exception):
    pass


# ---- stand-in for the compiled segment trees -------------------------------


class _StandInSegmentTree:
    """The interface and arithmetic of TorchRL's compiled SegmentTree
    (torchrl/csrc/segment_tree.h) in numpy: leaves at [capacity, 2 capacity)
    of a flat array whose capacity is the first power of two above size, every
    inner node the reduction of its two children in the tree's own dtype (so
    Fp32 trees round like the compiled ones)."""

    dtype = None  # numpy dtype, set by the subclasses
    identity_element = None

    def __init__(self, size):
        self._size = int(size)
        capacity = 1
        while capacity <= self._size:
            capacity <<= 1
        self._capacity = capacity
        self._values = np.full(2 * capacity, self.identity_element, dtype=self.dtype)

    @property
    def size(self):
        return self._size

    @property
    def capacity(self):
        return self._capacity

    def __len__(self):
        return self._size

    def _index_array(self, index):
        array = np.asarray(index.cpu() if isinstance(index, torch.Tensor) else index)
        if array.dtype != np.int64:
            raise TypeError(f"segment tree index must be int64, got {array.dtype}")
        if array.size and (array.min() < 0 or array.max() >= self._size):
            raise IndexError(f"segment tree index out of range [0, {self._size})")
        return array

    def _value_array(self, value, count):
        if isinstance(value, torch.Tensor):
            # The compiled tree reads a tensor's data as its own element type.
            if value.dtype != torch.from_numpy(np.zeros(0, self.dtype)).dtype:
                raise TypeError(f"segment tree value must be {self.dtype}, got {value.dtype}")
            value = value.detach().cpu().numpy()
        array = np.asarray(value, dtype=self.dtype).reshape(-1)
        if array.size == 1:
            return np.full(count, array[0], dtype=self.dtype)
        if array.size != count:
            raise ValueError(f"{array.size} values for {count} indices")
        return array

    def __getitem__(self, index):
        if isinstance(index, (int, np.integer)):
            return float(self._values[int(index) | self._capacity])
        array = self._index_array(index)
        values = self._values[array | self._capacity]
        return torch.from_numpy(values.copy()) if isinstance(index, torch.Tensor) else values

    def __setitem__(self, index, value):
        if isinstance(index, (int, np.integer)):
            index = np.array([int(index)], dtype=np.int64)
        leaves = self._index_array(index).reshape(-1)
        values = self._value_array(value, leaves.size)
        if not leaves.size:
            return
        # Sequential updates: the last value given for a leaf wins.
        unique, last = np.unique(leaves[::-1], return_index=True)
        nodes = unique | self._capacity
        self._values[nodes] = values[::-1][last]
        while True:
            nodes = np.unique(nodes >> 1)
            nodes = nodes[nodes > 0]
            if not nodes.size:
                break
            self._values[nodes] = self._reduce(self._values[2 * nodes], self._values[2 * nodes + 1])

    update = __setitem__

    def _query_one(self, left, right):
        if left <= 0 and right >= self._size:
            return self._values[1]
        result = self.dtype.type(self.identity_element)
        left |= self._capacity
        right |= self._capacity
        while left < right:
            if left & 1:
                result = self._reduce(result, self._values[left])
                left += 1
            if right & 1:
                right -= 1
                result = self._reduce(result, self._values[right])
            left >>= 1
            right >>= 1
        return result

    def query(self, left, right):
        if isinstance(left, torch.Tensor):
            pairs = zip(left.reshape(-1).tolist(), right.reshape(-1).tolist())
            out = [self._query_one(int(l), int(r)) for l, r in pairs]
            return torch.from_numpy(np.array(out, dtype=self.dtype)).reshape(left.shape)
        return float(self._query_one(int(left), int(right)))


class _StandInSum(_StandInSegmentTree):
    identity_element = 0.0

    @staticmethod
    def _reduce(a, b):
        return a + b

    def scan_lower_bound(self, value):
        """First leaf whose inclusive prefix sum reaches value (size when value
        exceeds the total), descending from the root as the compiled tree does."""
        if isinstance(value, torch.Tensor):
            mass = value.detach().cpu().numpy().astype(self.dtype)
        else:
            mass = np.asarray(value, dtype=self.dtype)
        flat = mass.reshape(-1).copy()
        index = np.ones(flat.size, dtype=np.int64)
        while index.size and index[0] < self._capacity:
            index <<= 1
            left = self._values[index]
            right = flat > left
            flat = np.where(right, flat - left, flat).astype(self.dtype)
            index |= right
        result = np.where(mass.reshape(-1) > self._values[1], self._size, index ^ self._capacity)
        result = result.reshape(mass.shape)
        if isinstance(value, torch.Tensor):
            return torch.from_numpy(result)
        return int(result) if np.ndim(value) == 0 else result


class _StandInMin(_StandInSegmentTree):
    @staticmethod
    def _reduce(a, b):
        return np.minimum(a, b)


class StandInSumSegmentTreeFp32(_StandInSum):
    dtype = np.dtype(np.float32)


class StandInSumSegmentTreeFp64(_StandInSum):
    dtype = np.dtype(np.float64)


class StandInMinSegmentTreeFp32(_StandInMin):
    dtype = np.dtype(np.float32)
    identity_element = float(np.finfo(np.float32).max)


class StandInMinSegmentTreeFp64(_StandInMin):
    dtype = np.dtype(np.float64)
    identity_element = float(np.finfo(np.float64).max)


def segment_trees(choice="auto"):
    """Which segment trees TorchRL's prioritized sampler gets: its compiled
    ones when they load (scripts/torchrl-env.sh compiles them against the
    environment's torch), else (or with choice "standin") the stand-in,
    installed in their place in TorchRL's sampler module."""
    compiled = torchrl_prioritized.SumSegmentTreeFp32 is not None
    if choice == "compiled" and not compiled:
        raise CheckFailed("TorchRL's compiled segment trees do not load (run scripts/torchrl-env.sh)")
    if compiled and choice != "standin":
        return "compiled"
    torchrl_prioritized.SumSegmentTreeFp32 = StandInSumSegmentTreeFp32
    torchrl_prioritized.SumSegmentTreeFp64 = StandInSumSegmentTreeFp64
    torchrl_prioritized.MinSegmentTreeFp32 = StandInMinSegmentTreeFp32
    torchrl_prioritized.MinSegmentTreeFp64 = StandInMinSegmentTreeFp64
    return "python stand-in"


# ---- the buffer ---------------------------------------------------------------


def expected_rows(i):
    """The rows numbered i (an int64 tensor); exact in float32 for i < 2**20."""
    base = i.to(torch.float32)
    obs = base[:, None] + torch.tensor([0.0, 0.25, 0.5, 0.75])
    return TensorDict(
        {
            "obs": obs,
            "action": i * 10 + 1,
            "reward": base * 0.5 - 3.0,
            "done": i % 3 == 0,
            "next": {"obs": obs + 1.0},
        },
        batch_size=[i.numel()],
    )


def slot_priority(slot):
    """The raw priority `write` gives slot s (float32 tensor)."""
    return 0.5 + (slot % 7).to(torch.float32) * 0.25


def env_steps(envs, start, stop):
    """Steps [start, stop) of every env, batch [envs, stop - start]."""
    number = torch.arange(start, stop)[None, :] * envs + torch.arange(envs)[:, None]
    return expected_rows(number.flatten()).reshape(envs, stop - start)


def make_buffer(sampler_name, capacity, envs=0):
    if sampler_name == "random":
        sampler = RandomSampler()
    elif sampler_name == "without_replacement":
        sampler = SamplerWithoutReplacement()
    else:
        sampler = PrioritizedSampler(capacity, alpha=ALPHA, beta=BETA, eps=EPS)
    return ReplayBuffer(
        storage=LazyMemmapStorage(capacity, ndim=2 if envs else 1),
        sampler=sampler,
        writer=RoundRobinWriter(),
        batch_size=BATCH,
    )


def sampler_summary(rb, sampler_name, capacity):
    sampler = rb.sampler
    if sampler_name == "random":
        return {}
    if sampler_name == "without_replacement":
        sample_list = sampler._sample_list
        return {
            "len_storage": int(sampler.len_storage),
            "sample_list": None if sample_list is None else sample_list.tolist(),
            "drop_last": bool(sampler.drop_last),
            "ran_out": bool(sampler._ran_out),
        }
    slots = torch.arange(capacity)
    max_priority = sampler._max_priority[0]
    return {
        "alpha": float(sampler._alpha),
        "beta": float(sampler._beta),
        "eps": float(sampler._eps),
        "max_priority": None if max_priority is None else float(max_priority),
        "max_capacity": int(sampler._max_capacity),
        "sum_total": float(sampler._sum_tree.query(0, capacity)),
        "min": float(sampler._min_tree.query(0, capacity)),
        "sum_leaves": torch.as_tensor(sampler._sum_tree[slots]).double().tolist(),
    }


def buffer_summary(rb, sampler_name, capacity, trees):
    summary = {
        "sampler": sampler_name,
        "capacity": capacity,
        "len": len(rb),
        "cursor": int(rb.writer._cursor),
        "write_count": int(rb.writer._write_count),
        "sampler_state": sampler_summary(rb, sampler_name, capacity),
    }
    if sampler_name == "prioritized":
        summary["segment_trees"] = trees
    return summary


def write(args):
    trees = segment_trees(args.segment_trees) if args.sampler == "prioritized" else None
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)  # TorchRL's prioritized sampling draws from numpy
    rb = make_buffer(args.sampler, args.capacity, args.envs)
    for start in range(0, args.rows, CHUNK):
        stop = min(start + CHUNK, args.rows)
        if args.envs:
            rb.extend(env_steps(args.envs, start, stop))
        else:
            rb.extend(expected_rows(torch.arange(start, stop)))
    for _ in range(SAMPLES):
        rb.sample(BATCH)
    if args.sampler == "prioritized":
        slots = torch.arange(len(rb))
        index = torch.stack([slots // args.envs, slots % args.envs], -1) if args.envs else slots
        rb.update_priority(index, slot_priority(slots))
    rb.dumps(args.dir)
    print(json.dumps(buffer_summary(rb, args.sampler, args.capacity, trees)))


# ---- check ----------------------------------------------------------------------


def expect(what, got, want):
    if got != want:
        raise CheckFailed(f"{what}: got {got!r}, expected {want!r}")


def check_rows(rb, capacity, rows):
    length = min(rows, capacity)
    data = rb.storage._storage
    expect("storage batch size", list(data.batch_size), [capacity])
    keys = sorted(str(k) for k in data.keys(include_nested=True, leaves_only=True))
    expect("storage leaves", keys, sorted(str(k) for k in LEAF_KEYS))
    slots = torch.arange(length)
    # The last write number i < rows landing in slot s.
    written = slots + capacity * ((rows - 1 - slots) // capacity)
    want = expected_rows(written)
    for key in LEAF_KEYS:
        got_leaf, want_leaf = data[key][:length], want[key]
        expect(f"dtype of {key}", got_leaf.dtype, want_leaf.dtype)
        expect(f"shape of {key}", list(got_leaf.shape), list(want_leaf.shape))
        wrong = (got_leaf != want_leaf).reshape(length, -1).any(-1).nonzero().flatten()
        if wrong.numel():
            s = int(wrong[0])
            raise CheckFailed(
                f"{key} of slot {s} (row {int(written[s])}): got "
                f"{got_leaf[s].tolist()}, expected {want_leaf[s].tolist()}"
            )


def check_without_replacement(rb, length):
    sampler = rb.sampler
    expect("sampler len_storage", int(sampler.len_storage), length)
    expect("sampler drop_last", bool(sampler.drop_last), False)
    sample_list = sampler._sample_list
    if sample_list is None:
        raise CheckFailed("sampler _sample_list: missing")
    entries = sample_list.tolist()
    if len(set(entries)) != len(entries) or not all(0 <= e < length for e in entries):
        raise CheckFailed(f"sampler _sample_list {entries}: not distinct slots below {length}")
    if not entries:
        raise CheckFailed("sampler _sample_list: empty (TorchRL refills it when it runs out)")
    # TorchRL goes on from the saved order: the next batch is its head (a
    # shorter one when fewer entries are left).
    index = rb.sample(BATCH, return_info=True)[1]["index"]
    expect("first sample after loads", torch.as_tensor(index).tolist(), entries[:BATCH])


def check_prioritized(rb, capacity, length):
    sampler = rb.sampler
    expect("sampler alpha", float(sampler._alpha), ALPHA)
    expect("sampler beta", float(sampler._beta), BETA)
    expect("sampler eps", float(sampler._eps), EPS)
    expect("sampler max_capacity", int(sampler._max_capacity), capacity)
    # New rows get the max priority seen so far (1 at first), then `write`
    # sets every filled slot's priority.
    max_priority = sampler._max_priority[0]
    want_max = max(1.0, float(slot_priority(torch.arange(min(length, 7))).max()))
    if max_priority is None or abs(float(max_priority) - want_max) > 1e-6:
        raise CheckFailed(f"sampler max_priority: got {max_priority}, expected {want_max}")
    slots = torch.arange(capacity)
    sum_leaves = torch.as_tensor(sampler._sum_tree[slots]).double()
    min_leaves = torch.as_tensor(sampler._min_tree[slots]).double()
    want = (slot_priority(slots[:length]).double() + EPS) ** ALPHA
    # TorchRL's trees hold float32: compare at its precision.
    for name, leaves in (("sum", sum_leaves), ("min", min_leaves)):
        if not torch.allclose(leaves[:length], want, rtol=1e-6, atol=0):
            s = int((~torch.isclose(leaves[:length], want, rtol=1e-6, atol=0)).nonzero()[0])
            raise CheckFailed(f"{name} tree leaf {s}: got {leaves[s].item()}, expected {want[s].item()}")
    if (sum_leaves[length:] != 0).any():
        raise CheckFailed("sum tree leaves past len: not 0")
    if length < capacity and not (min_leaves[length:] >= float(np.finfo(np.float32).max)).all():
        raise CheckFailed("min tree leaves past len: not the empty value (float max or inf)")
    total = sampler._sum_tree.query(0, length)
    if abs(total - float(want.sum())) > 1e-5 * float(want.sum()):
        raise CheckFailed(f"sum tree total: got {total}, expected {float(want.sum())}")
    _, info = rb.sample(BATCH, return_info=True)
    weight = torch.as_tensor(info["priority_weight"])
    if not ((weight > 0) & (weight <= 1 + 1e-6)).all():
        raise CheckFailed(f"priority_weight of a sample: {weight.tolist()} not in (0, 1]")


def check_env(args, rb):
    envs = args.envs
    steps = args.capacity // envs
    filled = min(args.rows, steps)
    expect("len", len(rb), filled * envs)
    expect("writer cursor", int(rb.writer._cursor), args.rows % steps)
    expect("writer write_count", int(rb.writer._write_count), args.rows)
    data = rb.storage._storage
    expect("storage batch size", list(data.batch_size), [steps, envs])
    t = torch.arange(filled)
    j = t + steps * ((args.rows - 1 - t) // steps)  # last step landing on time t
    want = expected_rows((j[:, None] * envs + torch.arange(envs)[None, :]).flatten())
    for key in LEAF_KEYS:
        got = data[key][:filled].flatten(0, 1)
        expect(f"dtype of {key}", got.dtype, want[key].dtype)
        if not torch.equal(got, want[key]):
            raise CheckFailed(f"{key}: the [steps, envs] storage differs from the rows' formula")
    if args.sampler == "without_replacement":
        sampler = rb.sampler
        expect("sampler len_storage", int(sampler.len_storage), filled * envs)
        entries = sampler._sample_list.tolist()
        if len(set(entries)) != len(entries) or not all(0 <= e < filled * envs for e in entries):
            raise CheckFailed(f"sampler _sample_list {entries}: not distinct elements")
        index = torch.stack(list(rb.sample(BATCH, return_info=True)[1]["index"]), -1)
        expect("first sample after loads", index.tolist(),
               [[e // envs, e % envs] for e in entries[:BATCH]])
    if args.sampler == "prioritized":
        check_prioritized(rb, args.capacity, filled * envs)
    sample, info = rb.sample(BATCH, return_info=True)
    time, env = info["index"]
    if not ((time < filled).all() and (env < envs).all()):
        raise CheckFailed(f"sample index {info['index']}: not filled elements")
    print(f"torchrl_checkpoint: {args.dir} loads in TorchRL and matches "
          f"({args.sampler}, [env, time] of {envs} envs, {args.rows} steps)")


def check(args):
    if args.sampler == "prioritized":
        segment_trees(args.segment_trees)
    rb = make_buffer(args.sampler, args.capacity, args.envs)
    try:
        rb.loads(args.dir)
    except Exception as err:  # what TorchRL says when the files do not suit it
        raise CheckFailed(f"TorchRL's loads refused {args.dir}: {type(err).__name__}: {err}")
    if args.envs:
        return check_env(args, rb)
    length = min(args.rows, args.capacity)
    expect("len", len(rb), length)
    expect("writer cursor", int(rb.writer._cursor), args.rows % args.capacity)
    expect("writer write_count", int(rb.writer._write_count), args.rows)
    check_rows(rb, args.capacity, args.rows)
    if args.sampler == "without_replacement":
        check_without_replacement(rb, length)
    elif args.sampler == "prioritized":
        check_prioritized(rb, args.capacity, length)
    # A sample runs and returns valid slots.
    sample, info = rb.sample(BATCH, return_info=True)
    index = torch.as_tensor(info["index"])
    if index.numel() == 0 or not ((index >= 0) & (index < length)).all():
        raise CheckFailed(f"sample index {index.tolist()}: not slots below len {length}")
    expect("sample batch size", list(sample.batch_size), [index.numel()])
    print(f"torchrl_checkpoint: {args.dir} loads in TorchRL and matches "
          f"({args.sampler}, capacity {args.capacity}, {args.rows} rows)")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("write", "check"):
        p = sub.add_parser(name)
        p.add_argument("dir", type=Path)
        p.add_argument("--sampler", required=True,
                       choices=["random", "without_replacement", "prioritized"])
        p.add_argument("--capacity", type=int, required=True)
        p.add_argument("--rows", type=int, required=True)
        p.add_argument("--envs", type=int, default=0,
                       help="an [env, time] buffer (ndim=2) of this many envs")
        p.add_argument("--segment-trees", choices=["auto", "compiled", "standin"], default="auto",
                       help="prioritized only: TorchRL's compiled trees (auto: when they load) "
                       "or the Python stand-in")
        if name == "write":
            p.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.capacity < 1 or args.rows < 1:
        parser.error("--capacity and --rows must be positive")
    try:
        (write if args.command == "write" else check)(args)
    except CheckFailed as err:
        print(f"torchrl_checkpoint: {args.dir}: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
