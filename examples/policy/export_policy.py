#!/usr/bin/env python
"""Export a small policy for the C++ actor examples (docs/nn_export.md).

The policy reads a tensordict-like dict {"observation": float[B, 4]} and
returns {"action": int64[B], "policy": {"logits": float[B, 2]}}. Its weights
are seeded, and trained a few steps to prefer the action whose sign matches the
sum of the observation, so the C++ side can check it acts sensibly.

Writes into OUT_DIR:
  policy_scripted.pt  TorchScript. TorchScript dicts have one value type, so the
                      nested output key ("policy", "logits") is the flat name
                      "policy.logits"; load it with ScriptTensorDictModule's
                      dict convention and KeyLayout::Flattened(".") to get the
                      nested key back.
  policy.pt2          AOTInductor package (CPU), dynamic batch; the nested
                      output stays a nested dict in the package's out_spec.
                      Its metadata "tensordict.inputs" (JSON) gives each flat
                      input's dtype, shape and device, which
                      AOTITensorDictModule checks before running it.
  policy_example.pt   torch.save of {"observation", "action", "policy.logits"}
                      for a fixed batch: the reference the C++ side compares to.

Usage: python examples/policy/export_policy.py OUT_DIR [--no-aoti]
"""
import argparse
import json
import os
from typing import Dict

import torch
from torch import nn


class PolicyNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 32), nn.Tanh(), nn.Linear(32, 2))

    def logits(self, observation: torch.Tensor) -> torch.Tensor:
        return self.net(observation)


class ScriptedPolicy(nn.Module):
    """Dict[str, Tensor] -> Dict[str, Tensor] with flat names (TorchScript)."""

    def __init__(self, policy: PolicyNet):
        super().__init__()
        self.policy = policy

    def forward(self, inputs: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        logits = self.policy.logits(inputs["observation"])
        return {"action": logits.argmax(-1), "policy.logits": logits}


class ExportedPolicy(nn.Module):
    """dict -> nested dict (torch.export / AOTInductor keep the nesting)."""

    def __init__(self, policy: PolicyNet):
        super().__init__()
        self.policy = policy

    def forward(self, inputs):
        logits = self.policy.logits(inputs["observation"])
        return {"action": logits.argmax(-1), "policy": {"logits": logits}}


def input_metadata(program):
    """dtype, shape (None for a dynamic dim, with its range) and device of each
    flat input, in the package's flattening order: written into the package's
    metadata so that C++ checks inputs before the loader runs them."""
    leaves = []
    ranges = program.range_constraints
    for spec in program.graph_signature.input_specs:
        if spec.kind.name != "USER_INPUT":
            continue
        node = next(n for n in program.graph.nodes if n.name == spec.arg.name)
        val = node.meta["val"]
        shape = []
        for size in val.shape:
            if isinstance(size, int):
                shape.append(size)
            else:
                expr = size.node.expr
                rng = ranges.get(expr)
                lower = int(rng.lower) if rng is not None else 0
                upper = rng.upper if rng is not None else None
                upper = int(upper) if upper is not None and upper.is_finite else None
                shape.append({"min": lower, "max": upper})
        leaves.append({"dtype": str(val.dtype).replace("torch.", ""), "shape": shape,
                       "device": val.device.type})
    return json.dumps(leaves)


def package(program, path):
    torch._inductor.aoti_compile_and_package(
        program, package_path=path,
        inductor_configs={"aot_inductor.metadata": {"tensordict.inputs": input_metadata(program)}})


def register_tensordict_serialization():
    """Lets torch.export packages take and return TensorDicts.

    tensordict (0.15.3) registers TensorDict as a pytree node without a
    serialized type name, so packaging a program whose inputs hold a TensorDict
    fails ("No registered serialization name for <class
    'tensordict._td.TensorDict'>"). This registers it again, with the same
    flatten and unflatten functions and a JSON context {"keys": [...],
    "batch_dims": n}: the package's spec then has "tensordict._td.TensorDict"
    nodes whose keys AOTITensorDictModule reads as it reads a dict's.
    """
    from tensordict import TensorDict
    from tensordict import _pytree as td_pytree
    from torch.utils import _pytree as pytree

    def to_dumpable(context):
        if "batch_dims" in context:
            batch_dims = context["batch_dims"]
        else:
            batch_dims = context["batch_size"].batch_dims
        return json.dumps({"keys": list(context["keys"]), "batch_dims": batch_dims})

    def from_dumpable(text):
        loaded = json.loads(text)
        return {"keys": loaded["keys"], "names": None, "device": None,
                "constructor": td_pytree._constructor(TensorDict), "non_tensor_data": (),
                "cls": TensorDict, "batch_dims": loaded["batch_dims"]}

    name = "tensordict._td.TensorDict"
    known = pytree.SUPPORTED_SERIALIZED_TYPES.get(TensorDict)
    if known is not None and known.serialized_type_name == name:
        return
    pytree._deregister_pytree_node(TensorDict)
    pytree.register_pytree_node(
        TensorDict, td_pytree._tensordict_flatten, td_pytree._tensordict_unflatten,
        serialized_type_name=name,
        to_dumpable_context=to_dumpable, from_dumpable_context=from_dumpable,
        flatten_with_keys_fn=td_pytree._td_flatten_with_keys)


def trained_policy(steps: int = 200) -> PolicyNet:
    torch.manual_seed(0)
    policy = PolicyNet()
    optim = torch.optim.Adam(policy.parameters(), lr=1e-2)
    for _ in range(steps):
        obs = torch.randn(64, 4)
        target = (obs.sum(-1) > 0).long()
        loss = nn.functional.cross_entropy(policy.logits(obs), target)
        optim.zero_grad()
        loss.backward()
        optim.step()
    return policy.eval()


def export(out_dir: str, aoti: bool = True) -> None:
    os.makedirs(out_dir, exist_ok=True)
    policy = trained_policy()
    torch.manual_seed(1)
    example = {"observation": torch.randn(8, 4)}

    scripted = torch.jit.script(ScriptedPolicy(policy))
    scripted.save(os.path.join(out_dir, "policy_scripted.pt"))

    with torch.no_grad():
        ref = scripted(example)
    torch.save({"observation": example["observation"], "action": ref["action"],
                "policy.logits": ref["policy.logits"]},
               os.path.join(out_dir, "policy_example.pt"))

    if aoti:
        batch = torch.export.Dim("batch", min=1, max=4096)
        program = torch.export.export(
            ExportedPolicy(policy), (example,),
            dynamic_shapes=({"observation": {0: batch}},))
        package(program, os.path.join(out_dir, "policy.pt2"))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--no-aoti", action="store_true", help="TorchScript only (fast)")
    args = parser.parse_args()
    export(args.out_dir, aoti=not args.no_aoti)
