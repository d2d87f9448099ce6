"""Writes, with the real Python tensordict, a memmap directory whose values
tensordict-inspect --json once aborted on (tests/CMakeLists.txt, tool.*):
a uint64 leaf holding 2**64 - 1, and a complex32 leaf larger than --max-values
(summed, and LibTorch has no sum for complex32)."""
import sys

import torch
from tensordict import TensorDict

out = sys.argv[1]
td = TensorDict(
    {
        "big": torch.full((2,), 2**64 - 1, dtype=torch.uint64),
        "half_complex": torch.ones(100, dtype=torch.complex32),
    },
    batch_size=[],
)
td.memmap(out, existsok=True)
