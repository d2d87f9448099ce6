#!/usr/bin/env python3
"""Collect every benchmark result into one report: docs/benchmarks.md and docs/benchmarks.png.

Reads the ``<name>.json`` files benchmarks/run.py wrote to benchmarks/results/ (one per
benchmark binary) and writes

* ``docs/benchmarks.md``: one Markdown table per binary with every benchmark, its floor and
  the ratio, the target of the headline operations and whether the run met it, the machine and
  date of each run, and the command that regenerates everything;
* ``docs/benchmarks.png``: a bar chart of the headline ratios next to their targets
  (needs matplotlib: Debian's python3-matplotlib, used through /usr/bin/python3).

Usage:
    python3 benchmarks/report.py                 # from benchmarks/results/ to docs/
    python3 benchmarks/report.py --no-plot       # the Markdown only
Regenerate the measurements and the report together with scripts/benchmark-report.sh.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

# The peers of benchmarks/run.py --peer (variant -> column label) and their tables.
from run import PEERS, other_peer_rows, peer_versions

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
REGENERATE = "bash scripts/benchmark-report.sh"

class BetterFloor(tuple):
    """(tensordict benchmark, second floor): the tensordict's time over the better of its
    own floor and the second floor's time (bench_distributed: the flat buffer by hand and
    one send per tensor by hand). With more tensordict benchmarks before the second floor,
    the fastest of them counts (bench_distributed: one buffer and one message per leaf)."""


# Headline operations: (report name, benchmark name, target ratio, what the target is).
# A ratio is tensordict time / floor time, so lower is better and 1.0 is the floor.
HEADLINES = [
    ("core", "BM_get/tensordict", 2.0, "get"),
    ("core", "BM_nested_get/tensordict", 2.0, "nested get"),
    ("core", "BM_typed_get/typed", 1.1, "typed accessor vs get"),
    ("core", "BM_update/tensordict", 2.0, "update (10 keys)"),
    ("ops", "BM_index_int/tensordict", 1.3, "td[i]"),
    ("ops", "BM_index_slice/tensordict", 1.3, "td[slice]"),
    ("ops", "BM_index_long256/tensordict", 1.2, "td[256 long]"),
    ("ops", "BM_index_mask/tensordict", 1.2, "td[mask]"),
    ("ops", "BM_stack64/tensordict", 1.3, "stack of 64"),
    ("ops", "BM_cat64/tensordict", 1.3, "cat of 64"),
    ("ops", "BM_apply_mul2/tensordict", 1.3, "apply(x*2)"),
    ("ops", "BM_clone/tensordict", 1.3, "clone"),
    ("replay", "BM_replay_write_one/tensordict/memmap", 2.0, "replay write 1"),
    ("replay", "BM_replay_sample256/tensordict/memmap", 1.2, "replay sample 256"),
    ("hdf5", "BM_h5_row_read_10_leaves/tensordict", 1.3, "HDF5 td[i], 10 leaves"),
    ("hdf5", "BM_h5_row_write_10_leaves/tensordict", 1.3, "HDF5 td[i] = row, 10 leaves"),
    ("hdf5", "BM_h5_read_256_random_rows/tensordict", 1.3, "HDF5 td[256 random rows]"),
    # Redis: MULTI/EXEC (the default) next to the same transaction by hand, and
    # the plain pipeline (transaction = false) next to the plain pipeline by hand.
    ("redis", "BM_row_write_10_leaves/tensordict", 1.2, "Redis td[i] = row, 10 leaves"),
    ("redis", "BM_row_write_10_leaves_pipeline/tensordict", 1.2,
     "Redis td[i] = row, 10 leaves, no transaction"),
    ("redis", "BM_sample_256_10_leaves/tensordict", 1.2, "Redis td[256 random], 10 leaves"),
    ("redis", "BM_sample_256_10_leaves_pipeline/tensordict", 1.2,
     "Redis td[256 random], 10 leaves, no transaction"),
    # tensordict::nn (issue #34): a module call through tensordicts <= 1.05x of
    # the module called by hand.
    ("nn", "BM_module_mlp/tensordict", 1.05, "TensorDictModule call, MLP 64-64-2"),
    ("nn", "BM_sequential2/tensordict", 1.05, "TensorDictSequential of 2 modules"),
    # tensordict::rb (issue #35): extend, sample, prioritized sample + update
    # within 1.3x of the same work by hand; the sum tree within 1.5x of a
    # flat-array tree by hand.
    ("rb", "BM_rb_extend256/tensordict", 1.3, "replay buffer extend 256"),
    ("rb", "BM_rb_sample256/tensordict", 1.3, "replay buffer sample 256, uniform"),
    ("rb", "BM_rb_prioritized256/tensordict", 1.3, "replay buffer sample 256 prioritized + update"),
    ("rb", "BM_rb_sumtree256/tensordict", 1.5, "SumTree set + find 256"),
    # TorchScript and AOTInductor models through tensordicts <= 1.05x of the
    # IValues / the input vector built by hand.
    ("nn_export", "BM_script_positional/tensordict", 1.05, "TorchScript, positional"),
    ("nn_export", "BM_script_dict/tensordict", 1.05, "TorchScript, Dict[str, Tensor]"),
    ("nn_export", "BM_aoti_dict/tensordict", 1.05, "AOTInductor package, dict"),
    # The batching runner: 8 actors, batches up to 32, a small MLP; throughput
    # >= 3x that of each actor calling the module alone = time <= 1/3 of it.
    # With one row per call, 8 actors cannot fill batches of 32 (docs/nn_batching.md).
    ("nn_runner", "BM_actors8_mlp/runner", 0.33, "batching runner, 8 actors, run() of 1 row"),
    ("nn_runner", "BM_actors8_mlp/runner_4_in_flight", 0.33,
     "batching runner, 8 actors, run_all() of 4 rows"),
    # save >= 0.8x of raw write() bandwidth = time <= 1.25x the write() floor.
    ("checkpoint", "BM_ckpt_save_100MB/tensordict", 1.25, "checkpoint save vs write()"),
    # Comparisons of two variants (time of the first / time of the second).
    ("checkpoint", ("BM_ckpt_save_100MB/tensordict", "BM_ckpt_save_100MB/torch_save"), 1.0,
     "checkpoint save vs torch::save"),
    # load >= 3x faster than torch::load = time <= 1/3 of it (fresh process, warm heap).
    ("checkpoint", ("BM_ckpt_load_cold_100MB/tensordict", "BM_ckpt_load_cold_100MB/torch_load"),
     1 / 3, "checkpoint load vs torch::load, fresh heap"),
    ("checkpoint", ("BM_ckpt_load_100MB/tensordict", "BM_ckpt_load_100MB/torch_load"),
     1 / 3, "checkpoint load vs torch::load, warm heap"),
    ("checkpoint", ("BM_ckpt_load_100MB/tensordict_shared", "BM_ckpt_load_100MB/torch_load"),
     1 / 3, "zero-copy load vs torch::load, warm heap"),
    # send/recv (Auto, checked on both sides) <= 1.1x the better hand-written way.
    ("distributed", BetterFloor(("BM_send_1MB/tensordict", "BM_send_1MB/floor_per_tensor")), 1.1,
     "send/recv 1 MB, default mode, vs the better floor"),
    ("distributed", BetterFloor(("BM_send_1MB/tensordict_consolidated",
                                 "BM_send_1MB/tensordict_per_leaf",
                                 "BM_send_1MB/floor_per_tensor")), 1.1,
     "send/recv 1 MB, better mode, vs the better floor"),
    ("distributed", BetterFloor(("BM_send_100MB/tensordict", "BM_send_100MB/floor_per_tensor")),
     1.1, "send/recv 100 MB vs the better floor"),
    ("distributed", "BM_map_1M_rows/tensordict", 1.1, "map, 1M rows on 2 threads"),
]


# Issue #36's goals against the peers: per-call operations at least 10x faster than the
# peer, bulk ones never slower. A row is bulk when its hand-written floor takes at least
# BULK_FLOOR_NS (the tensor work, I/O or transfer then dominates), per-call otherwise.
PER_CALL_GOAL, BULK_GOAL, BULK_FLOOR_NS = 10.0, 1.0, 1e6


# Where the project explains a headline it misses (by label), for the line under the table.
MISS_EXPLAINED = {
    "checkpoint save vs write()": "checkpoint.md#compared-with-torchsave--torchload",
    "checkpoint load vs torch::load, warm heap": "checkpoint.md#compared-with-torchsave--torchload",
    "send/recv 1 MB, default mode, vs the better floor": "distributed.md#speed",
    "send/recv 1 MB, better mode, vs the better floor": "distributed.md#speed",
    "Redis td[i] = row, 10 leaves": "redis.md#speed",
    "batching runner, 8 actors, run() of 1 row": "nn_batching.md#speed",
}


def load_reports(results: Path) -> dict[str, dict]:
    reports = {}
    for f in sorted(results.glob("*.json")):
        data = json.loads(f.read_text())
        if "ratios" in data:
            reports[f.stem] = data
    return reports


def ratio_of(reports: dict[str, dict], report: str, name):
    """The ratio entry of `name`; for a (first, second) pair, first's time / second's."""
    rows = reports.get(report, {}).get("ratios", [])
    if isinstance(name, BetterFloor):
        rows = [ratio_of(reports, report, n) for n in name]
        if any(r is None for r in rows):
            return None
        *tds, other = rows
        floor = min(tds[0]["floor_ns"], other["tensordict_ns"])
        best = min(r["tensordict_ns"] for r in tds)
        medians = [r.get("median_tensordict_ns") for r in tds]
        median = None
        if all(medians) and other.get("median_tensordict_ns") and tds[0].get("median_ratio"):
            # its own floor's median (from its ratio), or the second floor's
            mfloor = min(medians[0] / tds[0]["median_ratio"], other["median_tensordict_ns"])
            median = min(medians) / mfloor
        return {"ratio": best / floor, "median_ratio": median}
    if isinstance(name, tuple):
        a, b = (ratio_of(reports, report, n) for n in name)
        if a is None or b is None:
            return None
        ma, mb = a.get("median_tensordict_ns"), b.get("median_tensordict_ns")
        return {"ratio": a["tensordict_ns"] / b["tensordict_ns"],
                "median_ratio": ma / mb if ma and mb else None}
    for r in rows:
        if r["name"] == name:
            return r
    return None


def display_name(name) -> str:
    if isinstance(name, BetterFloor):
        tds = " or ".join(f"`{n}`" for n in name[:-1])
        faster = " (the faster)" if len(name) > 2 else ""
        return f"{tds}{faster} / the better of its floor and `{name[-1]}`"
    return " / ".join(f"`{n}`" for n in name) if isinstance(name, tuple) else f"`{name}`"


def fmt_ns(ns: float) -> str:
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.3g} ns"


def machine_line(ctx: dict) -> str:
    load = ctx.get("load_avg") or []
    load_s = f", load {load[0]:.2f}" if load else ""
    return (f"{ctx.get('host_name', '?')}, {ctx.get('num_cpus', '?')} CPUs at "
            f"{ctx.get('mhz_per_cpu', '?')} MHz{load_s}")


# Rows under their goal against a peer although their hand-written floor meets it (the
# library's own cost, not LibTorch's), with the measurement or decision that explains it.
PEER_MISS_EXPLAINED = {
    "BM_memmap_like_1M_rows/tensordict":
        "the files' blocks are reserved (`posix_fallocate`) where Python leaves them sparse, so "
        "that a full disk is an error of `memmap_like` and not a `SIGBUS` at a later write: "
        "[python_to_cpp.md](python_to_cpp.md#differences-from-python-0153-that-stay)",
    "BM_save_256MB/tensordict":
        "a save over a save writes a new directory (all or nothing) where Python rewrites the "
        "files in place; new inodes are slow on this VM's ext4 without a journal and faster than "
        "Python on ext4 with one: [storage.md](storage.md#saving-over-a-save)",
    "BM_row_write_10_leaves/tensordict":
        "the row write is checked on the server (one `EVAL`) so that a leaf replaced by another "
        "process is a `ConflictError`, not a torn row: [redis.md](redis.md#speed)",
    "BM_leaf_memory_10k/tensordict":
        "10,000 `set`s of new keys keep an ordered list of entries and their index, a little more "
        "than the floor's `unordered_map::emplace`, whose own ratio is barely at the goal",
}
# Below this ratio to its floor, a row's miss is the floor's own ratio under the run's noise.
PEER_MISS_NOISE = 1.10


def peer_summary(reports: dict[str, dict]) -> list[str]:
    """The 'vs Python' (and 'vs TorchRL') summary: every row with a peer time, against the
    per-call or the bulk goal."""
    out = []
    for peer, label in PEERS.items():
        rows = [(rep, r) for rep, data in reports.items() for r in data["ratios"]
                if f"vs_{peer}" in r and r["variant"] == "tensordict"]
        if not rows:
            continue
        per_call = [(rep, r) for rep, r in rows if r["floor_ns"] < BULK_FLOOR_NS]
        bulk = [(rep, r) for rep, r in rows if r["floor_ns"] >= BULK_FLOOR_NS]
        met = sum(r[f"vs_{peer}"] >= PER_CALL_GOAL for _, r in per_call) + \
            sum(r[f"vs_{peer}"] >= BULK_GOAL for _, r in bulk)
        out += [
            "",
            f"## vs {label}",
            "",
            f"vs {label} = {label} time / tensordict time: how many times faster the C++",
            f"tensordict is than the same operation on the same data in {label} (run by",
            "`benchmarks/run.py --peer`, alternating with the C++ binary round by round). Goals",
            f"(issue #36): per-call operations >= {PER_CALL_GOAL:.0f}x, bulk operations >= "
            f"{BULK_GOAL:.0f}x; a row counts as bulk when its hand-written floor takes at least "
            f"{fmt_ns(BULK_FLOOR_NS)}. {met} of {len(rows)} rows meet their goal.",
            f"`floor vs {label}` is the same ratio for the hand-written floor (raw LibTorch): the",
            "most any C++ library could reach on that row. Where it is itself under the goal, the",
            f"operation's time is LibTorch's own tensor work, which {label} pays as well.",
            "",
            f"| report | benchmark | kind | tensordict | {label} | vs {label} | floor vs {label} "
            "| goal | met |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        own_misses = []
        for kind, group, goal in (("per call", per_call, PER_CALL_GOAL),
                                  ("bulk", bulk, BULK_GOAL)):
            for rep, r in group:
                vs = r[f"vs_{peer}"]
                floor_vs = r[f"{peer}_ns"] / r["floor_ns"] if r.get("floor_ns") else float("nan")
                out.append(f"| {rep} | `{r['name']}` | {kind} | {fmt_ns(r['tensordict_ns'])} | "
                           f"{fmt_ns(r[f'{peer}_ns'])} | {vs:.1f}x | {floor_vs:.1f}x | "
                           f">= {goal:.0f}x | {'yes' if vs >= goal else '**no**'} |")
                if vs < goal and floor_vs >= goal:
                    own_misses.append((r["name"], r["ratio"], floor_vs))
        if own_misses:
            out += ["", f"Rows under their goal whose floor meets it (the library's own cost), "
                    "and why:", ""]
            for name, ratio, floor_vs in own_misses:
                why = PEER_MISS_EXPLAINED.get(name)
                if why is None and ratio <= PEER_MISS_NOISE:
                    why = f"the floor's own ratio, {floor_vs:.1f}x, is within the run's noise of the goal"
                out.append(f"- `{name}` ({ratio:.2f}x of its floor): {why or 'not explained yet'}")
    return out


# Reports of the same binary built against Debian's LibTorch 1.13
# (scripts/benchmark-report.sh, run.py --name <report>_libtorch113).
LIBTORCH113_SUFFIX = "_libtorch113"


def libtorch_comparison(reports: dict[str, dict]) -> list[str]:
    """The same rows built against LibTorch 1.13 and 2.13: time under 1.13 / time under 2.13."""
    pairs = [(rep[: -len(LIBTORCH113_SUFFIX)], rep) for rep in reports
             if rep.endswith(LIBTORCH113_SUFFIX) and rep[: -len(LIBTORCH113_SUFFIX)] in reports]
    if not pairs:
        return []
    out = ["", "## LibTorch 1.13 against 2.13", "",
           "The same benchmarks built against Debian's LibTorch 1.13.1 and against the 2.13 of",
           "the PyTorch wheel, each run in its own pass (times are not alternated between the",
           "two builds: compare rows of one report, not single digits). 1.13 / 2.13 above 1 means",
           "the row got faster on 2.13.", "",
           "| report | benchmark | tensordict 1.13 | tensordict 2.13 | 1.13 / 2.13 "
           "| floor 1.13 | floor 2.13 | 1.13 / 2.13 | ratio 1.13 | ratio 2.13 |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for new_rep, old_rep in pairs:
        old_rows = {r["name"]: r for r in reports[old_rep]["ratios"]}
        for r in reports[new_rep]["ratios"]:
            o = old_rows.get(r["name"])
            if o is None or not r.get("floor_ns") or not o.get("floor_ns"):
                continue
            out.append(
                f"| {new_rep} | `{r['name']}` | {fmt_ns(o['tensordict_ns'])} | "
                f"{fmt_ns(r['tensordict_ns'])} | {o['tensordict_ns'] / r['tensordict_ns']:.2f}x | "
                f"{fmt_ns(o['floor_ns'])} | {fmt_ns(r['floor_ns'])} | "
                f"{o['floor_ns'] / r['floor_ns']:.2f}x | {o['ratio']:.2f}x | {r['ratio']:.2f}x |")
    return out


def instruction_counts(results: Path) -> list[str]:
    """The per-call rows as instruction counts (benchmarks/callgrind.py --json, saved as
    results/callgrind_<report>.json): ratios that machine load does not move."""
    files = sorted(results.glob("callgrind_*.json"))
    if not files:
        return []
    out = ["", "## Instruction counts", "",
           "Per-call rows counted under valgrind's callgrind (`benchmarks/callgrind.py`):",
           "instructions per iteration of the tensordict variant and of its floor, from two runs",
           "of N1 and N2 iterations (the difference, so start-up work cancels out). Timings of a",
           "2-core machine move by 3x to 6x when other work runs; these counts do not.", "",
           "| report | benchmark | tensordict | floor | ratio | command |",
           "| --- | --- | --- | --- | --- | --- |"]
    for f in files:
        data = json.loads(f.read_text())
        rep = f.stem[len("callgrind_"):]
        for r in data.get("rows", []):
            v = r["variants"]
            td, fl = v.get("tensordict", {}), v.get("floor", {})
            n1, n2 = r["iterations"]
            ok = td.get("per_iteration", 0) > 0 and fl.get("per_iteration", 0) > 0
            # A count at or below zero: start-up noise larger than the row's work.
            ratio = f"{r['ratio']:.2f}x" if ok and r.get("ratio") else "n/a (too few iterations)"
            out.append(f"| {rep} | `{r['row']}` | {td.get('per_iteration', 0):,.0f} | "
                       f"{fl.get('per_iteration', 0):,.0f} | {ratio} | `python3 "
                       f"benchmarks/callgrind.py {data.get('binary', '?')} {r['row']} "
                       f"--iterations {n1} {n2}` |")
    return out


def counters_table(data: dict) -> list[str]:
    """Counters per leaf (bench_parity's memory rows), the median of the repetitions."""
    found: dict[str, dict[str, list[float]]] = {}
    for b in data.get("benchmarks", []):
        if b.get("run_type") == "aggregate" or b.get("error_occurred"):
            continue
        for k, v in b.items():
            if k.endswith("_per_leaf"):
                found.setdefault(b.get("run_name", b["name"]), {}).setdefault(k, []).append(v)
    if not found:
        return []
    names = sorted({k for c in found.values() for k in c})
    out = ["", "Memory counters (median of the repetitions):", "",
           "| benchmark | " + " | ".join(names) + " |", "| --- |" + " --- |" * len(names)]
    for run_name, c in sorted(found.items()):
        cells = [f"{sorted(c[k])[len(c[k]) // 2]:.1f}" if k in c else "" for k in names]
        out.append(f"| `{run_name}` | " + " | ".join(cells) + " |")
    return out


def markdown(reports: dict[str, dict], results: Path = RESULTS) -> str:
    targets = {(rep, name): (t, label) for rep, name, t, label in HEADLINES
               if isinstance(name, str)}
    out = [
        "# Benchmark report",
        "",
        "Every benchmark of the project next to its floor: the same work written by hand in",
        "raw LibTorch, `memcpy`, `write()` or `read()`. ratio = tensordict time / floor time",
        "(lower is better; 1.00x is the floor), from the fastest of each one's repetitions, which",
        "run in random order: on a shared machine noise only adds time, and the fastest run is the",
        "stablest estimate of the work itself (the ratio of the medians is given beside it).",
        "Headline operations carry the target their issue set. Generated by",
        "`benchmarks/report.py` from `benchmarks/results/*.json`; regenerate",
        f"the measurements and this page with `{REGENERATE}`.",
        "",
        "![headline ratios](benchmarks.png)",
        "",
        "## Headline ratios",
        "",
        "| operation | benchmark (a pair: first time / second time) | ratio | ratio of the medians "
        "| target | met |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    missed = []
    for rep, name, target, label in HEADLINES:
        r = ratio_of(reports, rep, name)
        if r is None:
            out.append(f"| {label} | {display_name(name)} | not measured | | <= {target:.2f}x | - |")
            continue
        met = "yes" if r["ratio"] <= target else "**no**"
        if r["ratio"] > target:
            missed.append(label)
        m = r.get("median_ratio")
        m_s = f"{m:.2f}x" if m is not None else ""
        out.append(f"| {label} | {display_name(name)} | {r['ratio']:.2f}x | {m_s} "
                   f"| <= {target:.2f}x | {met} |")
    if missed:
        out += ["", "Targets missed in this run, and where the measurements explain why:", ""]
        out += [f"- {label}: " + (f"[{MISS_EXPLAINED[label].split('#')[0]}]"
                                  f"({MISS_EXPLAINED[label]})"
                                  if label in MISS_EXPLAINED else "not explained yet")
                for label in missed]
    out += peer_summary(reports)
    out += libtorch_comparison(reports)
    out += instruction_counts(results)
    for rep, data in reports.items():
        ctx = data.get("context", {})
        rpt = data.get("report", {})
        peers = [p for p in PEERS if any(f"vs_{p}" in r for r in data["ratios"])]
        out += [
            "",
            f"## {rep}",
            "",
            f"Measured {ctx.get('date', '?')} on {machine_line(ctx)}; sources "
            f"`{rpt.get('source', '?')}`, "
            f"{'fastest' if rpt.get('statistic') == 'min' else 'median'} of "
            f"{rpt.get('repetitions', 1)} repetition(s) run in random order, "
            f"{rpt.get('metric', 'real_time')}. Command: `{rpt.get('command', '?')}`.",
            "",
            "| benchmark | tensordict | floor | ratio | ratio of the medians | target |"
            + "".join(f" {PEERS[p]} | vs {PEERS[p]} |" for p in peers),
            "| --- | --- | --- | --- | --- | --- |" + " --- | --- |" * len(peers),
        ]
        for r in data["ratios"]:
            t = targets.get((rep, r["name"]))
            t_s = f"<= {t[0]:.2f}x" if t else ""
            m = r.get("median_ratio")
            m_s = f"{m:.2f}x" if m is not None else ""
            vs = "".join(f" {fmt_ns(r[f'{p}_ns'])} | {r[f'vs_{p}']:.1f}x |" if f"vs_{p}" in r
                         else " | |" for p in peers)
            out.append(f"| `{r['name']}` | {fmt_ns(r['tensordict_ns'])} | "
                       f"{fmt_ns(r['floor_ns'])} | {r['ratio']:.2f}x | {m_s} | {t_s} |{vs}")
        out += other_peer_rows(data, fmt_ns)
        for peer in data.get("peers", []):
            out.append(f"\nPeer: `{peer['command']}` ({peer_versions(peer.get('context', {}))}).")
        out += counters_table(data)
    return "\n".join(out) + "\n"


def plot(reports: dict[str, dict], png: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [(label, ratio_of(reports, rep, name), target)
            for rep, name, target, label in HEADLINES]
    rows = [(label, r["ratio"], target) for label, r, target in rows if r is not None]
    fig, ax = plt.subplots(figsize=(8, 0.38 * len(rows) + 1.6))
    y = range(len(rows))
    colors = ["#2a9d8f" if ratio <= target else "#e76f51" for _, ratio, target in rows]
    ax.barh(list(y), [ratio for _, ratio, _ in rows], color=colors)
    ax.scatter([target for _, _, target in rows], list(y), marker="|", s=300, color="black",
               label="target", zorder=3)
    for i, (_, ratio, _) in enumerate(rows):
        ax.text(ratio, i, f" {ratio:.2f}x", va="center", fontsize=8)
    ax.axvline(1.0, color="grey", linestyle=":", linewidth=1)
    ax.set_yticks(list(y))
    ax.set_yticklabels([label for label, _, _ in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("tensordict time / floor, or / torch for the comparisons (lower is better)")
    dates = sorted({d.get("context", {}).get("date", "?")[:10] for d in reports.values()})
    ctx = next(iter(reports.values())).get("context", {}) if reports else {}
    ax.set_title(f"tensordict for LibTorch: headline ratios\n{machine_line(ctx)}; "
                 f"measured {', '.join(dates)}", fontsize=9)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", type=Path, default=RESULTS)
    p.add_argument("--out-dir", type=Path, default=REPO / "docs")
    p.add_argument("--no-plot", action="store_true")
    args = p.parse_args(argv)
    reports = load_reports(args.results)
    if not reports:
        print(f"report.py: no results in {args.results}; run benchmarks/run.py first",
              file=sys.stderr)
        return 1
    (args.out_dir / "benchmarks.md").write_text(markdown(reports, args.results))
    print(f"wrote {args.out_dir / 'benchmarks.md'}")
    if not args.no_plot:
        plot(reports, args.out_dir / "benchmarks.png")
        print(f"wrote {args.out_dir / 'benchmarks.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
