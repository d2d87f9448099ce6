"""What a tensordict holds, written beside it in a format that is not under test
(raw bytes and a JSON list), so that each side checks the other's format
against values it did not decode with the library. tests/python/peer.h reads
and writes the same layout:

  truth/manifest.json  {"batch_size": [...],
                        "entries": [{"key": [...], "kind": "tensor",
                                     "dtype": "torch.float32", "shape": [...],
                                     "file": "3.bin"},
                                    {"key": [...], "kind": "tensordict",
                                     "batch_size": [...]},
                                    {"key": [...], "kind": "non_tensor",
                                     "value": <json>},
                                    {"key": [...], "kind": "non_tensor_stack",
                                     "value": <nested list>}]}
  truth/<n>.bin        a tensor's bytes, contiguous, in native byte order
"""
import json
import os

import torch
from tensordict import NonTensorData, NonTensorStack, is_tensor_collection, is_tensorclass


def _bytes(t):
    t = t.detach().cpu().contiguous().clone()
    return bytes(t.untyped_storage())


def _entries(td, prefix=()):
    # Tensors, nested levels and non-tensors, in the tensordict's own order; a
    # tensorclass as the tensordict it wraps (its non-tensor fields included).
    if is_tensorclass(td):
        td = td._tensordict
    for key in td.keys():
        value = td._get_str(key, None)
        path = prefix + (key,)
        if isinstance(value, NonTensorStack):
            yield path, "non_tensor_stack", value.tolist()
        elif isinstance(value, NonTensorData):
            yield path, "non_tensor", value.data
        elif is_tensor_collection(value):
            yield path, "tensordict", value
            yield from _entries(value, path)
        else:
            yield path, "tensor", value


def write_truth(td, directory):
    os.makedirs(directory, exist_ok=True)
    entries = []
    for n, (path, kind, value) in enumerate(_entries(td)):
        entry = {"key": list(path), "kind": kind}
        if kind == "tensor":
            entry.update(dtype=str(value.dtype), shape=list(value.shape), file=f"{n}.bin")
            with open(os.path.join(directory, entry["file"]), "wb") as f:
                f.write(_bytes(value))
        elif kind == "tensordict":
            entry["batch_size"] = list(value.batch_size)
        else:
            entry["value"] = value
        entries.append(entry)
    with open(os.path.join(directory, "manifest.json"), "w") as f:
        json.dump({"batch_size": list(td.batch_size), "entries": entries}, f)


def check_truth(td, directory):
    """Raises AssertionError naming the first difference between td and the truth."""
    with open(os.path.join(directory, "manifest.json")) as f:
        truth = json.load(f)
    if list(td.batch_size) != truth["batch_size"]:
        raise AssertionError(f"batch_size {list(td.batch_size)}, expected {truth['batch_size']}")
    got = {path: (kind, value) for path, kind, value in _entries(td)}
    want = {tuple(e["key"]): e for e in truth["entries"]}
    if set(got) != set(want):
        raise AssertionError(f"keys {sorted(got)}, expected {sorted(want)}")
    for path, e in want.items():
        kind, value = got[path]
        if kind != e["kind"]:
            raise AssertionError(f"{path}: a {kind}, expected a {e['kind']}")
        if kind == "tensor":
            if str(value.dtype) != e["dtype"] or list(value.shape) != e["shape"]:
                raise AssertionError(f"{path}: {value.dtype} {list(value.shape)}, expected "
                                     f"{e['dtype']} {e['shape']}")
            if value.device.type != "cpu":
                raise AssertionError(f"{path}: on {value.device}, expected cpu")
            with open(os.path.join(directory, e["file"]), "rb") as f:
                if _bytes(value) != f.read():
                    raise AssertionError(f"{path}: values {value}, differ from the truth")
        elif kind == "tensordict":
            if list(value.batch_size) != e["batch_size"]:
                raise AssertionError(f"{path}: batch_size {list(value.batch_size)}, expected "
                                     f"{e['batch_size']}")
        elif value != e["value"]:
            raise AssertionError(f"{path}: {value!r}, expected {e['value']!r}")


def zeros_like_truth(directory):
    """A TensorDict of the truth's structure holding zeros (non-tensors as
    they are): the target a state dict is loaded into."""
    with open(os.path.join(directory, "manifest.json")) as f:
        truth = json.load(f)
    from tensordict import TensorDict

    out = TensorDict(batch_size=truth["batch_size"])
    for e in truth["entries"]:
        key = tuple(e["key"])
        if e["kind"] == "tensor":
            out.set(key, torch.zeros(e["shape"], dtype=getattr(torch, e["dtype"][len("torch."):])))
        elif e["kind"] == "tensordict":
            out.set(key, TensorDict(batch_size=e["batch_size"]))
        elif e["kind"] == "non_tensor":
            out.set_non_tensor(key, e["value"])
        else:
            out.set(key, NonTensorStack.from_list(e["value"]))
    return out
