#!/usr/bin/env python3
"""Checks that every peer row pairs with a C++ row, and that run.py's "vs <peer>" column
is the peer's time over the tensordict's (CTest benchmarks.peer_names).

    check_peers.py --binary ops=build/benchmarks/bench_ops ... \\
        --peer "PYTHON benchmarks/peers/tensordict_peer.py" [--peer ...]

For each binary (suite=path): the names it registers (--benchmark_list_tests) against the
rows each peer lists for that suite (--list --suite): a peer row BM_<op>/<peer>[/<args>]
without a C++ row BM_<op>/<variant>/<args> that is neither the floor nor a peer is an error
(it would never be paired). Then one round of run.py's pairing over those names, with
random times, must give vs_<peer> = peer time / tensordict time for every pair.
"""

from __future__ import annotations

import argparse
import random
import shlex
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import run  # noqa: E402  benchmarks/run.py


def cpp_names(binary: str) -> list[str]:
    out = subprocess.run([binary, "--benchmark_list_tests=true"], capture_output=True,
                         text=True, check=True).stdout
    return [line.strip() for line in out.splitlines() if line.startswith("BM_")]


def peer_names(command: str) -> dict[str, list[str]]:
    """suite -> the peer's row names (one --list of every suite)."""
    out = subprocess.run(shlex.split(command) + ["--list"], capture_output=True, text=True,
                         check=True).stdout
    names: dict[str, list[str]] = {}
    for line in out.splitlines():
        if "\t" in line:
            suite, name = line.split("\t", 1)
            names.setdefault(suite, []).append(name)
    return names


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--binary", action="append", default=[], metavar="SUITE=PATH")
    p.add_argument("--peer", action="append", default=[], metavar="COMMAND")
    args = p.parse_args(argv)
    errors, pairs = [], 0
    rng = random.Random()
    listed = [peer_names(command) for command in args.peer]
    for spec in args.binary:
        suite, binary = spec.split("=", 1)
        cpp = cpp_names(binary)
        cpp_keys = set()
        for name in cpp:
            op, variant, op_args = run.split_name(name)
            if variant != run.FLOOR and not run.is_peer(variant):
                cpp_keys.add((op, op_args))
        peers = [n for names in listed for n in names.get(suite, [])]
        for name in peers:
            op, variant, op_args = run.split_name(name)
            if not run.is_peer(variant):
                errors.append(f"{suite}: {name} is not named BM_<op>/<peer>...")
            elif (op, op_args) not in cpp_keys:
                errors.append(f"{suite}: {name} has no C++ row BM_{op}/tensordict"
                              + "".join(f"/{a}" for a in op_args) + f" in {binary}")
        # run.py's pairing over these names, each with a random time.
        rows = [{"name": n, "run_name": n, "real_time": rng.uniform(1, 1e6), "time_unit": "ns"}
                for n in cpp + peers]
        times = {r["name"]: r["real_time"] for r in rows}
        ratios, _ = run.pair(rows, "real_time")
        for r in ratios:
            if not r["variant"].startswith("tensordict"):
                continue  # the peer column is the tensordict's (not torch_save's)
            for peer in run.PEERS:
                peer_name = "/".join(filter(None, (f"BM_{r['operation']}", peer, r["args"])))
                if peer_name not in times:
                    if f"vs_{peer}" in r:
                        errors.append(f"{suite}: {r['name']} has vs_{peer} without a peer row")
                    continue
                pairs += 1
                expected = times[peer_name] / times[r["run_name"]]
                if abs(r.get(f"vs_{peer}", -1) - expected) > 1e-9 * expected:
                    errors.append(f"{suite}: vs_{peer} of {r['name']} is "
                                  f"{r.get(f'vs_{peer}')}, expected {expected}")
        print(f"check_peers: {suite}: {len(cpp)} C++ rows, {len(peers)} peer rows")
    for e in errors:
        print("check_peers: " + e, file=sys.stderr)
    if not pairs:
        errors.append("no peer row paired with any C++ row")
        print("check_peers: no peer row paired with any C++ row", file=sys.stderr)
    print(f"check_peers: {pairs} (tensordict, peer) pairs checked")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
