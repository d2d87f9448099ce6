"""Memory-mapped directories both ways (test_memmap_interop.cpp), run by peer.py.

Each case directory holds data/ (the memmap directory) and truth/ (truth.py);
a lazy stack has truth_<i>/ per member instead. Python -> C++: python_cases().
C++ -> Python: check_cpp_case(), which for update_by_python also writes rows
in place and records what it wrote in truth_after/.
"""
import json
import os
from typing import Optional

import torch
from tensordict import (
    LazyStackedTensorDict,
    MemoryMappedTensor,
    NonTensorStack,
    TensorDict,
    is_tensorclass,
    tensorclass,
)

from truth import check_truth, write_truth

DTYPES = [
    "float16", "bfloat16", "float32", "float64", "complex64", "complex128", "bool",
    "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64",
]


def values(dtype, shape):
    """Distinctive values of `dtype`: signs, fractions, NaN, -0.0, inf and
    values above 2**63 where the dtype holds them."""
    n = 1
    for d in shape:
        n *= d
    i = torch.arange(n, dtype=torch.int64)
    if dtype.is_complex:
        real = torch.tensor([float(k) / 3 - 1 for k in range(n)], dtype=torch.float64)
        t = torch.complex(real, -real * 2).to(dtype)
    elif dtype.is_floating_point:
        t = (i.double() / 3 - 1).to(dtype)
        special = [float("nan"), -0.0, float("inf"), -float("inf")]
        t[: min(n, 4)] = torch.tensor(special[: min(n, 4)], dtype=torch.float64).to(dtype)
    elif dtype == torch.bool:
        t = i % 3 == 0
    elif dtype == torch.uint64:
        t = (i * 7919 - 40).view(torch.uint64)  # negatives become values above 2**63
    elif dtype in (torch.uint16, torch.uint32):
        t = ((i * 40503) % (1 << 16)).to(dtype)
    elif dtype == torch.int64:
        t = i * 3_000_000_000_017 - 5_000_000_000_000  # beyond 32 bits, both signs
    else:
        info = torch.iinfo(dtype)
        t = ((i * 37 - 50) % (info.max - info.min + 1) + info.min).to(dtype)
    return t.reshape(shape)


@tensorclass
class Transition:
    obs: torch.Tensor
    action: torch.Tensor
    env: str
    gamma: float
    mask: Optional[torch.Tensor] = None
    seed: Optional[int] = None


@tensorclass
class Inner:
    a: torch.Tensor
    tag: str


@tensorclass
class Outer:
    x: torch.Tensor
    inner: Inner


def structures():
    """The cases both sides write (test_memmap_interop.cpp builds the same names)."""
    f = lambda shape: values(torch.float32, shape)
    cases = {}
    for name in DTYPES:
        dtype = getattr(torch, name)
        cases[f"dtype_{name}"] = TensorDict(x=values(dtype, (3, 2)), batch_size=[3])
    cases["nested_three_levels"] = TensorDict(
        a=f((3,)),
        b=TensorDict(c=f((3, 2)), d=TensorDict(e=values(torch.int64, (3, 1, 2)), batch_size=[3, 1]),
                     batch_size=[3]),
        batch_size=[3])
    cases["empty_level"] = TensorDict(
        a=f((3,)), empty=TensorDict({}, batch_size=[3]),
        b=TensorDict(inner_empty=TensorDict({}, batch_size=[3, 2]), batch_size=[3]),
        batch_size=[3])
    cases["batch_scalar"] = TensorDict(a=f(()), b=f((4,)), batch_size=[])
    cases["batch_zero_rows"] = TensorDict(a=f((0, 5)), n=TensorDict(b=f((0,)), batch_size=[0]),
                                          batch_size=[0])
    cases["batch_2d"] = TensorDict(a=f((2, 3, 4)), b=values(torch.int32, (2, 3)), batch_size=[2, 3])
    cases["keys_encoding"] = TensorDict(
        {"with space": f((2,)), "ünïcödé": f((2,)), "dot.key": f((2,)), "dash-key": f((2,)),
         "UPPER": f((2,)), "nested level": TensorDict({"é x": f((2, 1))}, batch_size=[2])},
        batch_size=[2])
    non_tensor = TensorDict(a=f((2,)), batch_size=[2])
    for key, value in [("text", "cartpole"), ("integer", 7), ("real", 0.25), ("list", [1, "two", 3.5]),
                       ("mapping", {"k": [1, 2], "v": None}), ("flag", True), ("nothing", None)]:
        non_tensor.set_non_tensor(key, value)
    cases["non_tensor_values"] = non_tensor
    stack = TensorDict(a=f((4,)), batch_size=[4])
    stack.set("tasks", NonTensorStack("lift", "push", "pull", "lift"))
    stack.set("codes", NonTensorStack(1, 2, 3, 4))
    cases["non_tensor_stack"] = stack
    nested = TensorDict(a=f((2,)), n=TensorDict(b=f((2,)), batch_size=[2]), batch_size=[2])
    nested.set_non_tensor(("n", "label"), "inner")
    cases["non_tensor_nested"] = nested
    cases["non_contiguous_leaf"] = TensorDict(a=f((3, 4)).t(), b=f((4, 6))[:, ::2], batch_size=[4])
    return cases


def tensorclasses():
    f = lambda shape: values(torch.float32, shape)
    return {
        "tensorclass": Transition(obs=f((4, 3)), action=values(torch.int64, (4,)), env="CartPole",
                                  gamma=0.5, mask=values(torch.bool, (4,)), seed=3, batch_size=[4]),
        "tensorclass_optional_unset": Transition(obs=f((4, 3)), action=values(torch.int64, (4,)),
                                                 env="Pong", gamma=0.25, batch_size=[4]),
    }


def lazy_stacks():
    f = lambda shape: values(torch.float32, shape)
    return {
        "lazy_stack_heterogeneous": LazyStackedTensorDict(
            TensorDict(a=f((2,)), b=f((2, 3)), batch_size=[2]),
            TensorDict(a=f((2,)) + 1, c=values(torch.int64, (2, 1)), batch_size=[2]),
            TensorDict(a=f((2,)) + 2, b=f((2, 5)), batch_size=[2]), stack_dim=0),
        "lazy_stack_dim1": LazyStackedTensorDict(
            TensorDict(a=f((2,)), batch_size=[2]), TensorDict(a=f((2,)) * 2, batch_size=[2]),
            stack_dim=1),
    }


EXPANDED_ROWS = 1_000_000


def _write_plain(td):
    def write(case_dir):
        td.memmap(os.path.join(case_dir, "data"))
        write_truth(td, os.path.join(case_dir, "truth"))
    return write


def _write_stack(stack):
    def write(case_dir):
        stack.memmap(os.path.join(case_dir, "data"))
        for i, member in enumerate(stack.tensordicts):
            write_truth(member, os.path.join(case_dir, f"truth_{i}"))
        with open(os.path.join(case_dir, "stack.json"), "w") as f:
            json.dump({"stack_dim": stack.stack_dim, "members": len(stack.tensordicts)}, f)
    return write


def _write_memmap_like(case_dir):
    row = TensorDict(obs=values(torch.float32, (4,)), n=TensorDict(a=values(torch.int16, (2, 2)),
                                                                   batch_size=[]), batch_size=[])
    row.expand(EXPANDED_ROWS).memmap_like(os.path.join(case_dir, "data"))


def _write_pickled(case_dir):
    td = TensorDict(a=values(torch.float32, (2,)), batch_size=[2])
    td.set_non_tensor("obj", {1, 2})  # a set is not JSON: Python pickles it
    td.memmap(os.path.join(case_dir, "data"))


def python_cases():
    cases = {name: _write_plain(td) for name, td in {**structures(), **tensorclasses()}.items()}
    cases.update({name: _write_stack(s) for name, s in lazy_stacks().items()})
    cases["memmap_like_expanded"] = _write_memmap_like
    cases["pickled_value"] = _write_pickled
    cases["for_cpp_update"] = _write_plain(structures()["nested_three_levels"])
    return cases


def _check_memmap_like(td):
    if list(td.batch_size) != [EXPANDED_ROWS]:
        raise AssertionError(f"batch_size {list(td.batch_size)}")
    want = {("obs",): (torch.float32, [EXPANDED_ROWS, 4]), ("n", "a"): (torch.int16, [EXPANDED_ROWS, 2, 2])}
    got = {k if isinstance(k, tuple) else (k,): v for k, v in td.items(True, True)}
    if set(got) != set(want):
        raise AssertionError(f"keys {sorted(got)}")
    for key, (dtype, shape) in want.items():
        leaf = got[key]
        if leaf.dtype != dtype or list(leaf.shape) != shape or torch.count_nonzero(leaf) != 0:
            raise AssertionError(f"{key}: {leaf.dtype} {list(leaf.shape)}, "
                                 f"{int(torch.count_nonzero(leaf))} non-zero")
        if not isinstance(leaf, MemoryMappedTensor):
            raise AssertionError(f"{key}: a {type(leaf).__name__}, not memory-mapped")


def check_cpp_case(name, case_dir):
    data = os.path.join(case_dir, "data")
    td = TensorDict.load_memmap(data)
    if name.startswith("lazy_stack"):
        with open(os.path.join(case_dir, "stack.json")) as f:
            meta = json.load(f)
        if not isinstance(td, LazyStackedTensorDict) or td.stack_dim != meta["stack_dim"]:
            raise AssertionError(f"a {type(td).__name__}, expected a lazy stack along "
                                 f"{meta['stack_dim']}")
        if len(td.tensordicts) != meta["members"]:
            raise AssertionError(f"{len(td.tensordicts)} members, expected {meta['members']}")
        for i, member in enumerate(td.tensordicts):
            check_truth(member, os.path.join(case_dir, f"truth_{i}"))
        return
    if name == "memmap_like_expanded":
        _check_memmap_like(td)
        return
    if name.startswith("tensorclass") and not isinstance(td, Transition):
        raise AssertionError(f"a {type(td).__name__}, expected memmap_cases.Transition")
    check_truth(td, os.path.join(case_dir, "truth"))
    if name == "tensorclass_optional_unset" and (td.mask is not None or td.seed is not None):
        raise AssertionError(f"unset fields read as mask={td.mask}, seed={td.seed}")
    if name == "update_by_python":
        # In place, through Python's memory maps: a row of every leaf, and one
        # leaf whole. C++ reads the directory back (truth_after/).
        td[1] = TensorDict(a=torch.full((), -5.0), b=TensorDict(
            c=torch.full((2,), 9.5), d=TensorDict(e=torch.full((1, 2), 77), batch_size=[1]),
            batch_size=[]), batch_size=[])
        td.get("a").mul_(2)
        write_truth(TensorDict.load_memmap(data), os.path.join(case_dir, "truth_after"))
