"""The lazy-stack store against the real Python tensordict
(LazyStackedTensorDictStore), on the server tests/redis/test_redis_lazy_stack.cpp
started.

  lazy_stack_store.py read <unix socket> <td_id>
      reads the store the C++ test wrote (LazyStackRedis.PythonReadsWhatCppWrote)
      with LazyStackedTensorDictStore.from_store and checks every element;
  lazy_stack_store.py write <unix socket> <td_id>
      writes lazy_stack([a0, a1, a2], dim=1) with
      LazyStackedTensorDictStore.from_lazy_stack, for C++ to read.
"""
import sys

import torch
from tensordict import LazyStackedTensorDict, TensorDict
from tensordict.store import LazyStackedTensorDictStore

mode, sock, td_id = sys.argv[1], sys.argv[2], sys.argv[3]

if mode == "read":
    # C++: three agents, batch [4] each, obs [4, 3 + 2k] float32 = arange + 100 k,
    # reward [4] float32 = k, nested next.obs int64 [4, 2] = arange + 10 k; then
    # element 1's reward set to 7 and element 2 of new key "done" (uint8 [4]) to 1.
    store = LazyStackedTensorDictStore.from_store(unix_socket_path=sock, td_id=td_id)
    assert store.batch_size == torch.Size([3, 4]), store.batch_size
    assert store.device is None, store.device
    keys = {k if isinstance(k, str) else ".".join(k) for k in store.keys(include_nested=True, leaves_only=True)}
    assert keys == {"obs", "reward", "next.obs", "done"}, keys
    for a in range(3):
        f = 3 + 2 * a
        obs = store[a]["obs"]
        assert obs.dtype == torch.float32 and obs.shape == (4, f), (a, obs.shape)
        assert torch.equal(obs, torch.arange(4 * f, dtype=torch.float32).view(4, f) + 100 * a), (a, obs)
    reward = store["reward"]
    assert torch.equal(reward, torch.tensor([[0.0] * 4, [7.0] * 4, [2.0] * 4])), reward
    nxt = store["next", "obs"]
    assert nxt.dtype == torch.int64
    assert torch.equal(nxt, torch.stack([torch.arange(8).view(4, 2) + 10 * a for a in range(3)])), nxt
    done = store["done"]
    assert done.dtype == torch.uint8 and done.tolist() == [[0] * 4, [0] * 4, [1] * 4], done
    print("OK %d keys, %d elements" % (len(keys), store.batch_size[0]))
elif mode == "write":
    # a_k of batch [2]: "pos" float32 [2, 3] = arange(6) + 10 k (homogeneous),
    # "seq" int64 [2, k + 1] = arange(2 (k + 1)) - k (heterogeneous).
    members = [
        TensorDict(
            {
                "pos": torch.arange(6, dtype=torch.float32).view(2, 3) + 10 * a,
                "seq": torch.arange(2 * (a + 1), dtype=torch.int64).view(2, a + 1) - a,
            },
            batch_size=[2],
        )
        for a in range(3)
    ]
    LazyStackedTensorDictStore.from_lazy_stack(
        LazyStackedTensorDict(*members, stack_dim=1), unix_socket_path=sock, td_id=td_id
    )
    print("WROTE")
else:
    sys.exit("unknown mode " + mode)
