#!/usr/bin/env python
"""Write the TorchScript models, AOTInductor packages and reference outputs that
the C++ tests (tests/nn/test_script_module.cpp, test_ivalue.cpp,
test_aoti_module.cpp) and benchmarks/bench_nn_export.cpp load.

Run by CTest (fixture nn_models) into the build tree, so the tests check
artifacts the real Python torch wrote in the same run. Each reference file
NAME_ref.pt is a torch.save of a flat dict {str: tensor} of inputs and outputs
Python computed; the C++ side reads it with torch::pickle_load.

Usage: python make_models.py OUT_DIR [--no-aoti]
"""
import argparse
import os
import sys
from typing import Dict, Tuple

import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "examples", "policy"))
import export_policy  # noqa: E402


class TwoHeads(nn.Module):
    """Positional: (x[B, 3], y[B]) -> (x @ W.T + b) * scale, x.sum(-1) + y.
    Doubles its first output in training mode; raises on a non-2-D x."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(3, 4)
        self.register_buffer("scale", torch.tensor([1.0, 2.0, 3.0, 4.0]))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        if x.dim() != 2:
            raise ValueError("TwoHeads expects a 2-D x")
        head = self.linear(x) * self.scale
        if self.training:
            head = head * 2
        return head, x.sum(-1) + y


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 2))

    def forward(self, x):
        return self.net(x)


class FlatDict(nn.Module):
    """Dict[str, Tensor] with flattened names: obs.pos, obs.vel -> out.sum, out.scaled."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.tensor([0.5, -1.0]))

    def forward(self, d: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        total = d["obs.pos"] + d["obs.vel"]
        return {"out.sum": total, "out.scaled": total * self.weight, "count": d["count"] + 1}


class NestedDict(nn.Module):
    """Dict[str, Dict[str, Tensor]]: {obs: {pos, vel}} -> {out: {sum, diff}}."""

    def forward(self, d: Dict[str, Dict[str, torch.Tensor]]) -> Dict[str, Dict[str, torch.Tensor]]:
        obs = d["obs"]
        return {"out": {"sum": obs["pos"] + obs["vel"], "diff": obs["pos"] - obs["vel"]}}


class OrderProbe(nn.Module):
    """A dict whose insertion order is not sorted, nested, mixed dtypes:
    {"zeta": f32[B, 2], "alpha": {"mid": i64[B], "beta": f32[B, 2]}}
    -> {"y": {"b": f32[B, 2], "a": f32[B]}, "index": i64[B]}.
    Every input is used differently, so a wrong flattening order shows."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(2, 2)

    def forward(self, d):
        zeta, alpha = d["zeta"], d["alpha"]
        b = self.linear(zeta) - 2 * alpha["beta"]
        return {"y": {"b": b, "a": b.sum(-1) * alpha["mid"].to(b.dtype)},
                "index": alpha["mid"] * 10 + 1}


class TensorDictIO(nn.Module):
    """TensorDict in, TensorDict out (packaged after
    export_policy.register_tensordict_serialization()):
    td["obs"] f32[3, 4], td["extra", "bias"] f32[3, 2]
    -> TensorDict {"out": {"logits": ...}, "mean": ...}."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 2)

    def forward(self, td):
        from tensordict import TensorDict
        logits = self.linear(td["obs"]) + td["extra", "bias"]
        return TensorDict({"out": {"logits": logits}, "mean": logits.mean(-1)},
                          batch_size=td.batch_size)


class Positional(nn.Module):
    """(x f32[4, 3] static, k i64[4]) -> (x * k[:, None], x.sum())"""

    def forward(self, x, k):
        return x * k[:, None].to(x.dtype), x.sum()


def save_ref(out_dir, name, tensors):
    torch.save({k: v.detach().contiguous() for k, v in tensors.items()},
               os.path.join(out_dir, name + "_ref.pt"))


def make_script_models(out_dir):
    torch.manual_seed(0)
    two = TwoHeads()
    scripted = torch.jit.script(two)
    scripted.save(os.path.join(out_dir, "two_heads_scripted.pt"))
    x, y = torch.randn(5, 3), torch.randn(5)
    with torch.no_grad():
        scripted.eval()
        eval0, eval1 = scripted(x, y)
        scripted.train()
        train0, _ = scripted(x, y)
        # to(float64) as the C++ test does, then eval
        double = torch.jit.script(two).double().eval()
        d0, _ = double(x.double(), y.double())
    save_ref(out_dir, "two_heads", {"x": x, "y": y, "eval0": eval0, "eval1": eval1,
                                    "train0": train0, "double0": d0,
                                    "linear.weight": two.linear.weight, "scale": two.scale})

    mlp = Mlp().eval()
    traced = torch.jit.trace(mlp, torch.randn(2, 3))
    traced.save(os.path.join(out_dir, "mlp_traced.pt"))
    x = torch.randn(6, 3)
    with torch.no_grad():
        save_ref(out_dir, "mlp", {"x": x, "out": traced(x)})

    flat = torch.jit.script(FlatDict())
    flat.save(os.path.join(out_dir, "flat_dict_scripted.pt"))
    inputs = {"obs.pos": torch.randn(4, 2), "obs.vel": torch.randn(4, 2),
              "count": torch.arange(4)}
    with torch.no_grad():
        out = flat(inputs)
    save_ref(out_dir, "flat_dict", {**inputs, **{"=" + k: v for k, v in out.items()}})

    nested = torch.jit.script(NestedDict())
    nested.save(os.path.join(out_dir, "nested_dict_scripted.pt"))
    pos, vel = torch.randn(4, 2), torch.randn(4, 2)
    out = nested({"obs": {"pos": pos, "vel": vel}})
    save_ref(out_dir, "nested_dict", {"pos": pos, "vel": vel, "sum": out["out"]["sum"],
                                      "diff": out["out"]["diff"]})


def make_ivalue_sample(out_dir):
    torch.manual_seed(2)
    sample = {
        "a": torch.randn(3, 2),
        "nested": {"b": torch.arange(3), "deeper": {"c": torch.ones(3, 1, dtype=torch.float64)}},
        "pair": (torch.zeros(3), torch.ones(3, 4)),
        "seq": [torch.full((3,), 7.0), torch.full((3, 2), 8.0)],
        "name": "cartpole",
        "steps": 12,
        "gamma": 0.99,
        "done": True,
    }
    torch.save(sample, os.path.join(out_dir, "ivalue_sample.pt"))


def make_aoti_packages(out_dir):
    torch.manual_seed(3)
    probe = OrderProbe().eval()
    inputs = {"zeta": torch.randn(6, 2),
              "alpha": {"mid": torch.arange(6), "beta": torch.randn(6, 2)}}
    batch = torch.export.Dim("batch", min=1, max=1024)
    program = torch.export.export(
        probe, (inputs,),
        dynamic_shapes=({"zeta": {0: batch}, "alpha": {"mid": {0: batch}, "beta": {0: batch}}},))
    export_policy.package(program, os.path.join(out_dir, "order_probe.pt2"))
    with torch.no_grad():
        out = probe(inputs)
    save_ref(out_dir, "order_probe", {"zeta": inputs["zeta"], "alpha.mid": inputs["alpha"]["mid"],
                                      "alpha.beta": inputs["alpha"]["beta"],
                                      "y.b": out["y"]["b"], "y.a": out["y"]["a"],
                                      "index": out["index"]})

    from tensordict import TensorDict
    export_policy.register_tensordict_serialization()
    module = TensorDictIO().eval()
    data = TensorDict({"obs": torch.randn(3, 4), "extra": {"bias": torch.randn(3, 2)}},
                      batch_size=[3])
    program = torch.export.export(module, (data,))
    export_policy.package(program, os.path.join(out_dir, "tensordict_io.pt2"))
    with torch.no_grad():
        out = module(data)
    save_ref(out_dir, "tensordict_io", {"obs": data["obs"], "extra.bias": data["extra", "bias"],
                                        "out.logits": out["out", "logits"], "mean": out["mean"]})

    positional = Positional().eval()
    x, k = torch.randn(4, 3), torch.arange(4)
    program = torch.export.export(positional, (x, k))
    export_policy.package(program, os.path.join(out_dir, "positional.pt2"))
    out0, out1 = positional(x, k)
    save_ref(out_dir, "positional", {"x": x, "k": k, "out0": out0, "out1": out1})


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--no-aoti", action="store_true")
    args = parser.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    make_script_models(args.out_dir)
    make_ivalue_sample(args.out_dir)
    export_policy.export(args.out_dir, aoti=not args.no_aoti)
    if not args.no_aoti:
        make_aoti_packages(args.out_dir)
    with open(os.path.join(args.out_dir, "versions.txt"), "w") as f:
        f.write(f"torch {torch.__version__}\n")


if __name__ == "__main__":
    main()
