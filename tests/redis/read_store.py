"""A reader written from the layout spec alone (formats.md §4) with redis-py:
reads the store the C++ test wrote and checks every value.
Usage: read_store.py <unix socket> <td_id>"""
import json
import struct
import sys

import redis

FORMATS = {"torch.float32": "f", "torch.int64": "q", "torch.bool": "?"}

sock, td_id = sys.argv[1], sys.argv[2]
r = redis.Redis(unix_socket_path=sock)
k = lambda suffix: f"tensordict:{{{td_id}}}:{suffix}"


def leaf(path):
    meta = {a.decode(): b.decode() for a, b in r.hgetall(k("m:" + path)).items()}
    data = r.get(k("d:" + path))
    if meta.get("is_non_tensor") == "1":
        return meta["encoding"], json.loads(data.decode())
    shape = json.loads(meta["shape"])
    fmt = FORMATS[meta["dtype"]]
    n = 1
    for d in shape:
        n *= d
    assert len(data) == n * struct.calcsize(fmt), (path, len(data))
    return shape, list(struct.unpack("<%d%s" % (n, fmt), data))


assert json.loads(r.get(k("__batch_size__"))) == [6]
assert r.get(k("__device__")) == b""
keys = {m.decode() for m in r.smembers(k("__keys__"))}
assert keys == {"obs", "action", "done", "next.obs", "label", "labels"}, keys

obs_rows = [list(range(6 * i, 6 * i + 6)) for i in range(6)]
obs_rows[2] = obs_rows[5]
assert leaf("obs") == ([6, 2, 3], [float(v) for row in obs_rows for v in row]), leaf("obs")
assert leaf("next.obs")[1] == [float(v + 1000) for row in obs_rows for v in row]
assert leaf("action") == ([6], [0, 1, 5, 3, 4, 5])
assert leaf("done") == ([6], [i % 3 == 0 for i in [0, 1, 5, 3, 4, 5]])
assert leaf("label") == ("json", "cat")
assert leaf("labels") == ("json_array", ["a", "b", "f", "d", "e", "f"]), leaf("labels")
print("OK %d leaves" % len(keys))
