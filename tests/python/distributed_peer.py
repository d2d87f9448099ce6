"""The Python rank of the distributed interop suite
(tests/python/test_distributed_interop.cpp, CTest python.Distributed).

  distributed_peer.py PORT

joins the C++ test program's TCPStore on 127.0.0.1:PORT as rank 1 of 2, makes
the default process group (Gloo) with init_process_group, then runs the cases
the C++ side names, one by one, until it names "__end__": for case number n,
the store key "case/n" holds "NAME DIR"; the peer runs CASES[NAME](DIR) and
sets "result/n" to "OK" or the traceback. Cases on a group of their own
("raw" groups, built on the store under the prefix "group/NAME") use
group_src / group_dst; the C++ side builds the same group.

Each case is the Python half of one exchange with the real tensordict
(td.send / recv / isend / irecv); the C++ half checks what it receives against
the truth written here (truth.py), or Python checks what it receives against
the truth C++ wrote.
"""
import datetime
import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from tensordict import LazyStackedTensorDict, NonTensorData, TensorDict  # noqa: E402

from truth import check_truth, write_truth  # noqa: E402

RANK, CPP = 1, 0
TIMEOUT = datetime.timedelta(seconds=60)
STORE = None


def mixed(fill=None, seed=0):
    """The structure most cases exchange: nested, every dtype, keys inserted
    out of order, a nested key ("a") beside a key that sorts between it and
    its leaves when keys are joined with dots ("a-b"), an upper-case key, an
    empty leaf. fill=0 gives the receiver's zeros."""
    g = torch.Generator().manual_seed(seed)

    def t(shape, dtype):
        if fill is not None:
            return torch.zeros(shape, dtype=dtype)
        if dtype == torch.bool:
            return torch.randint(0, 2, shape, generator=g).bool()
        if dtype.is_complex or dtype.is_floating_point:
            return torch.randn(shape, generator=g, dtype=torch.complex128 if dtype.is_complex else torch.float64).to(dtype)
        lo, hi = (0, 255) if dtype == torch.uint8 else (-100, 100)
        return torch.randint(lo, hi, shape, generator=g, dtype=torch.int64).to(dtype)

    return TensorDict(
        {
            "obs": t((3, 4), torch.float32),
            "action": t((3, 2), torch.int64),
            "reward": t((3, 1), torch.float64),
            "done": t((3,), torch.bool),
            "next": TensorDict(
                {
                    "obs": t((3, 4), torch.float16),
                    "pixels": t((3, 2, 2), torch.uint8),
                    "info": TensorDict(
                        {"z": t((3,), torch.bfloat16), "c": t((3, 2), torch.complex64)},
                        batch_size=[3],
                    ),
                },
                batch_size=[3],
            ),
            "a-b": t((3,), torch.int16),
            "a": TensorDict({"x": t((3,), torch.int8)}, batch_size=[3]),
            "Z": t((3,), torch.int32),
            "c128": t((3,), torch.complex128),
            "empty": t((3, 0), torch.float32),
        },
        batch_size=[3],
    )


def raw_group(name):
    store = dist.PrefixStore(f"group/{name}", STORE)
    return dist.ProcessGroupGloo(store, RANK, 2, datetime.timedelta(seconds=20))


def truth_dir(directory):
    return os.path.join(directory, "truth")


# ---- Python sends, C++ receives -------------------------------------------------------


def py_send(directory, **kwargs):
    td = mixed(seed=1)
    write_truth(td, truth_dir(directory))
    td.send(CPP, **kwargs)


def py_isend(directory):
    td = mixed(seed=2)
    write_truth(td, truth_dir(directory))
    works = td.isend(CPP, return_early=True)
    for w in works:
        w.wait()


def py_send_consolidated(directory):
    td = mixed(seed=3)
    write_truth(td, truth_dir(directory))
    td.send(CPP, consolidated=True)


def py_send_non_tensor(directory):
    td = TensorDict(obs=torch.arange(6.0).reshape(3, 2), note=NonTensorData("from python"), batch_size=[3])
    write_truth(td.exclude("note"), truth_dir(directory))
    td.send(CPP)


def py_send_lazy_stack(directory):
    td = LazyStackedTensorDict(
        TensorDict(x=torch.arange(3.0), y=torch.tensor([1, 2], dtype=torch.int64)),
        TensorDict(x=torch.arange(3.0) + 10, y=torch.tensor([3, 4], dtype=torch.int64)),
        stack_dim=0,
    )
    write_truth(td.to_tensordict(), truth_dir(directory))
    td.send(CPP)


def py_send_raw_group(directory):
    td = mixed(seed=4)
    write_truth(td, truth_dir(directory))
    td.send(group=raw_group("raw_send"), group_dst=CPP, init_tag=3)


# ---- C++ sends, Python receives -------------------------------------------------------


def py_recv(directory, **kwargs):
    td = mixed(fill=0)
    td.recv(CPP, **kwargs)
    check_truth(td, truth_dir(directory))


def py_irecv(directory):
    td = mixed(fill=0)
    works = td.irecv(CPP, return_premature=True)
    for w in works:
        w.wait()
    check_truth(td, truth_dir(directory))


def py_recv_consolidated(directory):
    td = mixed(fill=0).consolidate(metadata=True)
    td.recv(CPP, consolidated=True)
    check_truth(td, truth_dir(directory))


def py_recv_lazy_stack(directory):
    td = LazyStackedTensorDict(
        TensorDict(x=torch.zeros(3), y=torch.zeros(2, dtype=torch.int64)),
        TensorDict(x=torch.zeros(3), y=torch.zeros(2, dtype=torch.int64)),
        stack_dim=0,
    )
    td.recv(CPP)
    check_truth(td.to_tensordict(), truth_dir(directory))


def py_learner(directory):
    # A C++ actor's batch in, the learner's answer out.
    batch = TensorDict(obs=torch.zeros(4, 3), reward=torch.zeros(4, dtype=torch.float64), batch_size=[4])
    batch.irecv(CPP, init_tag=40)
    answer = TensorDict(
        action=batch["obs"].sum(-1).to(torch.int64), value=batch["reward"] * 2, batch_size=[4]
    )
    answer.isend(CPP, init_tag=50)


# ---- structures that differ: C++ must throw -----------------------------------------------


def mismatch(name, td, **kwargs):
    def run(directory):
        pg = raw_group(name)
        td.send(group=pg, group_dst=CPP, **kwargs)
        # The group lives until C++ has its error: a receive that is still
        # waiting times out then, rather than see the connection close.
        STORE.get(f"done/{name}")
        del pg

    return run


CASES = {
    "py_send": py_send,
    "py_isend": py_isend,
    "py_send_init_tag": lambda d: py_send(d, init_tag=100),
    "py_send_pseudo_rand": lambda d: py_send(d, init_tag=7, pseudo_rand=True),
    "py_send_consolidated": py_send_consolidated,
    "py_send_consolidated_in_place": py_send_consolidated,
    "py_send_non_tensor": py_send_non_tensor,
    "py_send_lazy_stack": py_send_lazy_stack,
    "py_send_raw_group": py_send_raw_group,
    "py_recv": py_recv,
    "py_irecv": py_irecv,
    "py_recv_init_tag": lambda d: py_recv(d, init_tag=1000),
    "py_recv_pseudo_rand": lambda d: py_recv(d, init_tag=12345, pseudo_rand=True),
    "py_recv_consolidated": py_recv_consolidated,
    "py_recv_lazy_stack": py_recv_lazy_stack,
    "py_learner": py_learner,
    # C++ expects obs float32 [2, 3], id int64 [2]
    "mismatch_dtype_longer": mismatch(
        "mismatch_dtype_longer",
        TensorDict(obs=torch.ones(2, 3, dtype=torch.float64), id=torch.ones(2, dtype=torch.int64), batch_size=[2]),
    ),
    "mismatch_dtype_shorter": mismatch(
        "mismatch_dtype_shorter",
        TensorDict(obs=torch.ones(2, 3, dtype=torch.float16), id=torch.ones(2, dtype=torch.int64), batch_size=[2]),
    ),
    "mismatch_shape": mismatch(
        "mismatch_shape",
        TensorDict(obs=torch.ones(2, 4), id=torch.ones(2, dtype=torch.int64), batch_size=[2]),
    ),
    "mismatch_key": mismatch(
        # sorted: "act" (int64 [2, 2], 32 bytes) lands where C++ expects "id" (16 bytes)
        "mismatch_key",
        TensorDict(obs=torch.ones(2, 3), act=torch.ones(2, 2, dtype=torch.int64), batch_size=[2]),
    ),
    "mismatch_fewer_leaves": mismatch(
        "mismatch_fewer_leaves", TensorDict(id=torch.ones(2, dtype=torch.int64), batch_size=[2])
    ),
    "mismatch_much_longer": mismatch(
        # 8 MiB where C++ expects 24 bytes: Gloo would abort a process that
        # posted a 24-byte receive for it
        "mismatch_much_longer",
        TensorDict(obs=torch.ones(2, 1 << 20), id=torch.ones(2, dtype=torch.int64), batch_size=[2]),
    ),
    "mismatch_consolidated": mismatch(
        "mismatch_consolidated",
        TensorDict(obs=torch.ones(2, 3), id=torch.ones(2, dtype=torch.int64), extra=torch.ones(2), batch_size=[2]),
        consolidated=True,
    ),
    "mismatch_then_match": None,  # filled below
}


def mismatch_then_match(directory):
    # A size mismatch leaves the group in step: the next transfer on the same
    # group works.
    pg = raw_group("mismatch_then_match")
    TensorDict(obs=torch.ones(2, 3, dtype=torch.float64), id=torch.ones(2, dtype=torch.int64), batch_size=[2]).send(
        group=pg, group_dst=CPP
    )
    td = TensorDict(obs=torch.arange(6.0).reshape(2, 3), id=torch.tensor([7, 8]), batch_size=[2])
    write_truth(td, truth_dir(directory))
    td.send(group=pg, group_dst=CPP)


CASES["mismatch_then_match"] = mismatch_then_match


def main(argv):
    global STORE
    port = int(argv[1])
    STORE = dist.TCPStore("127.0.0.1", port, 2, False, timeout=datetime.timedelta(seconds=300))
    dist.init_process_group("gloo", store=STORE, rank=RANK, world_size=2, timeout=TIMEOUT)
    n = 0
    while True:
        name, directory = STORE.get(f"case/{n}").decode().split(" ", 1)
        if name == "__end__":
            break
        try:
            CASES[name](directory)
            result = "OK"
        except Exception:
            result = traceback.format_exc()
        STORE.set(f"result/{n}", result)
        n += 1
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
