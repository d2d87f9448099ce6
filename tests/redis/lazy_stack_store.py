"""The lazy-stack layout (formats.md §4.8) from the spec alone, with redis-py.

  lazy_stack_store.py read <unix socket> <td_id>
      reads the store the C++ test wrote (tests/redis/test_redis_lazy_stack.cpp,
      LazyStackRedis.PythonReadsWhatCppWrote) and checks every element's values;
  lazy_stack_store.py write <unix socket> <td_id>
      writes a stack along dim 1 the way Python's LazyStackedTensorDictStore
      lays it out (a homogeneous and a heterogeneous key), for C++ to read.
"""
import json
import struct
import sys

import redis

FORMATS = {"torch.float32": "f", "torch.int64": "q", "torch.uint8": "B"}

mode, sock, td_id = sys.argv[1], sys.argv[2], sys.argv[3]
r = redis.Redis(unix_socket_path=sock)
k = lambda suffix: f"tensordict:{{{td_id}}}:{suffix}"


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def elements(path, count):
    """Every element of a leaf as (shape, flat values), per the spec."""
    meta = {a.decode(): b.decode() for a, b in r.hgetall(k("m:" + path)).items()}
    fmt = FORMATS[meta["dtype"]]
    item = struct.calcsize(fmt)
    data = r.get(k("d:" + path)) or b""
    shape = json.loads(meta["shape"])
    assert shape[0] == count, (path, shape)
    if meta["homogeneous"] == "1":
        shapes = [shape[1:]] * count
        offsets = [i * numel(shape[1:]) * item for i in range(count + 1)]
        assert r.get(k("d:" + path + ":idx")) is None
    else:
        shapes = json.loads(meta["shapes"])
        assert shapes[0] == shape[1:], (shapes, shape)
        table = r.get(k("d:" + path + ":idx"))
        offsets = list(struct.unpack("<%dq" % (count + 1), table))
    assert offsets[0] == 0 and len(data) == offsets[-1], (path, offsets, len(data))
    out = []
    for i in range(count):
        n = numel(shapes[i])
        assert offsets[i + 1] - offsets[i] == n * item
        out.append((shapes[i], list(struct.unpack("<%d%s" % (n, fmt), data[offsets[i]:offsets[i + 1]]))))
    return meta["homogeneous"], out


if mode == "read":
    # C++: three agents, batch [4] each, obs [4, 3 + 2k] float32 = arange + 100 k,
    # reward [4] float32 = k, nested next.obs int64 [4, 2] = arange + 10 k; then
    # element 1's reward set to 7 and element 2 of new key "done" (uint8 [4]) to 1.
    assert r.get(k("__type__")) == b"lazy_stack"
    count = int(r.get(k("__count__")))
    assert count == 3 and int(r.get(k("__stack_dim__"))) == 0
    assert json.loads(r.get(k("__inner_batch_size__"))) == [4]
    assert r.get(k("__device__")) == b""
    assert r.get(k("__batch_size__")) is None
    keys = {m.decode() for m in r.smembers(k("__keys__"))}
    assert keys == {"obs", "reward", "next.obs", "done"}, keys
    hom, obs = elements("obs", count)
    assert hom == "0"
    for a, (shape, values) in enumerate(obs):
        f = 3 + 2 * a
        assert shape == [4, f], shape
        assert values == [float(v + 100 * a) for v in range(4 * f)], (a, values)
    hom, reward = elements("reward", count)
    assert hom == "1" and [v for _, v in reward] == [[0.0] * 4, [7.0] * 4, [2.0] * 4], reward
    hom, nxt = elements("next.obs", count)
    assert hom == "1" and [v for _, v in nxt] == [[v + 10 * a for v in range(8)] for a in range(3)]
    hom, done = elements("done", count)
    assert hom == "1" and [v for _, v in done] == [[0] * 4, [0] * 4, [1] * 4], done
    print("OK %d keys, %d elements" % (len(keys), count))
elif mode == "write":
    # Python's from_lazy_stack of lazy_stack([a0, a1, a2], dim=1), a_k of batch
    # [2]: "pos" float32 [2, 3] = arange(6) + 10 k (homogeneous), "seq" int64
    # [2, k + 1] = arange(2 (k + 1)) - k (heterogeneous).
    pipe = r.pipeline()
    pipe.set(k("__type__"), "lazy_stack")
    pipe.set(k("__count__"), "3")
    pipe.set(k("__stack_dim__"), "1")
    pipe.set(k("__inner_batch_size__"), json.dumps([2]))
    pipe.set(k("__device__"), "")
    pipe.execute()
    pos = b"".join(struct.pack("<6f", *[v + 10 * a for v in range(6)]) for a in range(3))
    pipe = r.pipeline()
    pipe.hset(k("m:pos"), mapping={"shape": json.dumps([3, 2, 3]), "dtype": "torch.float32",
                                   "homogeneous": "1"})
    pipe.sadd(k("__keys__"), "pos")
    pipe.execute()
    r.setrange(k("d:pos"), 0, pos)
    shapes, parts, offsets = [], [], [0]
    for a in range(3):
        n = 2 * (a + 1)
        parts.append(struct.pack("<%dq" % n, *[v - a for v in range(n)]))
        shapes.append([2, a + 1])
        offsets.append(offsets[-1] + len(parts[-1]))
    r.setrange(k("d:seq"), 0, b"".join(parts))
    pipe = r.pipeline()
    pipe.set(k("d:seq:idx"), struct.pack("<%dq" % len(offsets), *offsets))
    pipe.hset(k("m:seq"), mapping={"shape": json.dumps([3] + shapes[0]), "dtype": "torch.int64",
                                   "homogeneous": "0", "shapes": json.dumps(shapes)})
    pipe.sadd(k("__keys__"), "seq")
    pipe.execute()
    print("WROTE")
else:
    sys.exit("unknown mode " + mode)
