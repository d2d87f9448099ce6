#!/usr/bin/env python
"""The Python peer of the C++ benchmarks: the same operations on the same data in the
real Python tensordict, on the same torch, timed the way Google Benchmark times.

Every row mirrors one C++ row ``BM_<op>/tensordict[/<args>]`` of a benchmark binary (its
"suite", the binary's name without ``bench_``): the same shapes, dtypes, key names, nesting,
batch size and index pattern, and the same operation done by Python tensordict. A row is
named ``BM_<op>/python[/<args>]`` (or ``BM_<op>/python_<variant>`` for a second way of doing
it in Python), so that benchmarks/run.py pairs it with the C++ row of the same op and args.

Timing: each row runs once, then with growing iteration counts until one run takes at least
the row's minimum time (0.2 s unless the C++ row uses another), and reports that last run's
real time per iteration (``real_time``, ns) and this thread's CPU time per iteration
(``cpu_time``), as Google Benchmark does. Rows whose C++ counterpart runs on one intra-op
thread run with ``torch.set_num_threads(1)``; the others keep torch's default, as the C++
binary keeps LibTorch's.

Output: a Google Benchmark JSON document (``context`` and ``benchmarks``) on stdout, or in
the file given with --out.

Usage (with the project's Python environment, which has torch, tensordict, h5py and redis):

    .venv/bin/python benchmarks/peers/tensordict_peer.py --list
    .venv/bin/python benchmarks/peers/tensordict_peer.py --suite ops --out /tmp/ops_py.json
    .venv/bin/python benchmarks/peers/tensordict_peer.py --filter 'index_' --repetitions 3

Rows needing a server or a second process do what the C++ binary does: the Redis rows start
their own redis-server on a Unix socket in a temporary directory and stop it; the send/recv
rows start a second Python process and connect to it with torch.distributed over Gloo on
loopback.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

# ---------------------------------------------------------------------------------------------
# Registry and timing


class Row:
    def __init__(self, suite, name, setup, min_time=0.2, threads=None, iterations=None):
        self.suite, self.name, self.setup = suite, name, setup
        self.min_time, self.threads, self.iterations = min_time, threads, iterations


ROWS: list[Row] = []


def row(suite, name, min_time=0.2, threads=None, iterations=None):
    """Registers `setup` (returning the timed call, or a (call, teardown) pair) as a row."""

    def register(setup):
        ROWS.append(Row(suite, name, setup, min_time, threads, iterations))
        return setup

    return register


def run_iterations(call, n):
    wall, cpu = time.perf_counter(), time.thread_time()
    for _ in range(n):
        call()
    return time.perf_counter() - wall, time.thread_time() - cpu


def measure(call, min_time, fixed_iterations=None):
    """(iterations, real seconds, cpu seconds) of the run that filled min_time, growing the
    count as Google Benchmark does (at most 10x per step, 1.4x the estimate)."""
    call()  # one untimed call first: Python imports and caches lazily on first use
    if fixed_iterations:
        wall, cpu = run_iterations(call, fixed_iterations)
        return fixed_iterations, wall, cpu
    n = 1
    while True:
        wall, cpu = run_iterations(call, n)
        if wall >= min_time or n >= 1_000_000_000:
            return n, wall, cpu
        multiplier = min_time * 1.4 / max(wall, 1e-9)
        multiplier = min(10.0, multiplier) if wall / min_time > 0.1 else 10.0
        n = max(int(n * multiplier + 0.5), n + 1)


# ---------------------------------------------------------------------------------------------
# Shared helpers

from tensordict import TensorDict  # noqa: E402  (after the timing code, which needs torch only)


def bench_dir() -> Path:
    base = os.environ.get("TENSORDICT_BENCH_DIR")
    p = Path(base) if base else Path(tempfile.gettempdir()) / "tensordict-bench"
    p = p / "python-peer"
    p.mkdir(parents=True, exist_ok=True)
    return p


# ---------------------------------------------------------------------------------------------
# core: bench_core.cpp. 10 leaves of float32[4, 3], batch [4], RL key names.

FLAT_KEYS = ["observation", "action", "reward", "done", "terminated", "truncated", "step_count",
             "pixels", "state_value", "sample_log_prob"]
TOP_KEYS = ["observation", "action", "done", "terminated", "truncated", "step_count", "pixels"]
NEXT_KEYS = ["observation", "reward", "done"]
SAME_LENGTH_TOP_KEYS = [f"key{i}" for i in range(7)]


def small_leaf():
    return torch.randn(4, 3)


def flat_td():
    return TensorDict({k: small_leaf() for k in FLAT_KEYS}, batch_size=[4])


def nested_td(top):
    td = TensorDict({k: small_leaf() for k in top}, batch_size=[4])
    for k in NEXT_KEYS:
        td["next", k] = small_leaf()
    return td


@row("core", "BM_get/python")
def core_get():
    td = flat_td()
    return lambda: td.get("terminated")  # td.get("terminated")


@row("core", "BM_nested_get/python")
def core_nested_get():
    td = nested_td(TOP_KEYS)
    return lambda: td.get(("next", "reward"))  # td.get(("next", "reward"))


@row("core", "BM_nested_get_same_length_keys/python")
def core_nested_get_same_length():
    td = nested_td(SAME_LENGTH_TOP_KEYS)
    return lambda: td.get(("next", "reward"))


@row("core", "BM_set/python")
def core_set():
    td, value = flat_td(), small_leaf()
    return lambda: td.set("terminated", value)  # td.set("terminated", value)


@row("core", "BM_update/python")
def core_update():
    dst, src = flat_td(), flat_td()
    return lambda: dst.update(src)  # dst.update(src)


@row("core", "BM_keys/python")
def core_keys():
    td = flat_td()

    def call():  # for k in td.keys(): touch k
        for k in td.keys():
            len(k)

    return call


@row("core", "BM_items/python")
def core_items():
    td = flat_td()

    def call():  # for k, v in td.items(): touch v
        for _, v in td.items():
            v.data_ptr

    return call


# ---------------------------------------------------------------------------------------------
# ops: bench_ops.cpp. 10 leaves nested 2 levels, batch 100,000.

OPS_BATCH = 100_000


def ops_td():
    n = OPS_BATCH
    return TensorDict({
        "obs": torch.randn(n, 8),
        "action": torch.randn(n, 4),
        "reward": torch.randn(n, 1),
        "done": torch.zeros(n, 1, dtype=torch.bool),
        "nested": {
            "a": torch.randn(n, 3),
            "b": torch.randint(0, 10, (n,), dtype=torch.long),
            "c": torch.randn(n, 2, 2),
            "deeper": {
                "x": torch.randn(n, 5),
                "y": torch.randn(n),
                "z": torch.randint(0, 255, (n, 3), dtype=torch.uint8),
            },
        },
    }, batch_size=[n])


_OPS = {}


def ops_data():
    if "td" not in _OPS:
        torch.manual_seed(0)
        _OPS["td"] = ops_td()
        _OPS["idx"] = torch.randint(0, OPS_BATCH, (256,), dtype=torch.long)
        _OPS["mask"] = torch.rand(OPS_BATCH) < 0.01  # ~1,000 rows
    return _OPS


@row("ops", "BM_index_int/python")
def ops_index_int():
    td, i = ops_data()["td"], [0]

    def call():  # td[i % 100_000]
        i[0] += 1
        return td[i[0] % OPS_BATCH]

    return call


@row("ops", "BM_index_slice/python")
def ops_index_slice():
    td = ops_data()["td"]
    return lambda: td[100:1100]  # td[100:1100]


@row("ops", "BM_index_long256/python")
def ops_index_long():
    td, idx = ops_data()["td"], ops_data()["idx"]
    return lambda: td[idx]  # td[idx], idx: 256 random int64 rows


@row("ops", "BM_index_mask/python")
def ops_index_mask():
    td, mask = ops_data()["td"], ops_data()["mask"]
    return lambda: td[mask]  # td[mask], mask: ~1% of 100,000 rows


@row("ops", "BM_index_put_int/python")
def ops_index_put_int():
    td = ops_data()["td"]
    value, i = td[0].clone(), [0]

    def call():  # td[i % 100_000] = row
        i[0] += 1
        td[i[0] % OPS_BATCH] = value

    return call


@row("ops", "BM_stack64/python")
def ops_stack64():
    td = ops_data()["td"]
    rows = [td[i * 7] for i in range(64)]
    return lambda: torch.stack(rows, 0)  # torch.stack([td[i * 7] for i in range(64)], 0)


@row("ops", "BM_cat64/python")
def ops_cat64():
    td = ops_data()["td"]
    parts = [td[i * 16:i * 16 + 16] for i in range(64)]
    return lambda: torch.cat(parts, 0)  # torch.cat([td[16 i:16 i + 16] ...], 0)


@row("ops", "BM_apply_mul2/python")
def ops_apply():
    td = ops_data()["td"]
    return lambda: td.apply(lambda t: t * 2)  # td.apply(lambda t: t * 2)


@row("ops", "BM_clone/python")
def ops_clone():
    td = ops_data()["td"]
    return lambda: td.clone()  # td.clone()


@row("ops", "BM_update/python")
def ops_update():
    td = ops_data()["td"]
    dest, src = td.copy(), td.copy()
    return lambda: dest.update(src)  # dest.update(src), 10 leaves over 3 levels


# ---------------------------------------------------------------------------------------------
# memmap: bench_memmap.cpp. 256 MiB and 100 MiB in 8 leaves; 2,000 leaves of 4 KiB; memmap_like 1M rows.

_MEMMAP = {}


def big_td(cols=8192):
    # 8 leaves of [1024, cols] floats: 8192 is 256 MiB, 3200 is 100 MiB
    if cols not in _MEMMAP:
        _MEMMAP[cols] = TensorDict({f"leaf{i}": torch.randn(1024, cols) for i in range(8)},
                                   batch_size=[1024])
    return _MEMMAP[cols]


def many_td():
    if "many" not in _MEMMAP:
        td = TensorDict(batch_size=[16])
        for g in range(100):
            for i in range(20):
                td[f"g{g}", f"x{i}"] = torch.randn(16, 64)
        _MEMMAP["many"] = td
    return _MEMMAP["many"]


# The C++ rows run 6 iterations each (real time): the same here.
def memmap_rows(size, cols):
    @row("memmap", f"BM_save_{size}/python", iterations=6)
    def memmap_save():
        d, path = big_td(cols), bench_dir() / f"save_td{cols}"
        # td.memmap(path): Python's default num_threads=0 (one thread writes every leaf)
        return lambda: d.memmap(path, existsok=True)

    @row("memmap", f"BM_save_{size}/python_2_threads", iterations=6)
    def memmap_save_threads():
        d, path = big_td(cols), bench_dir() / f"save_td_threads{cols}"
        return lambda: d.memmap(path, num_threads=2, existsok=True)  # td.memmap(path, num_threads=2)

    @row("memmap", f"BM_load_read_{size}/python", iterations=6)
    def memmap_load():
        d, path = big_td(cols), bench_dir() / f"load_td{cols}"
        d.memmap(path, existsok=True)

        def call():  # TensorDict.load_memmap(path), then every leaf summed (read)
            loaded = TensorDict.load_memmap(path)
            return sum(v.sum().item() for v in loaded.values(True, True))

        return call


memmap_rows("256MB", 8192)
memmap_rows("100MB", 3200)


@row("memmap", "BM_save_2000_small/python", min_time=0.5)
def memmap_save_small():
    d, path = many_td(), bench_dir() / "many_td"
    return lambda: d.memmap(path, existsok=True)  # td.memmap(path), 2,000 leaves


@row("memmap", "BM_memmap_like_1M_rows/python", min_time=0.5)
def memmap_like():
    path = bench_dir() / "like_td"
    proto = TensorDict(
        {"obs": torch.zeros((), dtype=torch.uint8).expand(1_000_000, 3, 64, 64)},
        batch_size=[1_000_000])
    return lambda: proto.memmap_like(path, existsok=True)  # proto.memmap_like(path)


# ---------------------------------------------------------------------------------------------
# hdf5: bench_hdf5.cpp. 10,000 rows of 10 leaves over two levels in one HDF5 file.

H5_ROWS = 10_000


def h5_transitions(offset=0.0):
    r = torch.arange(H5_ROWS, dtype=torch.double) + offset
    n = H5_ROWS
    return TensorDict({
        "obs": (r.unsqueeze(1) + torch.arange(8)).float(),
        "action": r.unsqueeze(1).expand(n, 4).float(),
        "reward": r.float(),
        "done": r.remainder(3).eq(0),
        "step": r.long(),
        "id": r.unsqueeze(1).expand(n, 2).int(),
        "pixels": r.unsqueeze(1).expand(n, 3).remainder(256).to(torch.uint8),
        "next": {
            "obs": (r.unsqueeze(1) + torch.arange(8)).float(),
            "reward": r.float(),
            "done": r.remainder(2).bool(),
        },
    }, batch_size=[n])


def random_rows(n, seed):
    """The xorshift row numbers of bench_hdf5.cpp's random_rows, the same sequence."""
    out, x, mask = [], (0x9E3779B97F4A7C15 * (seed + 1)) & (2**64 - 1), 2**64 - 1
    for _ in range(n):
        x ^= (x << 13) & mask
        x ^= x >> 7
        x ^= (x << 17) & mask
        out.append(x % H5_ROWS)
    return out


_H5 = {}


def h5_file():
    if "file" not in _H5:
        from tensordict import PersistentTensorDict
        path = bench_dir() / "bench_hdf5.h5"
        if path.exists():
            path.unlink()
        PersistentTensorDict.from_dict(h5_transitions(), filename=str(path)).close()
        _H5["file"] = str(path)
    return _H5["file"]


@row("hdf5", "BM_h5_row_read_10_leaves/python")
def h5_row_read():
    from tensordict import PersistentTensorDict
    h5 = PersistentTensorDict.from_h5(h5_file())
    rows, i = random_rows(1024, 1), [0]

    def call():  # h5[r].to_tensordict(): h5[r] is a view of the file, to_tensordict reads it
        i[0] += 1
        return h5[rows[i[0] % len(rows)]].to_tensordict()

    return call, h5.close


@row("hdf5", "BM_h5_row_write_10_leaves/python")
def h5_row_write():
    from tensordict import PersistentTensorDict
    h5 = PersistentTensorDict.from_h5(h5_file(), mode="r+")
    value = h5_transitions(0.5)[7].clone()
    rows, i = random_rows(1024, 2), [0]

    def call():  # h5[r] = row
        i[0] += 1
        h5[rows[i[0] % len(rows)]] = value

    return call, h5.close


@row("hdf5", "BM_h5_read_256_random_rows/python")
def h5_read_256():
    from tensordict import PersistentTensorDict
    h5 = PersistentTensorDict.from_h5(h5_file())
    batches = [torch.tensor(random_rows(256, 10 + s)) for s in range(16)]
    i = [0]

    def call():  # h5[idx].to_tensordict(), idx: 256 rows, unsorted, with repeats
        i[0] += 1
        return h5[batches[i[0] % len(batches)]].to_tensordict()

    return call, h5.close


# ---------------------------------------------------------------------------------------------
# redis: bench_redis.cpp. A store of 10,000 rows of 10 float32[64] leaves on a redis-server
# this script starts on a Unix socket.

REDIS_ROWS = 10_000


class RedisServer:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="td-peer-redis-")
        self.socket = os.path.join(self.dir, "redis.sock")
        self.proc = subprocess.Popen(
            ["redis-server", "--port", "0", "--unixsocket", self.socket, "--save", "",
             "--appendonly", "no", "--dir", self.dir, "--proto-max-bulk-len", "4gb"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        import redis
        for _ in range(500):
            try:
                redis.Redis(unix_socket_path=self.socket).ping()
                return
            except (redis.exceptions.ConnectionError, FileNotFoundError):
                time.sleep(0.01)
        self.stop()
        raise RuntimeError("redis-server did not start")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)


_REDIS = {}


def redis_store():
    if "store" not in _REDIS:
        from tensordict.store import TensorDictStore
        _REDIS["server"] = RedisServer()
        _REDIS["store"] = TensorDictStore.from_schema(
            {f"leaf{i}": ([64], torch.float32) for i in range(10)}, batch_size=[REDIS_ROWS],
            unix_socket_path=_REDIS["server"].socket, td_id="bench")
    return _REDIS["store"]


def redis_stop():
    store = _REDIS.pop("store", None)
    if store is not None:
        store.close()
    server = _REDIS.pop("server", None)
    if server is not None:
        server.stop()


def redis_row():
    return TensorDict({f"leaf{i}": torch.randn(64) for i in range(10)}, batch_size=[])


@row("redis", "BM_row_write_10_leaves/python")
def redis_row_write():
    store, value, i = redis_store(), redis_row(), [0]

    def call():  # store[(i * 7919) % 10_000] = row
        store[(i[0] * 7919) % REDIS_ROWS] = value
        i[0] += 1

    return call


@row("redis", "BM_sample_256_10_leaves/python")
def redis_sample():
    store, idx = redis_store(), torch.randint(REDIS_ROWS, (256,), dtype=torch.long)
    return lambda: store[idx]  # store[idx], 256 random rows (a TensorDict read from the server)


# ---------------------------------------------------------------------------------------------
# distributed: bench_distributed.cpp. send/recv of 10 leaves (half nested) between two
# processes over Gloo on loopback; the receiver writes into a preallocated tensordict of the
# same structure and answers with one int64. map of 1M rows on 2 workers.

MB = 1000 * 1000
COMMAND_TAG, ACK_TAG = 100, 101
SEND_MODES = {"default": 1, "consolidated": 2}


def send_td(nbytes, zeros):
    per_leaf, rows = nbytes // 10 // 4, 100
    td = TensorDict(batch_size=[rows])
    for i in range(10):
        t = torch.zeros(rows, per_leaf // rows) if zeros else torch.randn(rows, per_leaf // rows)
        if i % 2:
            td["nested", f"leaf{i}"] = t
        else:
            td[f"leaf{i}"] = t
    return td


def gloo_peer(store_path):
    """Rank 1: receives commands (mode, bytes, iterations) and that many tensordicts."""
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"file://{store_path}", rank=1, world_size=2)
    cmd, ack = torch.empty(3, dtype=torch.long), torch.ones(1, dtype=torch.long)
    while True:
        dist.recv(cmd, 0, tag=COMMAND_TAG)
        mode, nbytes, iterations = (int(x) for x in cmd)
        if mode == 0:
            break
        target = send_td(nbytes, True)
        if mode == SEND_MODES["consolidated"]:
            target = target.consolidate()  # recv(consolidated=True) writes into its buffer
        for _ in range(iterations):
            target.recv(0, consolidated=mode == SEND_MODES["consolidated"])
            dist.send(ack, 0, tag=ACK_TAG)
    dist.destroy_process_group()


_GLOO = {}


def gloo_group():
    if "peer" not in _GLOO:
        import torch.distributed as dist
        tmp = tempfile.mkdtemp(prefix="td-peer-gloo-")
        store = os.path.join(tmp, "store")
        _GLOO["tmp"] = tmp
        _GLOO["peer"] = subprocess.Popen([sys.executable, __file__, "--gloo-peer", store])
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=2)
    return _GLOO


def gloo_stop():
    if "peer" in _GLOO:
        import torch.distributed as dist
        peer = _GLOO.pop("peer")
        try:
            dist.send(torch.zeros(3, dtype=torch.long), 1, tag=COMMAND_TAG)
            peer.wait(timeout=60)
        except Exception:  # the peer failed: its rows already say so
            peer.kill()
            peer.wait()
        dist.destroy_process_group()
        shutil.rmtree(_GLOO.pop("tmp"), ignore_errors=True)


def send_row(nbytes, mode):
    def setup():
        import torch.distributed as dist
        gloo_group()
        src, ack = send_td(nbytes, False), torch.empty(1, dtype=torch.long)
        if mode == "consolidated":
            src = src.consolidate()  # send(consolidated=True) sends the consolidated buffer

        def call():  # src.send(1) (or consolidated=True); rank 1: target.recv(0); ack back
            src.send(1, consolidated=mode == "consolidated")
            dist.recv(ack, 1, tag=ACK_TAG)

        def announce(n):
            dist.send(torch.tensor([SEND_MODES[mode], nbytes, n], dtype=torch.long), 1,
                      tag=COMMAND_TAG)

        call.announce = announce  # the peer learns each run's iteration count first
        return call

    return setup


def map_score(chunk):
    return TensorDict({"score": chunk["obs"].pow(2).sum(-1) + chunk["reward"]},
                      batch_size=chunk.batch_size)


@row("distributed", "BM_map_1M_rows/python", min_time=0.5)
def map_rows():
    n = 1000 * 1000
    td = TensorDict({"obs": torch.randn(n, 8), "reward": torch.randn(n)}, batch_size=[n])
    import multiprocessing as mp
    pool = mp.get_context("spawn").Pool(2)
    # spawned workers: a pool forked after other rows had started threads (memmap's
    # writers, Gloo) hung.
    # td.map(score, num_workers=2) with a pool made once (as the C++ floor's threads are
    # cheap to start, a Python pool is not): the rows go to the workers in shared memory
    return (lambda: td.map(map_score, pool=pool)), (lambda: (pool.close(), pool.join()))


for _size, _bytes in (("1MB", 1 * MB), ("100MB", 100 * MB)):
    row("distributed", f"BM_send_{_size}/python", min_time=0.5)(send_row(_bytes, "default"))
    row("distributed", f"BM_send_{_size}/python_consolidated", min_time=0.5)(
        send_row(_bytes, "consolidated"))


# ---------------------------------------------------------------------------------------------
# parity: bench_parity.cpp. The rows no other binary has, on bench_ops' data (10 leaves,
# batch 100,000) nested as there or flat; scaling over leaves and depth; memory per leaf.

_PARITY = {}


def parity_data():
    if "nested" not in _PARITY:
        nested = ops_data()["td"]
        _PARITY["nested"] = nested
        # the same 10 tensors, each under the last part of its key, at the root
        _PARITY["flat"] = TensorDict(
            {(k if isinstance(k, str) else k[-1]): v for k, v in nested.items(True, True)},
            batch_size=nested.batch_size)
    return _PARITY


@row("parity", "BM_to_float64/python")
def parity_to():
    td = parity_data()["nested"]
    return lambda: td.to(torch.float64)  # td.to(torch.float64)


@row("parity", "BM_consolidate/python")
def parity_consolidate():
    td = parity_data()["nested"]
    return lambda: td.consolidate()  # td.consolidate()


@row("parity", "BM_from_consolidated/python")
def parity_from_consolidated():
    td, path = parity_data()["nested"], bench_dir() / "consolidated.bin"
    td.consolidate(filename=path)
    return lambda: TensorDict.from_consolidated(path)  # TensorDict.from_consolidated(path)


@row("parity", "BM_state_dict_save/python")
def parity_state_dict_save():
    td, path = parity_data()["nested"], bench_dir() / "state_dict.pt"
    return lambda: torch.save(td.state_dict(), path)  # torch.save(td.state_dict(), path)


@row("parity", "BM_state_dict_load/python")
def parity_state_dict_load():
    td, path = parity_data()["nested"], bench_dir() / "state_dict_load.pt"
    torch.save(td.state_dict(), path)
    target = td.clone()
    # target.load_state_dict(torch.load(path)); torch.load's default weights_only=True
    # refuses the metadata of tensordict's state dict, so it is turned off
    return lambda: target.load_state_dict(torch.load(path, weights_only=False))


@row("parity", "BM_index_int_flat/python")
def parity_index_int_flat():
    td, i = parity_data()["flat"], [0]

    def call():  # td[i % 100_000], the 10 leaves at the root
        i[0] += 1
        return td[i[0] % OPS_BATCH]

    return call


@row("parity", "BM_index_long256_flat/python")
def parity_index_long_flat():
    td, idx = parity_data()["flat"], torch.randint(0, OPS_BATCH, (256,), dtype=torch.long)
    return lambda: td[idx]  # td[idx], 256 random rows


@row("parity", "BM_stack64_flat/python")
def parity_stack_flat():
    td = parity_data()["flat"]
    rows = [td[i * 7] for i in range(64)]
    return lambda: torch.stack(rows, 0)  # torch.stack([td[7 i] for i in range(64)], 0)


SCALE_ROWS = 1000


def scaled_td(leaves, depth):
    """`leaves` leaves of float32[1000, 4], each under the chain n1/.../n<depth-1>."""
    td = TensorDict(batch_size=[SCALE_ROWS])
    chain = tuple(f"n{level}" for level in range(1, depth))
    for i in range(leaves):
        td[chain + (f"leaf{i}",)] = torch.randn(SCALE_ROWS, 4)
    return td


def scaling_rows(kind, args, make):
    def index_int(arg):
        def setup():
            td, i = make(arg), [0]

            def call():  # td[i % 1000]
                i[0] += 1
                return td[i[0] % SCALE_ROWS]

            return call
        return setup

    def update(arg):
        def setup():
            dest, src = make(arg), make(arg)
            return lambda: dest.update(src)  # dest.update(src)
        return setup

    def stack64(arg):
        def setup():
            td = make(arg)
            rows = [td[i * 7] for i in range(64)]
            return lambda: torch.stack(rows, 0)  # torch.stack([td[7 i] ...], 0)
        return setup

    for op, setup in (("index_int", index_int), ("update", update), ("stack64", stack64)):
        for arg in args:
            row("parity", f"BM_{op}_{kind}/python/{arg}")(setup(arg))


scaling_rows("leaves", (10, 100, 1000), lambda n: scaled_td(n, 1))
scaling_rows("depth", (1, 3, 8), lambda d: scaled_td(10, d))

MEMORY_LEAVES = 10_000
MEMORY_COPIES = 10


def resident_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@row("parity", "BM_leaf_memory_10k/python")
def parity_leaf_memory():
    import ctypes
    import gc
    import tracemalloc
    leaves = [torch.zeros(4) for _ in range(MEMORY_LEAVES)]
    keys = [f"leaf{i}" for i in range(MEMORY_LEAVES)]

    def build():  # td = TensorDict(batch_size=[4]); td.set(key, leaf) for 10,000 leaves
        td = TensorDict(batch_size=[4])
        for k, v in zip(keys, leaves):
            td.set(k, v)
        return td

    # 10 tensordicts built and kept, so that memory freed earlier and reused counts less;
    # the free heap returned to the system first (malloc_trim), as the C++ row does, or the
    # pages earlier rows freed would absorb the growth
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    rss0 = resident_bytes()
    kept = [build() for _ in range(MEMORY_COPIES)]
    rss1 = resident_bytes()
    tracemalloc.start()
    heap0 = tracemalloc.get_traced_memory()[0]
    kept_traced = [build() for _ in range(MEMORY_COPIES)]
    heap1 = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    per_leaf = MEMORY_LEAVES * MEMORY_COPIES
    build.counters = {"rss_bytes_per_leaf": (rss1 - rss0) / per_leaf,
                      "heap_bytes_per_leaf": (heap1 - heap0) / per_leaf}
    del kept, kept_traced
    return build


# ---------------------------------------------------------------------------------------------
# checkpoint: bench_checkpoint.cpp. The 101 MB transformer of examples/checkpoint_model.h
# ("100mb": vocab 12000, context 512, dim 512, hidden 2048, 6 blocks), the same modules under
# the same names, saved with from_module + memmap and loaded back into the module.

class _Block(torch.nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.ln2 = torch.nn.LayerNorm(dim)
        self.fc1 = torch.nn.Linear(dim, hidden)
        self.fc2 = torch.nn.Linear(hidden, dim)


class _Transformer(torch.nn.Module):
    def __init__(self, vocab=12000, context=512, dim=512, hidden=2048, blocks=6):
        super().__init__()
        self.tok = torch.nn.Embedding(vocab, dim)
        self.pos = torch.nn.Embedding(context, dim)
        self.blocks = torch.nn.ModuleList(_Block(dim, hidden) for _ in range(blocks))
        self.ln_f = torch.nn.LayerNorm(dim)
        self.register_buffer("position_ids", torch.arange(context))


_CKPT = {}


def ckpt_model():
    if "model" not in _CKPT:
        torch.manual_seed(0)
        _CKPT["model"] = _Transformer()
    return _CKPT["model"]


# The C++ rows run 10 iterations each (real time): the same here.
@row("checkpoint", "BM_ckpt_save_100MB/python", iterations=10)
def ckpt_save():
    m, path = ckpt_model(), bench_dir() / "ckpt_save"
    # TensorDict.from_module(model).memmap(path): one writer thread (num_threads=0)
    return lambda: TensorDict.from_module(m).memmap(path, existsok=True)


@row("checkpoint", "BM_ckpt_save_100MB/python_torch_save", iterations=10)
def ckpt_torch_save():
    m, path = ckpt_model(), bench_dir() / "ckpt.pt"
    return lambda: torch.save(m.state_dict(), path)  # torch.save(model.state_dict(), path)


@row("checkpoint", "BM_ckpt_load_100MB/python", iterations=10)
def ckpt_load():
    m, path = ckpt_model(), bench_dir() / "ckpt_load"
    TensorDict.from_module(m).memmap(path, existsok=True)
    target = _Transformer()
    # TensorDict.load_memmap(path).to_module(model, inplace=True): the values copied into the
    # module's own parameters, as the C++ default (to_module copies)
    return lambda: TensorDict.load_memmap(path).to_module(target, inplace=True)


@row("checkpoint", "BM_ckpt_load_100MB/python_swap", iterations=10)
def ckpt_load_swap():
    m, path = ckpt_model(), bench_dir() / "ckpt_load_swap"
    TensorDict.from_module(m).memmap(path, existsok=True)
    target = _Transformer()
    # TensorDict.load_memmap(path).to_module(model): Python's default, the module's parameters
    # swapped for the mapped tensors (zero-copy, as the C++ share_storage)
    return lambda: TensorDict.load_memmap(path).to_module(target)


# ---------------------------------------------------------------------------------------------
# Driver

def context():
    import tensordict
    return {
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host_name": platform.node(),
        "executable": "benchmarks/peers/tensordict_peer.py",
        "num_cpus": os.cpu_count(),
        "load_avg": list(os.getloadavg()),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "tensordict": tensordict.__version__,
        "torch_num_threads": torch.get_num_threads(),
        "library_build_type": "python",
    }


def selected(args):
    pattern = re.compile(args.filter) if args.filter else None
    out = []
    for r in ROWS:
        if args.suite and r.suite not in args.suite:
            continue
        if pattern and not pattern.search(r.name):
            continue
        out.append(r)
    return out


def run_row(r, repetitions, family_index):
    default_threads = torch.get_num_threads()
    if r.threads:
        torch.set_num_threads(r.threads)
    results = []
    try:
        made = r.setup()
        call, teardown = made if isinstance(made, tuple) else (made, None)
        announce = getattr(call, "announce", None)
    except Exception as e:  # a row that cannot run says why, as Google Benchmark's errors do
        torch.set_num_threads(default_threads)
        return [error_row(r, family_index, e)]
    try:
        for rep in range(repetitions):
            if announce is None:
                n, wall, cpu = measure(call, r.min_time, r.iterations)
            else:
                n, wall, cpu = measure_announced(call, announce, r.min_time)
            results.append({
                "name": r.name, "run_name": r.name, "run_type": "iteration",
                "family_index": family_index, "per_family_instance_index": 0,
                "repetitions": repetitions, "repetition_index": rep, "threads": 1,
                "iterations": n, "real_time": wall / n * 1e9, "cpu_time": cpu / n * 1e9,
                "time_unit": "ns", "torch_num_threads": torch.get_num_threads(),
                **getattr(call, "counters", {}),
            })
    except Exception as e:
        results.append(error_row(r, family_index, e))
    finally:
        if teardown:
            teardown()
        torch.set_num_threads(default_threads)
    return results


def error_row(r, family_index, error):
    print(f"tensordict_peer: {r.name} failed: {error!r}", file=sys.stderr)
    return {"name": r.name, "run_name": r.name, "run_type": "iteration",
            "family_index": family_index, "per_family_instance_index": 0,
            "error_occurred": True, "error_message": f"{type(error).__name__}: {error}"}


def measure_announced(call, announce, min_time):
    """measure() for a row whose peer process must know each run's iteration count first."""
    announce(1)
    call()  # untimed, as in measure()
    n = 1
    while True:
        announce(n)
        wall, cpu = run_iterations(call, n)
        if wall >= min_time:
            return n, wall, cpu
        multiplier = min(10.0, min_time * 1.4 / max(wall, 1e-9)) if wall / min_time > 0.1 else 10.0
        n = max(int(n * multiplier + 0.5), n + 1)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--filter", help="only the rows whose name matches this regex (re.search)")
    p.add_argument("--suite", action="append",
                   help="only the rows mirroring this binary (core, ops, memmap, hdf5, redis, "
                   "distributed, parity, checkpoint; repeatable)")
    p.add_argument("--out", help="write the JSON document here instead of stdout")
    p.add_argument("--list", action="store_true", help="print the rows (suite and name) and exit")
    p.add_argument("--repetitions", type=int, default=1)
    p.add_argument("--gloo-peer", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.gloo_peer:
        gloo_peer(args.gloo_peer)
        return 0
    rows = selected(args)
    if args.list:
        for r in rows:
            print(f"{r.suite}\t{r.name}")
        return 0
    torch.manual_seed(0)
    doc = {"context": context(), "benchmarks": []}
    try:
        for i, r in enumerate(rows):
            print(f"tensordict_peer: {r.name}", file=sys.stderr, flush=True)
            doc["benchmarks"] += run_row(r, args.repetitions, i)
    finally:
        redis_stop()
        gloo_stop()
    text = json.dumps(doc, indent=2) + "\n"
    if args.out:
        Path(args.out).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
