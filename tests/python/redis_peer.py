"""The Python writer of RedisConcurrent (tests/python/test_redis_interop.cpp):
writes the odd rows of one store while the C++ test writes the even ones,
then reads back every row C++ acknowledged.

  redis_peer.py SOCKET TD_ID ROWS create|attach DIR

create: makes the store (TensorDictStore.from_schema); attach: C++ made it.
DIR/ready        written once attached (C++ starts writing then too)
DIR/py_acked.json  {"rows": [...], "first": t0, "last": t1}, after writing
DIR/cpp_acked.json  written by C++; read back here, row by row.
Row i holds obs = i + [0, 0.25, 0.5], action = 1000 + i, next.obs = -i
(float64), whoever writes it. Prints "OK: read back N C++ rows".
"""
import json
import os
import sys
import time

import torch
from tensordict import TensorDict
from tensordict.store import TensorDictStore


def row(i):
    return TensorDict(
        {
            "obs": torch.arange(3, dtype=torch.float32) * 0.25 + i,
            "action": torch.tensor(1000 + i),
            "next": {"obs": torch.full((3,), -float(i), dtype=torch.float64)},
        },
        batch_size=[],
    )


def main(sock, td_id, rows, mode, directory):
    if mode == "create":
        store = TensorDictStore.from_schema(
            {"obs": ([3], torch.float32), "action": ([], torch.int64), ("next", "obs"): ([3], torch.float64)},
            batch_size=[rows],
            unix_socket_path=sock,
            td_id=td_id,
        )
    else:
        store = TensorDictStore.from_store(unix_socket_path=sock, td_id=td_id)
    assert store.batch_size == torch.Size([rows]), store.batch_size
    open(os.path.join(directory, "ready"), "w").close()
    acked = []
    first = time.time()
    for i in range(1, rows, 2):  # odd rows are Python's
        store[i] = row(i)
        acked.append(i)
    last = time.time()
    with open(os.path.join(directory, "py_acked.json"), "w") as f:
        json.dump({"rows": acked, "first": first, "last": last}, f)
    # C++'s rows, once it says which it wrote (a fresh handle reads them).
    path = os.path.join(directory, "cpp_acked.json")
    deadline = time.time() + 120
    while not os.path.exists(path):
        if time.time() > deadline:
            raise SystemExit("C++ never wrote cpp_acked.json")
        time.sleep(0.01)
    with open(path) as f:
        cpp_rows = json.load(f)["rows"]
    again = TensorDictStore.from_store(unix_socket_path=sock, td_id=td_id)
    got = again[torch.tensor(cpp_rows)]
    for j, i in enumerate(cpp_rows):
        want = row(i)
        for key in want.keys(include_nested=True, leaves_only=True):
            if not torch.equal(got[j][key], want[key]):
                raise SystemExit(f"C++ row {i} {key}: {got[j][key]}, expected {want[key]}")
    print(f"OK: read back {len(cpp_rows)} C++ rows")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]))
