"""Reads a C++ sharded store from Python (docs/redis.md, "Sharding"): Python
tensordict has no sharded store, so the manifest is read with redis-py, and
each block, a plain store in Python's layout, with the real
TensorDictStore.from_store; the buffer is the blocks' rows in order. Checks
the rows the C++ test wrote: obs row i holds bytes i % 251, action row i is
[i, i+1, i+2, i+3].
Usage: read_sharded.py <unix socket> <manifest td_id>"""
import json
import sys

import redis
import torch
from tensordict.store import TensorDictStore

sock, td_id = sys.argv[1], sys.argv[2]
r = redis.Redis(unix_socket_path=sock)
manifest = json.loads(r.get(f"tensordict:{{{td_id}}}:__shards__"))
try:  # not a store by itself
    TensorDictStore.from_store(unix_socket_path=sock, td_id=td_id)
    raise AssertionError("the manifest id opened as a store")
except KeyError:
    pass

n = manifest["batch_size"][0]
parts = []
for block in manifest["blocks"]:
    store = TensorDictStore.from_store(unix_socket_path=sock, td_id=block)
    assert set(store.keys()) == {"obs", "action"}, set(store.keys())
    part = store.to_tensordict()
    assert part["obs"].shape[1:] == (84, 84, 3) and part["obs"].dtype == torch.uint8
    assert part["action"].shape[1:] == (4,) and part["action"].dtype == torch.float32
    parts.append(part)
buffer = torch.cat(parts)
assert buffer.batch_size == torch.Size([n]), (buffer.batch_size, n)
rows = torch.arange(n)
assert torch.equal(buffer["obs"], (rows % 251).to(torch.uint8).view(n, 1, 1, 1).expand(n, 84, 84, 3))
assert torch.equal(buffer["action"], (rows.view(n, 1) + torch.arange(4)).to(torch.float32))
print("OK %d rows in %d blocks" % (n, len(manifest["blocks"])))
