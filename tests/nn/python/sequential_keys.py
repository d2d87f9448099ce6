"""Python's TensorDictSequential on the cases of tests/nn/test_sequential.cpp.

Prints one JSON document: for each case, the modules (in_keys/out_keys, a
nested list for a nested sequential), the in_keys and out_keys Python
computes, and the result of select_subsequence for each query (the kept
modules, in the same layout, or "ValueError"). The C++ test builds the same
modules and compares.
"""

import json
import sys

from tensordict.nn import TensorDictModule as Mod
from tensordict.nn import TensorDictSequential as Seq


def key(k):
    return [k] if isinstance(k, str) else list(k)


def build(spec):
    if isinstance(spec, dict):
        return Seq(*[build(s) for s in spec["seq"]])
    return Mod(lambda *xs: xs, in_keys=[tuple(k) for k in spec[0]], out_keys=[tuple(k) for k in spec[1]])


def describe(module):
    if isinstance(module, Seq):
        return {"seq": [describe(m) for m in module.module]}
    return [[key(k) for k in module.in_keys], [key(k) for k in module.out_keys]]


def m(ins, outs):
    return [[key(k) for k in ins], [key(k) for k in outs]]


CASES = [
    # The example of Python's select_subsequence documentation.
    {
        "modules": [m(["a"], ["b"]), m(["b"], ["c"]), m(["c"], ["d"]), m(["a"], ["e"])],
        "queries": [
            {"in": ["a"]},
            {"in": ["b"]},
            {"out": ["c"]},
            {"out": ["e"]},
            {"in": ["b"], "out": ["d"]},
            {"in": ["x"]},
            {"out": ["zzz"]},
        ],
    },
    # A key read and rewritten, an ignored output, an input written later.
    {
        "modules": [m(["a"], ["b"]), m(["b", "c"], ["b"]), m(["b"], ["d", "_"]), m(["c"], ["a"]),
                    m(["a", "e"], ["f"])],
        "queries": [{"in": ["a", "c"]}, {"out": ["d"]}, {"out": ["f"]}, {"in": ["c", "e"]}],
    },
    # Nested keys and nested sequentials.
    {
        "modules": [
            {"seq": [m([("obs", "x")], ["hidden"]), m(["hidden"], [("next", "obs", "x")])]},
            m([("next", "obs", "x"), "action"], [("next", "value")]),
            {"seq": [m([("next", "value")], ["loss"]), m(["other"], ["log"])]},
        ],
        "queries": [
            {"out": ["loss"]},
            {"in": [("obs", "x"), "action"]},
            {"in": ["other"]},
            {"in": ["hidden", "action"], "out": [("next", "value")]},
            {"out": ["log"]},
        ],
    },
]


def main():
    out = []
    for case in CASES:
        seq = Seq(*[build(s) for s in case["modules"]])
        results = []
        for q in case["queries"]:
            ins = [tuple(key(k)) for k in q["in"]] if "in" in q else None
            outs = [tuple(key(k)) for k in q["out"]] if "out" in q else None
            try:
                sub = seq.select_subsequence(in_keys=ins, out_keys=outs)
                result = describe(sub)["seq"]
            except ValueError:
                result = "ValueError"
            results.append({
                "in": None if ins is None else [list(k) for k in ins],
                "out": None if outs is None else [list(k) for k in outs],
                "result": result,
            })
        out.append({
            "modules": case["modules"],
            "in_keys": [key(k) for k in seq.in_keys],
            "out_keys": [key(k) for k in seq.out_keys],
            "queries": results,
        })
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
