"""The Redis suite of the interop frame (tests/python/test_redis_interop.cpp):
Python's TensorDictStore and LazyStackedTensorDictStore on the redis-server
that the C++ test started. DIR/server.json names its Unix socket; a case
NAME's store has td_id "py-NAME" (written by Python) or "cpp-NAME" (written
by C++), and DIR/NAME/truth* hold what it must contain (truth.py).
"""
import json
import os

import torch
from tensordict import LazyStackedTensorDict, NonTensorData, NonTensorStack, TensorDict, tensorclass
from tensordict.store import LazyStackedTensorDictStore, TensorDictStore

from truth import check_truth, write_truth


@tensorclass
class Transition:
    """C++ names it "redis_cases.Transition" (its python_qualname)."""

    obs: torch.Tensor
    action: torch.Tensor
    env: str


def _socket(case_dir):
    with open(os.path.join(os.path.dirname(case_dir), "server.json")) as f:
        return json.load(f)["socket"]


def _store(case_dir, td_id):
    return TensorDictStore.from_store(unix_socket_path=_socket(case_dir), td_id=td_id)


def _lazy_store(case_dir, td_id):
    return LazyStackedTensorDictStore.from_store(unix_socket_path=_socket(case_dir), td_id=td_id)


def _ramp(shape, dtype, seed):
    """Distinct values of every dtype, negative ones where the dtype has them."""
    n = 1
    for d in shape:
        n *= d
    base = torch.arange(n, dtype=torch.float64) * 1.25 + seed
    if dtype == torch.bool:
        return (torch.arange(n) % 3 == seed % 3).reshape(shape)
    if dtype.is_complex:
        return torch.complex(base, -base).to(dtype).reshape(shape)
    if dtype == torch.uint8:
        return ((torch.arange(n) * 7 + seed) % 256).to(dtype).reshape(shape)
    if not dtype.is_floating_point:
        base = torch.arange(n, dtype=torch.int64) * 37 - 5 * n + seed
    return base.to(dtype).reshape(shape)


def _case_dir_name(case_dir):
    return os.path.basename(case_dir)


# ---- Python writes, C++ reads ---------------------------------------------


def _dtypes_td():
    # bfloat16 is not here: Python cannot write its bytes (numpy has no
    # bfloat16); FromSchema pins that.
    return TensorDict(
        {
            "f32": _ramp([4, 3], torch.float32, 1),
            "f64": _ramp([4], torch.float64, 2),
            "f16": _ramp([4, 2], torch.float16, 3),
            "i8": _ramp([4], torch.int8, 4),
            "i16": _ramp([4, 2], torch.int16, 5),
            "i32": _ramp([4], torch.int32, 6),
            "i64": _ramp([4, 1], torch.int64, 7),
            "u8": _ramp([4, 5], torch.uint8, 8),
            "b": _ramp([4], torch.bool, 9),
            "c64": _ramp([4, 2], torch.complex64, 10),
            "c128": _ramp([4], torch.complex128, 11),
            "nested": {"x": _ramp([4, 2], torch.float32, 12), "deeper": {"y": _ramp([4], torch.int64, 13)}},
        },
        batch_size=[4],
    )


def _write(case_dir, td, td_id=None):
    store = TensorDictStore.from_tensordict(
        td, unix_socket_path=_socket(case_dir), td_id=td_id or "py-" + _case_dir_name(case_dir)
    )
    write_truth(td, os.path.join(case_dir, "truth"))
    return store


def _py_dtypes(case_dir):
    _write(case_dir, _dtypes_td())


def _py_scalar_batch(case_dir):
    td = TensorDict(
        {"a": torch.tensor(3.5), "v": _ramp([3], torch.int32, 1), "n": {"m": _ramp([2, 2], torch.float64, 2)}},
        batch_size=[],
    )
    _write(case_dir, td)


def _py_batch_2d(case_dir):
    td = TensorDict(
        {"obs": _ramp([2, 3, 4], torch.float32, 1), "done": _ramp([2, 3], torch.bool, 2),
         "next": {"obs": _ramp([2, 3, 4], torch.float32, 3)}},
        batch_size=[2, 3],
    )
    _write(case_dir, td)


def _non_tensor_td():
    return TensorDict(
        {
            "obs": _ramp([3, 2], torch.float32, 1),
            "name": NonTensorData("pong-v5", batch_size=[3]),
            "count": NonTensorData(42, batch_size=[3]),
            "cfg": NonTensorData({"lr": 0.5, "layers": [64, 64], "tag": "\u00e9t\u00e9"}, batch_size=[3]),
            "labels": NonTensorStack("a", "b", "c"),
            "nested": {"note": NonTensorData("deep", batch_size=[3])},
        },
        batch_size=[3],
    )


def _py_non_tensor(case_dir):
    _write(case_dir, _non_tensor_td())


def _transition():
    return Transition(
        obs=_ramp([2, 3], torch.float32, 1), action=_ramp([2], torch.int64, 2), env="Pong", batch_size=[2]
    )


def _py_tensorclass(case_dir):
    tc = _transition()
    TensorDictStore.from_tensordict(tc, unix_socket_path=_socket(case_dir), td_id="py-TensorClass")
    write_truth(tc, os.path.join(case_dir, "truth"))


_SCHEMA = {
    "obs": ([3], torch.float32),
    "action": ([], torch.int64),
    "pixels": ([2, 2], torch.uint8),
    "done": ([], torch.bool),
    "half": ([2], torch.bfloat16),
    ("next", "obs"): ([3], torch.float64),
}


def _schema_row(i):
    return TensorDict(
        {
            "obs": _ramp([3], torch.float32, i),
            "action": torch.tensor(100 + i),
            "pixels": _ramp([2, 2], torch.uint8, i),
            "done": torch.tensor(i % 2 == 1),
            "half": torch.zeros(2, dtype=torch.bfloat16),
            "next": {"obs": _ramp([3], torch.float64, 10 * i)},
        },
        batch_size=[],
    )


def _schema_expected(n, rows):
    local = TensorDict({}, batch_size=[n])
    for key, (shape, dtype) in _SCHEMA.items():
        local.set(key, torch.zeros([n, *shape], dtype=dtype))
    for i in rows:
        local[i] = _schema_row(i)
    return local


def _py_from_schema(case_dir):
    store = TensorDictStore.from_schema(
        _SCHEMA, batch_size=[5], unix_socket_path=_socket(case_dir), td_id="py-FromSchema"
    )
    # Row writes leave "half" out: Python cannot write bfloat16 values.
    store[1] = _schema_row(1).exclude("half")
    rows = torch.tensor([4, 0])
    store[rows] = torch.stack([_schema_row(4), _schema_row(0)]).exclude("half")
    # Python cannot write bfloat16 values (its bytes go through numpy): pinned.
    try:
        store[2] = _schema_row(2).set("half", torch.ones(2, dtype=torch.bfloat16))
    except TypeError as e:
        assert "BFloat16" in str(e), e
    else:
        raise AssertionError("Python wrote a bfloat16 row: update docs/redis.md")
    write_truth(_schema_expected(5, [1, 4, 0]), os.path.join(case_dir, "truth"))


def _py_rows_into_cpp_store(case_dir):
    # C++ made "cpp-RowsTarget" (from_schema, batch [6]) before this ran.
    store = _store(case_dir, "cpp-RowsTarget")
    assert store.batch_size == torch.Size([6]), store.batch_size
    store[2] = _schema_row(2).exclude("half")
    store[torch.tensor([5, 0])] = torch.stack([_schema_row(5), _schema_row(0)]).exclude("half")
    store[3:5] = torch.stack([_schema_row(3), _schema_row(4)]).exclude("half")
    write_truth(_schema_expected(6, [2, 5, 0, 3, 4]), os.path.join(case_dir, "truth"))


def _py_rows_target(case_dir):
    # The store C++ writes rows into (RedisToPython.RowsIntoPythonStore).
    TensorDictStore.from_schema(_SCHEMA, batch_size=[6], unix_socket_path=_socket(case_dir), td_id="py-RowsTarget")


def _py_pickle(case_dir):
    store = _write(case_dir, TensorDict({"obs": _ramp([2], torch.float32, 1)}, batch_size=[2]))
    store["obj"] = {1, 2, 3}  # not JSON: Python pickles it


def _agents(hetero=True):
    out = []
    for k in range(3):
        out.append(
            TensorDict(
                {
                    "obs": _ramp([2, 3 + k if hetero else 3], torch.float32, 100 * k),
                    "reward": _ramp([2], torch.float32, k),
                    "next": {"obs": _ramp([2, 2], torch.int64, 10 * k)},
                },
                batch_size=[2],
            )
        )
    return out


def _write_elements(case_dir, members):
    for i, m in enumerate(members):
        write_truth(m, os.path.join(case_dir, f"truth_{i}"))


def _py_lazy_stack0(case_dir):
    members = _agents()
    LazyStackedTensorDictStore.from_lazy_stack(
        LazyStackedTensorDict(*members, stack_dim=0), unix_socket_path=_socket(case_dir), td_id="py-LazyStack0"
    )
    _write_elements(case_dir, members)


def _lazy_dim1(case_dir, count, td_id):
    # Elements of batch [2] stacked along dim 1: "seq" differs in shape,
    # "pos" does not; then "full" is set whole (Python's "batch" layout).
    members = [
        TensorDict({"pos": _ramp([2, 3], torch.float32, 10 * k), "seq": _ramp([2, k + 1], torch.int64, k)},
                   batch_size=[2])
        for k in range(count)
    ]
    store = LazyStackedTensorDictStore.from_lazy_stack(
        LazyStackedTensorDict(*members, stack_dim=1), unix_socket_path=_socket(case_dir), td_id=td_id
    )
    full = _ramp([2, count, 4], torch.float64, 7)
    store["full"] = full
    for k, m in enumerate(members):
        m["full"] = full[:, k]
    _write_elements(case_dir, members)
    # The leaves that stack, as one tensordict of the stack's batch size.
    write_truth(
        TensorDict({"pos": torch.stack([m["pos"] for m in members], 1), "full": full}, batch_size=[2, count]),
        os.path.join(case_dir, "truth_stacked"),
    )


def _py_lazy_stack1(case_dir):
    _lazy_dim1(case_dir, 3, "py-LazyStack1")


def _py_lazy_stack_square(case_dir):
    # count == inner batch size: only the "layout" field tells the layouts apart.
    _lazy_dim1(case_dir, 2, "py-LazyStackSquare")


def python_cases():
    return {
        "Dtypes": _py_dtypes,
        "DtypesRW": lambda case_dir: _write(case_dir, _dtypes_td(), "py-DtypesRW"),
        "ScalarBatch": _py_scalar_batch,
        "Batch2D": _py_batch_2d,
        "NonTensor": _py_non_tensor,
        "TensorClass": _py_tensorclass,
        "FromSchema": _py_from_schema,
        "RowsIntoCppStore": _py_rows_into_cpp_store,
        "RowsTarget": _py_rows_target,
        "Pickle": _py_pickle,
        "LazyStack0": _py_lazy_stack0,
        "LazyStack1": _py_lazy_stack1,
        "LazyStackSquare": _py_lazy_stack_square,
        "LazyStackSquareRW": lambda case_dir: _lazy_dim1(case_dir, 2, "py-LazyStackSquareRW"),
    }


# ---- C++ writes, Python reads ---------------------------------------------


def _check_store(name, case_dir):
    store = _store(case_dir, "cpp-" + name)
    assert type(store) is TensorDictStore, type(store)
    check_truth(store.to_tensordict(), os.path.join(case_dir, "truth"))
    return store


def _check_non_tensor(name, case_dir):
    store = _store(case_dir, "cpp-" + name)
    with open(os.path.join(case_dir, "scalars.json")) as f:
        scalars = json.load(f)
    for key, value in scalars.items():
        assert store[key] == value, (key, store[key])
    # Python's own limit, pinned: to_tensordict() takes a number for a tensor
    # (and a dict for a level) and fails on the batch size.
    try:
        store.to_tensordict()
    except RuntimeError as e:
        assert "batch dimension mismatch" in str(e), e
    else:
        raise AssertionError("to_tensordict() read a number non-tensor: update docs/redis.md")
    for key in scalars:
        del store[key]  # the rest, which to_tensordict() reads
    check_truth(store.to_tensordict(), os.path.join(case_dir, "truth"))


def _check_rows(store, case_dir):
    """store[idx] (Python's row read) against C++'s truth of td[idx]."""
    with open(os.path.join(case_dir, "rows.json")) as f:
        idx = json.load(f)
    check_truth(store[torch.tensor(idx)], os.path.join(case_dir, "truth_rows"))
    check_truth(store[idx[0]], os.path.join(case_dir, "truth_row0"))


def _check_tensorclass(name, case_dir):
    tc = _store(case_dir, "cpp-" + name)
    assert type(tc) is Transition, type(tc)  # from __tensorclass__
    assert tc.env == "Pong", tc.env
    check_truth(tc._tensordict.to_tensordict(), os.path.join(case_dir, "truth"))


def _check_lazy(name, case_dir, stack_dim):
    store = _lazy_store(case_dir, "cpp-" + name)
    assert type(store) is LazyStackedTensorDictStore, type(store)
    with open(os.path.join(case_dir, "lazy.json")) as f:
        info = json.load(f)
    assert list(store.batch_size) == info["batch_size"], store.batch_size
    if stack_dim == 0:
        for i in range(info["count"]):
            check_truth(store[i].to_tensordict(), os.path.join(case_dir, f"truth_{i}"))
    stacked = TensorDict({}, batch_size=store.batch_size)
    for key in info["stacked"]:
        stacked.set(tuple(key), store.get(tuple(key)))
    check_truth(stacked, os.path.join(case_dir, "truth_stacked"))


def check_cpp_case(name, case_dir):
    if name in ("Dtypes", "ScalarBatch", "Batch2D"):
        _check_store(name, case_dir)
    elif name == "NonTensor":
        _check_non_tensor(name, case_dir)
    elif name in ("FromSchema", "RowReads"):
        _check_rows(_check_store(name, case_dir), case_dir)
    elif name == "TensorClass":
        _check_tensorclass(name, case_dir)
    elif name == "RowsIntoPythonStore":
        check_truth(_store(case_dir, "py-RowsTarget").to_tensordict(), os.path.join(case_dir, "truth"))
    elif name == "LazyStack0":
        _check_lazy(name, case_dir, 0)
    elif name in ("LazyStack1", "LazyStackSquare"):
        _check_lazy(name, case_dir, 1)
    else:
        raise AssertionError(f"no Python check for the C++ case {name}")
