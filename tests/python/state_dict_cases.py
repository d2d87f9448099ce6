"""State dicts both ways (test_state_dict_interop.cpp), run by peer.py.

Python -> C++: torch.save of td.state_dict() in its layouts (flat, nested,
keep_vars with parameters) and of a module's state_dict(); each case holds
sd.pt and truth/. C++ -> Python: C++'s files are read with
torch.load(weights_only=True), the default today, and loaded into a tensordict
of the truth's structure (or into the module).
"""
import os

import torch
from tensordict import TensorDict

from memmap_cases import values
from truth import check_truth, write_truth, zeros_like_truth


def structures():
    f = lambda shape: values(torch.float32, shape)
    nested = TensorDict(a=f((3,)), n=TensorDict(b=f((3, 2)), m=TensorDict(
        c=values(torch.int64, (3, 1)), batch_size=[3]), batch_size=[3]), batch_size=[3])
    dtypes = TensorDict(batch_size=[2])
    for name in ["float16", "bfloat16", "float64", "complex64", "bool", "uint8", "int8", "int16",
                 "int32", "uint16", "uint32", "uint64"]:
        dtypes.set(name, values(getattr(torch, name), (2, 3)))
    non_tensor = TensorDict(a=f((2,)), n=TensorDict(b=f((2,)), batch_size=[2]), batch_size=[2])
    non_tensor.set_non_tensor("label", "cartpole")
    non_tensor.set_non_tensor(("n", "note"), "inner")
    return {"nested": nested, "dtypes": dtypes, "non_tensor": non_tensor}


def module():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))


def python_cases():
    cases = {}
    for name, td in structures().items():
        for layout, kwargs in [("flat", {}), ("nested", {"flatten": False})]:
            def write(case_dir, td=td, kwargs=kwargs):
                torch.save(td.state_dict(**kwargs), os.path.join(case_dir, "sd.pt"))
                write_truth(td, os.path.join(case_dir, "truth"))
            cases[f"{name}_{layout}"] = write

    def keep_vars(case_dir):
        td = TensorDict(w=torch.nn.Parameter(values(torch.float32, (2, 3))),
                        n=TensorDict(b=torch.nn.Parameter(values(torch.float64, (2,))),
                                     batch_size=[2]), batch_size=[2])
        torch.save(td.state_dict(keep_vars=True), os.path.join(case_dir, "sd.pt"))
        write_truth(td.detach(), os.path.join(case_dir, "truth"))

    def module_state_dict(case_dir):
        net = module()
        torch.save(net.state_dict(), os.path.join(case_dir, "sd.pt"))
        write_truth(TensorDict.from_module(net).detach(), os.path.join(case_dir, "truth"))

    cases["keep_vars_parameters"] = keep_vars
    cases["module_sequential"] = module_state_dict
    return cases


def check_cpp_case(name, case_dir):
    loaded = torch.load(os.path.join(case_dir, "sd.pt"), weights_only=True)
    if name.startswith("module"):
        net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
        net.load_state_dict(loaded)
        check_truth(TensorDict.from_module(net).detach(), os.path.join(case_dir, "truth"))
        return
    target = zeros_like_truth(os.path.join(case_dir, "truth"))
    target.load_state_dict(loaded)
    check_truth(target, os.path.join(case_dir, "truth"))
