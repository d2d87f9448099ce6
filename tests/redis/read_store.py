"""Reads the store tests/redis/test_redis.cpp wrote with the real Python
tensordict (TensorDictStore.from_store) and checks every value.
Usage: read_store.py <unix socket> <td_id>"""
import sys

import torch
from tensordict.store import TensorDictStore

sock, td_id = sys.argv[1], sys.argv[2]
store = TensorDictStore.from_store(unix_socket_path=sock, td_id=td_id)
assert store.batch_size == torch.Size([6]), store.batch_size
assert store.device is None, store.device
keys = {k if isinstance(k, str) else ".".join(k) for k in store.keys(include_nested=True, leaves_only=True)}
assert keys == {"obs", "action", "done", "next.obs", "label", "labels"}, keys

order = [0, 1, 5, 3, 4, 5]  # row 2 was overwritten with row 5
obs = torch.arange(36, dtype=torch.float32).view(6, 2, 3)[order]
got = store.to_tensordict()
assert got["obs"].dtype == torch.float32 and torch.equal(got["obs"], obs), got["obs"]
assert torch.equal(got["next", "obs"], obs + 1000), got["next", "obs"]
assert got["action"].dtype == torch.int64 and got["action"].tolist() == order, got["action"]
assert got["done"].dtype == torch.bool
assert got["done"].tolist() == [i % 3 == 0 for i in order], got["done"]
assert store["label"] == "cat", store["label"]
assert store["labels"].tolist() == ["a", "b", "f", "d", "e", "f"], store["labels"]
# rows as Python reads them
assert torch.equal(store[torch.tensor([2, 0])]["obs"], obs[[2, 0]])
print("OK %d leaves" % len(keys))
