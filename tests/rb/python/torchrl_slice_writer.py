#!/usr/bin/env python
"""TorchRL's side of the SliceSampler and TensorDictMaxValueWriter tests
(tests/rb/test_slice_sampler.cpp, tests/rb/test_max_value_writer.cpp): real
TorchRL runs the same writes as the C++ test and prints what it did as one
JSON line on stdout. Runs in TorchRL's environment (TENSORDICT_TORCHRL_PYTHON).

  torchrl_slice_writer.py max_value CASE [--ops A:B] [--load DIR] [--dump DIR]
      The max-value stream (max_value_stream) of CASE (scalar, vector_sum,
      vector_max) into TensorDictReplayBuffer(LazyTensorStorage(CAPACITY),
      writer=TensorDictMaxValueWriter(...)); only the operations A..B-1 of it
      (all by default), after loading DIR (a checkpoint) when given, dumping to
      DIR after them when given. Prints the index each operation returned, the
      storage's "id" column, the writer's cursor, write count and (rank, row)
      pairs.
  torchrl_slice_writer.py slice --capacity C --lengths 3,2,4 --chunk K
                          --slice-len L --signal traj|end --strict 0|1
                          --samples S --seed X
      Trajectories of the given lengths (trajectory t has id t; "id" is the
      step's number in the stream; ("next", "done") marks each trajectory's
      last step, except the last trajectory's, still running) written by
      extends of K steps; then S samples of 4 * L steps. Prints the
      trajectories the sampler finds (start, stop, length) and every distinct
      slice drawn with its truncated and done flags. With --span-left A
      --span-right B (a step count; -1 for True) the sampler gets span=(A, B);
      with --pad 1 pad_output=True, and the sample is cut into slices of L
      steps, each listed with its ("collector", "mask") too.
  torchrl_slice_writer.py slice_wor (the slice arguments) [--dump DIR --dump-after K]
                          [--load DIR]
      The same with SliceSamplerWithoutReplacement: prints the size of each
      sample and the trajectory of each of its slices; with --dump, the
      buffer is dumped to DIR after K samples (and sampling goes on); with
      --load, DIR is loaded before sampling.
  torchrl_slice_writer.py env_slice --steps T --lengths 3,2/5,1 --written N
                          --chunk K --slice-len L --signal traj|end --strict 0|1
                          --samples S --seed X
      An [env, time] buffer (LazyTensorStorage(E * T, ndim=2), E the number
      of "/"-separated length lists): env e's trajectories of the given
      lengths (ids 100 e + t; done as in slice), its first N steps written by
      extends of [E, K]. Prints the trajectories found as [env, start, stop,
      length] (time steps) and every distinct slice drawn as its [env, time]
      pairs with its truncated and done flags. --span-left, --span-right and
      --pad as for slice.
"""
import argparse
import json
import logging
import sys

import torch
from tensordict import TensorDict
from torchrl.data import (
    LazyTensorStorage,
    SliceSampler,
    SliceSamplerWithoutReplacement,
    TensorDictMaxValueWriter,
    TensorDictReplayBuffer,
)

logging.getLogger("torchrl").setLevel(logging.WARNING)

MAX_VALUE_CAPACITY = 8
MAX_VALUE_ITEMS = 40
# Operations of the stream: n > 0 an extend of n items, 0 an add of one.
MAX_VALUE_OPS = [5, 0, 9, 3, 0, 11, 10]


def rank_of(i):
    """The rank of item i: halves in [-3, 3], with ties."""
    return float((i * 7) % 13 - 6) / 2


def max_value_items(case, first, count):
    ids = torch.arange(first, first + count)
    base = torch.tensor([rank_of(int(i)) for i in ids], dtype=torch.float32)
    if case == "scalar":
        reward = base
        data = {"reward": reward}
    else:
        # [n, 3]: per-step rewards whose sum and max rank differently
        reward = torch.stack([base, -base / 2, (ids % 3).float() - 1], -1)
        data = {("next", "reward"): reward}
    data["id"] = ids
    data["obs"] = torch.stack([ids.float(), -ids.float()], -1)
    return TensorDict(data, [count])


def max_value_buffer(case):
    if case == "scalar":
        writer = TensorDictMaxValueWriter(rank_key="reward")
    elif case == "vector_sum":
        writer = TensorDictMaxValueWriter(rank_key=("next", "reward"), reduction="sum")
    else:
        writer = TensorDictMaxValueWriter(rank_key=("next", "reward"), reduction="max")
    return TensorDictReplayBuffer(
        storage=LazyTensorStorage(MAX_VALUE_CAPACITY), writer=writer, batch_size=2
    )


def run_max_value(args):
    rb = max_value_buffer(args.case)
    first_op, last_op = (int(x) for x in args.ops.split(":"))
    if args.load:
        rb.loads(args.load)
        # TorchRL reads a nested rank key back as a list; tensordict wants a tuple
        if isinstance(rb._writer._rank_key, list):
            rb._writer._rank_key = tuple(rb._writer._rank_key)
    returned = []
    first_item = sum(max(n, 1) for n in MAX_VALUE_OPS[:first_op])
    for n in MAX_VALUE_OPS[first_op:last_op]:
        if n == 0:
            row = max_value_items(args.case, first_item, 1)[0]
            index = rb.add(row)
            returned.append([-1 if index is None else int(index)])
            first_item += 1
        else:
            returned.append(rb.extend(max_value_items(args.case, first_item, n)).tolist())
            first_item += n
    if args.dump:
        rb.dumps(args.dump)
    writer = rb._writer
    length = len(rb._storage)
    ids = rb._storage._storage["id"][:length].tolist() if length else []
    out = {
        "returned": returned,
        "ids": ids,
        "cursor": int(writer._cursor),
        "write_count": int(writer._write_count),
        "top": sorted([float(r), int(i)] for r, i in writer._current_top_values),
    }
    print(json.dumps(out))


def slice_extras(args):
    """The sampler's span and pad_output arguments from --span-left/right and --pad."""
    extra = {}
    if args.span_left or args.span_right:
        extra["span"] = tuple(True if x == -1 else x for x in (args.span_left, args.span_right))
    if args.pad:
        extra["pad_output"] = True
    return extra


def slice_buffer(args, sampler_class):
    lengths = [int(x) for x in args.lengths.split(",")]
    traj, done = [], []
    for t, n in enumerate(lengths):
        traj += [t] * n
        done += [False] * (n - 1) + [t + 1 < len(lengths)]
    total = len(traj)
    data = TensorDict(
        {
            "traj": torch.tensor(traj),
            "id": torch.arange(total),
            ("next", "done"): torch.tensor(done).unsqueeze(-1),
        },
        [total],
    )
    extra = slice_extras(args)
    if args.signal == "traj":
        sampler = sampler_class(
            slice_len=args.slice_len, traj_key="traj", strict_length=bool(args.strict), **extra
        )
    else:
        sampler = sampler_class(
            slice_len=args.slice_len, end_key=("next", "done"), strict_length=bool(args.strict),
            **extra
        )
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(args.capacity), sampler=sampler)
    for start in range(0, total, args.chunk):
        rb.extend(data[start : start + args.chunk])
    torch.manual_seed(args.seed)
    return rb, sampler


def run_slice_wor(args):
    rb, _ = slice_buffer(args, SliceSamplerWithoutReplacement)
    if args.load:
        rb.loads(args.load)
    sizes, trajs = [], []
    for k in range(args.samples):
        if args.dump and k == args.dump_after:
            rb.dumps(args.dump)
        s = rb.sample(4 * args.slice_len)
        sizes.append(s.shape[0])
        truncated = s["next", "truncated"].reshape(-1).tolist()
        firsts = [0] + [i + 1 for i, t in enumerate(truncated[:-1]) if t]
        trajs.append([int(s["traj"][i]) for i in firsts])
    print(json.dumps({"sizes": sizes, "trajs": trajs}))


def run_slice(args):
    rb, sampler = slice_buffer(args, SliceSampler)
    start, stop, length = sampler._get_stop_and_length(rb._storage)
    trajectories = sorted(
        [int(a), int(b), int(n)] for a, b, n in zip(start[:, 0], stop[:, 0], length)
    )
    slices = {}
    for _ in range(args.samples):
        s = rb.sample(4 * args.slice_len)
        index = s["index"].reshape(-1).tolist()
        truncated = s["next", "truncated"].reshape(-1).tolist()
        done_out = s["next", "done"].reshape(-1).tolist()
        if args.pad and ("collector", "mask") in s.keys(True):
            mask = s["collector", "mask"].reshape(-1).tolist()
            for begin in range(0, len(index), args.slice_len):
                end = begin + args.slice_len
                key = tuple(index[begin:end]) + tuple(mask[begin:end])
                slices[key] = [index[begin:end], truncated[begin:end], done_out[begin:end],
                               mask[begin:end]]
            continue
        # cut after each truncated step: one slice each
        begin = 0
        for k, flag in enumerate(truncated):
            if flag:
                key = tuple(index[begin : k + 1])
                slices[key] = [list(key), truncated[begin : k + 1], done_out[begin : k + 1]]
                begin = k + 1
    print(json.dumps({"trajectories": trajectories, "slices": sorted(slices.values())}))


def env_stream(lengths, env):
    """Trajectory ids (100 env + t) and done flags of one env's steps."""
    traj, done = [], []
    for t, n in enumerate(lengths):
        traj += [100 * env + t] * n
        done += [False] * (n - 1) + [t + 1 < len(lengths)]
    return traj, done


def run_env_slice(args):
    per_env = [[int(x) for x in part.split(",")] for part in args.lengths.split("/")]
    envs, n = len(per_env), args.written
    traj, done = zip(*(env_stream(lengths, e) for e, lengths in enumerate(per_env)))
    data = TensorDict(
        {
            "traj": torch.tensor([t[:n] for t in traj]),
            "id": torch.arange(envs)[:, None] * 1000 + torch.arange(n)[None, :],
            ("next", "done"): torch.tensor([d[:n] for d in done]).unsqueeze(-1),
        },
        [envs, n],
    )
    signal = {"traj_key": "traj"} if args.signal == "traj" else {"end_key": ("next", "done")}
    sampler = SliceSampler(slice_len=args.slice_len, strict_length=bool(args.strict), **signal,
                           **slice_extras(args))
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(envs * args.steps, ndim=2),
                                sampler=sampler)
    for start in range(0, n, args.chunk):
        rb.extend(data[:, start : start + args.chunk])
    torch.manual_seed(args.seed)
    start, stop, length = sampler._get_stop_and_length(rb._storage)
    # TorchRL's coordinates are (time, env): listed here as env, start, stop, length.
    trajectories = [[int(a[1]), int(a[0]), int(b[0]), int(m)] for a, b, m in zip(start, stop, length)]
    slices = {}
    for _ in range(args.samples):
        s = rb.sample(4 * args.slice_len)
        pairs = [[int(e), int(t)] for t, e in s["index"].tolist()]
        truncated = s["next", "truncated"].reshape(-1).tolist()
        done_out = s["next", "done"].reshape(-1).tolist()
        if args.pad and ("collector", "mask") in s.keys(True):
            # padded: slices of slice_len steps, each listed with its mask
            mask = s["collector", "mask"].reshape(-1).tolist()
            for begin in range(0, len(pairs), args.slice_len):
                end = begin + args.slice_len
                key = tuple(map(tuple, pairs[begin:end])) + tuple(mask[begin:end])
                slices[key] = [pairs[begin:end], truncated[begin:end], done_out[begin:end],
                               mask[begin:end]]
            continue
        begin = 0
        for k, flag in enumerate(truncated):
            if flag:
                key = tuple(map(tuple, pairs[begin : k + 1]))
                slices[key] = [pairs[begin : k + 1], truncated[begin : k + 1],
                               done_out[begin : k + 1]]
                begin = k + 1
    print(json.dumps({"trajectories": trajectories, "slices": sorted(slices.values())}))


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    mv = sub.add_parser("max_value")
    mv.add_argument("case", choices=["scalar", "vector_sum", "vector_max"])
    mv.add_argument("--ops", default=f"0:{len(MAX_VALUE_OPS)}")
    mv.add_argument("--load")
    mv.add_argument("--dump")
    for name in ("slice", "slice_wor", "env_slice"):
        sl = sub.add_parser(name)
        if name == "env_slice":
            sl.add_argument("--steps", type=int, required=True)
            sl.add_argument("--written", type=int, required=True)
        else:
            sl.add_argument("--capacity", type=int, required=True)
            sl.add_argument("--dump")
            sl.add_argument("--dump-after", type=int, default=0)
            sl.add_argument("--load")
        sl.add_argument("--span-left", type=int, default=0)
        sl.add_argument("--span-right", type=int, default=0)
        sl.add_argument("--pad", type=int, default=0)
        sl.add_argument("--lengths", required=True)
        sl.add_argument("--chunk", type=int, required=True)
        sl.add_argument("--slice-len", type=int, required=True)
        sl.add_argument("--signal", choices=["traj", "end"], required=True)
        sl.add_argument("--strict", type=int, default=1)
        sl.add_argument("--samples", type=int, default=500)
        sl.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.command == "env_slice":
        run_env_slice(args)
    elif args.command == "max_value":
        run_max_value(args)
    elif args.command == "slice":
        run_slice(args)
    else:
        run_slice_wor(args)


if __name__ == "__main__":
    sys.exit(main())
