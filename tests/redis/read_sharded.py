"""Reads a sharded store with redis-py from the layout alone (docs/redis.md,
"Sharding"): the manifest lists the blocks, each block is a plain store in
Python's layout (what TensorDictStore.from_store(td_id=block) reads), and the
buffer is the blocks' rows in order. Checks the rows the C++ test wrote:
obs row i holds bytes i % 251, action row i is [i, i+1, i+2, i+3].
Usage: read_sharded.py <unix socket> <manifest td_id>"""
import json
import struct
import sys

import redis

sock, td_id = sys.argv[1], sys.argv[2]
r = redis.Redis(unix_socket_path=sock)
manifest = json.loads(r.get(f"tensordict:{{{td_id}}}:__shards__"))
assert r.get(f"tensordict:{{{td_id}}}:__batch_size__") is None  # not a store by itself


def block_leaf(block, path):
    k = lambda suffix: f"tensordict:{{{block}}}:{suffix}"
    meta = {a.decode(): b.decode() for a, b in r.hgetall(k("m:" + path)).items()}
    return json.loads(meta["shape"]), meta["dtype"], r.get(k("d:" + path))


n = manifest["batch_size"][0]
obs, action, rows = b"", [], 0
for block in manifest["blocks"]:
    k = lambda suffix: f"tensordict:{{{block}}}:{suffix}"
    count = json.loads(r.get(k("__batch_size__")))[0]
    assert {m.decode() for m in r.smembers(k("__keys__"))} == {"obs", "action"}
    shape, dtype, data = block_leaf(block, "obs")
    assert shape == [count, 84, 84, 3] and dtype == "torch.uint8", (shape, dtype)
    obs += data
    shape, dtype, data = block_leaf(block, "action")
    assert shape == [count, 4] and dtype == "torch.float32", (shape, dtype)
    action += struct.unpack("<%df" % (4 * count), data)
    rows += count
assert rows == n, (rows, n)
row = 84 * 84 * 3
for i in range(n):
    assert obs[i * row:(i + 1) * row] == bytes([i % 251]) * row, i
    assert action[4 * i:4 * i + 4] == [i, i + 1, i + 2, i + 3], (i, action[4 * i:4 * i + 4])
print("OK %d rows in %d blocks" % (n, len(manifest["blocks"])))
