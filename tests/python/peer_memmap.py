"""The real Python tensordict on the other side of a memmap round trip
(test_python_peer.cpp).

  peer_memmap.py version          prints tensordict's and torch's versions
  peer_memmap.py extend SRC DST   loads SRC (written by C++), checks it is
                                  expected(), saves extended(it) to DST

The values are formulas both sides compute; a mismatch exits non-zero with
what differs.
"""
import sys

import tensordict
import torch
from tensordict import TensorDict


def expected():
    r = torch.arange(12)
    return {
        ("obs",): (r.reshape(4, 3) / 2).float(),
        ("action",): torch.arange(4) * 3,
        ("done",): torch.arange(4) % 2 == 0,
        ("next", "reward"): (torch.arange(4).reshape(4, 1) / 4).double(),
        ("next", "obs_bf16"): torch.arange(8).reshape(4, 2).to(torch.bfloat16),
        ("next", "deep", "code"): (torch.arange(4) - 2).to(torch.int16),
    }


def fail(msg):
    print(f"peer_memmap.py: {msg}")
    sys.exit(1)


def check(td):
    if list(td.batch_size) != [4]:
        fail(f"batch_size {list(td.batch_size)}, expected [4]")
    want = expected()
    got = {k if isinstance(k, tuple) else (k,) for k in td.keys(True, True)}
    if got != set(want):
        fail(f"tensor keys {sorted(got)}, expected {sorted(want)}")
    for key, value in want.items():
        leaf = td.get(key)
        if leaf.dtype != value.dtype or leaf.shape != value.shape or not torch.equal(leaf, value):
            fail(f"{key}: {leaf.dtype} {list(leaf.shape)} {leaf.tolist()}, expected "
                 f"{value.dtype} {list(value.shape)} {value.tolist()}")
    if td.get_non_tensor("label") != "cartpole":
        fail(f"label {td.get_non_tensor('label')!r}, expected 'cartpole'")


def extended(td):
    out = td.to_tensordict() if hasattr(td, "to_tensordict") else td.clone()
    out = out.unlock_()
    out.set("obs", out.get("obs") * 2)
    out.set(("next", "done_py"), ~out.get("done"))
    out.set(("py", "added"), torch.arange(4, dtype=torch.int32) + 100)
    out.set_non_tensor("label", "from python")
    return out


if __name__ == "__main__":
    if sys.argv[1] == "version":
        print(f"tensordict {tensordict.__version__} torch {torch.__version__}")
    elif sys.argv[1] == "extend":
        src = TensorDict.load_memmap(sys.argv[2])
        check(src)
        extended(src).memmap(sys.argv[3])
        print("OK")
    else:
        fail(f"unknown mode {sys.argv[1]}")
