"""Consolidated tensordicts both ways (test_consolidated_interop.cpp), run by
peer.py. Each structure is exchanged twice: as the file of
consolidate(filename=...) ("<name>_file": data.bin) and as the buffer and
metadata of consolidate() ("<name>_buffer": storage.bin holds the buffer's
bytes, metadata.json the metadata as JSON), each with its truth/ (truth.py).
"""
import json
import os

import torch
from tensordict import NonTensorStack, TensorDict
from tensordict._reductions import _rebuild_tensordict_files_consolidated

from memmap_cases import values
from truth import check_truth, write_truth


def structures():
    f = lambda shape: values(torch.float32, shape)
    cases = {}
    dtypes = TensorDict(batch_size=[3])
    for name in ["float16", "bfloat16", "float64", "complex64", "bool", "uint8", "int8", "int16",
                 "int32", "int64", "uint16", "uint32", "uint64"]:
        dtypes.set(name, values(getattr(torch, name), (3, 2)))
    cases["dtypes"] = dtypes
    cases["nested"] = TensorDict(
        a=f((4,)), n=TensorDict(b=f((4, 3)), m=TensorDict(c=values(torch.int64, (4, 2, 2)),
                                                          batch_size=[4, 2]), batch_size=[4]),
        batch_size=[4])
    non_tensor = TensorDict(a=f((4,)), n=TensorDict(b=f((4,)), batch_size=[4]), batch_size=[4])
    non_tensor.set_non_tensor("label", "cartpole")
    non_tensor.set_non_tensor(("n", "config"), {"lr": 0.5, "layers": [2, 3]})
    non_tensor.set("tasks", NonTensorStack("lift", "push", "pull", "lift"))
    cases["non_tensor"] = non_tensor
    cases["batch_2d"] = TensorDict(a=f((2, 3, 5)), b=values(torch.bool, (2, 3)), batch_size=[2, 3])
    cases["empty_level"] = TensorDict(a=f((2,)), e=TensorDict({}, batch_size=[2]), batch_size=[2])
    cases["batch_scalar"] = TensorDict(a=f(()), b=values(torch.int32, (5,)), batch_size=[])
    return cases


def _metadata_json(metadata):
    return json.dumps(metadata)


def python_cases():
    cases = {}
    for name, td in structures().items():
        def write_file(case_dir, td=td):
            td.consolidate(filename=os.path.join(case_dir, "data.bin"))
            write_truth(td, os.path.join(case_dir, "truth"))

        def write_buffer(case_dir, td=td):
            c = td.consolidate()
            with open(os.path.join(case_dir, "storage.bin"), "wb") as f:
                f.write(bytes(c._consolidated["storage"].untyped_storage()))
            with open(os.path.join(case_dir, "metadata.json"), "w") as f:
                f.write(_metadata_json(c._consolidated["metadata"]))
            write_truth(td, os.path.join(case_dir, "truth"))

        cases[f"{name}_file"] = write_file
        cases[f"{name}_buffer"] = write_buffer
    return cases


def check_cpp_case(name, case_dir):
    if name.endswith("_file"):
        td = TensorDict.from_consolidated(os.path.join(case_dir, "data.bin"))
    else:
        with open(os.path.join(case_dir, "storage.bin"), "rb") as f:
            storage = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8)
        with open(os.path.join(case_dir, "metadata.json")) as f:
            metadata = json.load(f)
        td = _rebuild_tensordict_files_consolidated(metadata, storage)
    check_truth(td, os.path.join(case_dir, "truth"))
