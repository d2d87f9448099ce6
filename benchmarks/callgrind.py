#!/usr/bin/env python3
"""Instruction counts per iteration of per-call benchmark rows, the tensordict variant next to
its floor, under valgrind's callgrind: a ratio that machine load does not move.

For each row ``BM_<op>`` (with its args) and each variant (default: tensordict and floor), the
binary runs twice under ``valgrind --tool=callgrind`` with exactly N1 and then N2 iterations
(``TENSORDICT_BENCH_ITERATIONS``, which bench_main.h reads), only that benchmark selected.
Everything but the timed loop (starting LibTorch, building the data, Google Benchmark's own
work) is the same in both runs, so

    instructions per iteration = (Ir(N2) - Ir(N1)) / (N2 - N1)

and the ratio is the tensordict's count over the floor's.

Usage:
    python3 benchmarks/callgrind.py build/benchmarks/bench_ops BM_index_int BM_stack64
    python3 benchmarks/callgrind.py build/benchmarks/bench_parity 'BM_update_leaves/*/100' \\
        --iterations 100 600 --json /tmp/callgrind.json

A row is ``BM_<op>`` or ``BM_<op>/*/<args>`` (the ``*`` stands for the variant). Standard
library only; valgrind must be installed. Each run takes tens of seconds (LibTorch starts
under valgrind): keep the iteration counts small (defaults 200 and 1200).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("binary", type=Path, help="a benchmark executable")
    p.add_argument("rows", nargs="+", help="BM_<op> or BM_<op>/*/<args>")
    p.add_argument("--variants", nargs="+", default=["tensordict", "floor"],
                   help="variants to count (default: tensordict floor; the ratio is the first "
                   "over the last)")
    p.add_argument("--iterations", nargs=2, type=int, default=[200, 1200], metavar=("N1", "N2"))
    p.add_argument("--json", type=Path, help="also write the counts here")
    p.add_argument("--valgrind", default="valgrind")
    args = p.parse_args(argv)
    n1, n2 = args.iterations
    if not 0 < n1 < n2:
        p.error("--iterations needs 0 < N1 < N2")
    return args


def benchmark_name(row: str, variant: str) -> str:
    parts = row.split("/")
    if len(parts) == 1:
        return f"{row}/{variant}"
    if parts[1] != "*":
        sys.exit(f"callgrind.py: write a row as BM_<op> or BM_<op>/*/<args>, not {row!r}")
    return "/".join([parts[0], variant, *parts[2:]])


def instructions(args, name: str, iterations: int) -> int:
    """Total instructions (Ir) of one run of the single benchmark `name`."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        # Anchored, so that BM_index_int/tensordict does not select .../tensordict_view.
        pattern = "^" + re.escape(name) + "(/|$)"
        cmd = [args.valgrind, "--tool=callgrind", f"--callgrind-out-file={out}",
               str(args.binary), f"--benchmark_filter={pattern}"]
        env = dict(os.environ, TENSORDICT_BENCH_ITERATIONS=str(iterations))
        print("callgrind.py: " + " ".join(shlex.quote(c) for c in cmd)
              + f"  (TENSORDICT_BENCH_ITERATIONS={iterations})", file=sys.stderr)
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"callgrind.py: {name} exited with status {proc.returncode}:\n"
                     + proc.stderr[-2000:])
        if f"{name}/iterations:{iterations}" not in proc.stdout and name not in proc.stdout:
            sys.exit(f"callgrind.py: the filter selected no benchmark named {name}")
        for line in out.read_text().splitlines():
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
        sys.exit(f"callgrind.py: no instruction total in the callgrind output of {name}")


def main(argv=None) -> int:
    args = parse_args(argv if argv is not None else sys.argv[1:])
    n1, n2 = args.iterations
    results = []
    for row in args.rows:
        counts = {}
        for variant in args.variants:
            name = benchmark_name(row, variant)
            ir1, ir2 = instructions(args, name, n1), instructions(args, name, n2)
            counts[variant] = {"name": name, "ir_n1": ir1, "ir_n2": ir2,
                               "per_iteration": (ir2 - ir1) / (n2 - n1)}
        first, last = counts[args.variants[0]], counts[args.variants[-1]]
        ratio = first["per_iteration"] / last["per_iteration"] if last["per_iteration"] else None
        results.append({"row": row, "iterations": [n1, n2], "variants": counts, "ratio": ratio})
        cells = "  ".join(f"{v} {c['per_iteration']:,.0f}" for v, c in counts.items())
        ratio_s = f"{ratio:.2f}x" if ratio is not None else "n/a"
        print(f"{row}: instructions per iteration  {cells}  ratio {ratio_s}", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"binary": str(args.binary), "rows": results},
                                        indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
