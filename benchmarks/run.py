#!/usr/bin/env python3
"""Run tensordict benchmark binaries and report each operation against its floor.

Every benchmark is named ``BM_<op>/<variant>[/<args>...]``. The variant ``floor``
is the hand-written baseline (raw LibTorch and standard containers); every other
variant (``tensordict``, ``tensordict_for_each``, ...) is divided by the floor of
the same op and args:

    ratio = variant_time / floor_time        (1.0 = no overhead)

For each binary ``bench_<name>`` this writes, in --out-dir:

* ``<name>.json``: Google Benchmark's JSON output plus a ``ratios`` list and a ``report``
  object (the command, the git revision, the metric);
* ``<name>.md``: a Markdown table (operation | tensordict (ns) | floor (ns) | ratio),
  the machine, the date and the command that regenerates it.

Usage:
    python3 benchmarks/run.py                                  # build/benchmarks/bench_core
    python3 benchmarks/run.py build-bench/benchmarks/bench_core build-bench/benchmarks/bench_ops
    python3 benchmarks/run.py BIN --repetitions 5 --out-dir /tmp/results

Standard library only.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

SCRIPT = Path(__file__).resolve()
REPO = SCRIPT.parent.parent
DEFAULT_BINARY = REPO / "build" / "benchmarks" / "bench_core"
DEFAULT_OUT_DIR = REPO / "benchmarks" / "results"

FLOOR = "floor"
# Peer variants: the same operation in another library (benchmarks/peers/, torchrl_rb.py),
# shown as a column "vs <label>" = peer time / tensordict time, not divided by the floor.
# A variant "<peer>_<how>" (python_consolidated) is a second way of doing it in that library.
PEERS = {"python": "Python", "torchrl": "TorchRL"}
# Name components Google Benchmark appends that are not part of the operation.
_RUN_OPTION = re.compile(
    r"^((min_time|min_warmup_time|iterations|repeats):.*|real_time|process_time|manual_time)$")
_TO_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Run benchmark binaries and pair each BM_<op>/<variant> "
        "with BM_<op>/floor.")
    p.add_argument("binaries", nargs="*", type=Path,
                   help=f"benchmark executables (default: {DEFAULT_BINARY.relative_to(REPO)})")
    p.add_argument("--out-dir", type=Path, default=DEFAULT_OUT_DIR,
                   help="where <name>.json and <name>.md go (default: benchmarks/results)")
    p.add_argument("--name", help="report name (default: the binary name without 'bench_'); "
                   "only with a single binary")
    p.add_argument("--repetitions", type=int, default=1,
                   help="run each benchmark N times, in random order (default: 1)")
    p.add_argument("--statistic", choices=("min", "median"), default="min",
                   help="which time of the repetitions the ratio uses (default: min, the "
                   "fastest: noise only adds time; the median ratio is reported beside it)")
    p.add_argument("--filter", help="passed as --benchmark_filter (a regex)")
    p.add_argument("--metric", choices=("real_time", "cpu_time"), default="real_time",
                   help="which time to compare (default: real_time)")
    p.add_argument("--fail-above", type=float, metavar="RATIO",
                   help="exit with status 1 when any ratio exceeds RATIO")
    p.add_argument("--source", metavar="TEXT",
                   help="what the binaries were built from, for the report (default: the git "
                   "revision of this checkout, flagged when src/ or include/ have changes)")
    p.add_argument("--from-json", action="append", default=[], type=Path, metavar="FILE",
                   help="re-report a saved Google Benchmark JSON file (or a <name>.json written "
                   "by this script) instead of running a binary (repeatable)")
    p.add_argument("--peer", action="append", default=[], metavar="COMMAND",
                   help="a peer benchmark command run after the binary in every round, e.g. "
                   "--peer '.venv/bin/python benchmarks/peers/tensordict_peer.py' (repeatable); "
                   "it gets --suite <name> --out FILE and --filter REGEX, and writes Google "
                   "Benchmark JSON whose rows BM_<op>/python or BM_<op>/torchrl give the "
                   "'vs Python' and 'vs TorchRL' columns")
    p.add_argument("--benchmark-arg", action="append", default=[], metavar="ARG",
                   help="extra argument for the binary, e.g. --benchmark-arg=--benchmark_min_time=1 "
                   "(repeatable)")
    args = p.parse_args(argv)
    if not args.binaries and not args.from_json:
        args.binaries = [DEFAULT_BINARY]
    if args.name and len(args.binaries) + len(args.from_json) > 1:
        p.error("--name needs a single binary or file")
    if args.repetitions < 1:
        p.error("--repetitions must be >= 1")
    return args


def report_name(binary: Path, override: str | None) -> str:
    if override:
        return override
    stem = binary.name
    return stem[len("bench_"):] if stem.startswith("bench_") else stem


def run_binary(binary: Path, args: argparse.Namespace, repetitions: int | None = None) -> dict:
    """Runs one binary and returns Google Benchmark's JSON document."""
    repetitions = args.repetitions if repetitions is None else repetitions
    if not binary.is_file() or not os.access(binary, os.X_OK):
        sys.exit(f"run.py: {binary} is not an executable; build it first, e.g.\n"
                 "  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && "
                 f"cmake --build build -j2 --target {binary.name}")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.json"
        cmd = [str(binary), "--benchmark_format=json", f"--benchmark_out={out}",
               "--benchmark_out_format=json"]
        if repetitions > 1 or args.peer:
            # Repetitions in random order: otherwise every tensordict variant
            # runs right after another op's floor (a different heap and cache
            # state) and every floor right after its own op, which measured up
            # to 1.3x for identical work (clone: same instruction count).
            cmd += [f"--benchmark_repetitions={repetitions}",
                    "--benchmark_enable_random_interleaving=true"]
        if args.filter:
            cmd.append(f"--benchmark_filter={args.filter}")
        cmd += args.benchmark_arg
        print("run.py: " + " ".join(shlex.quote(c) for c in cmd), file=sys.stderr)
        proc = subprocess.run(cmd, stdout=subprocess.DEVNULL)
        if proc.returncode != 0:
            sys.exit(f"run.py: {binary.name} exited with status {proc.returncode}")
        return json.loads(out.read_text())


def run_peer(command: str, suite: str, args: argparse.Namespace) -> dict | None:
    """Runs one peer command on the binary's suite and filter; its JSON document, or None
    (with a warning) when it fails."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "peer.json"
        cmd = shlex.split(command) + ["--suite", suite, "--out", str(out)]
        if args.filter:
            cmd += ["--filter", args.filter]
        print("run.py: " + " ".join(shlex.quote(c) for c in cmd), file=sys.stderr)
        proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, cwd=REPO)
        if proc.returncode != 0 or not out.is_file():
            print(f"run.py: peer {command!r} exited with status {proc.returncode}; "
                  "its rows are missing from this round", file=sys.stderr)
            return None
        return json.loads(out.read_text())


def run_with_peers(binary: Path, suite: str, args: argparse.Namespace) -> dict:
    """--repetitions rounds, each the binary once and then every peer once on the same
    filter (so that a change in the machine's load hits both sides alike); the rows of
    every round in one document, repetitions counted per run_name."""
    doc: dict = {}
    peers: list[dict] = []
    rows: list[dict] = []
    for round_index in range(args.repetitions):
        part = run_binary(binary, args, repetitions=1)
        doc = doc or part
        rows += part.get("benchmarks", [])
        for command in args.peer:
            peer = run_peer(command, suite, args)
            if peer is None:
                continue
            if round_index == 0:
                peers.append({"command": command, "context": peer.get("context", {})})
            rows += peer.get("benchmarks", [])
    counts: dict[str, int] = {}
    for b in rows:
        if b.get("run_type") == "aggregate":
            continue
        run_name = b.get("run_name", b["name"])
        b["repetition_index"] = counts.get(run_name, 0)
        counts[run_name] = b["repetition_index"] + 1
    for b in rows:
        b["repetitions"] = counts.get(b.get("run_name", b["name"]), 1)
    doc["benchmarks"] = [b for b in rows if b.get("run_type") != "aggregate"]
    doc["peers"] = peers
    return doc


def split_name(run_name: str) -> tuple[str, str, tuple[str, ...]] | None:
    """'BM_get/tensordict/min_time:0.200' -> ('get', 'tensordict', ())."""
    parts = run_name.split("/")
    if len(parts) < 2 or not parts[0].startswith("BM_"):
        return None
    args = tuple(a for a in parts[2:] if not _RUN_OPTION.match(a))
    return parts[0][len("BM_"):], parts[1], args


def measured(doc: dict, statistic: str) -> list[dict]:
    """One entry per benchmark: its single run, or its repetitions reduced to
    their fastest ('min') or median time. A saved output that holds only
    aggregates gives its median."""
    reps: dict[str, list[dict]] = {}
    medians: dict[str, dict] = {}
    for b in doc.get("benchmarks", []):
        if b.get("error_occurred"):
            print(f"run.py: {b['name']} failed: {b.get('error_message', '')}",
                  file=sys.stderr)
            continue
        run_name = b.get("run_name", b["name"])
        if b.get("run_type") == "aggregate":
            if b.get("aggregate_name") == "median":
                medians[run_name] = b
            continue
        reps.setdefault(run_name, []).append(b)
    rows = []
    for run_name in dict.fromkeys([*reps, *medians]):
        runs = reps.get(run_name, [])
        if len(runs) <= 1:
            rows.append(runs[0] if runs else medians[run_name])
            continue
        row = dict(runs[0])
        for metric in ("real_time", "cpu_time"):
            times = [float(r[metric]) for r in runs]  # one time_unit per benchmark
            row[metric] = min(times) if statistic == "min" else statistics.median(times)
        rows.append(row)
    return rows


def pair(rows: list[dict], metric: str) -> tuple[list[dict], list[str]]:
    """Ratios of every non-floor variant to the floor of the same op and args."""
    floors: dict[tuple[str, tuple[str, ...]], dict] = {}
    peers: dict[tuple[str, str, tuple[str, ...]], dict] = {}
    variants: list[tuple[str, str, tuple[str, ...], dict]] = []
    unpaired: list[str] = []
    for b in rows:
        run_name = b.get("run_name", b["name"])
        parsed = split_name(run_name)
        if parsed is None:
            unpaired.append(run_name)
            continue
        op, variant, args = parsed
        if variant == FLOOR:
            floors[(op, args)] = b
        elif is_peer(variant):
            peers[(op, variant, args)] = b
        else:
            variants.append((op, variant, args, b))

    def ns(b: dict) -> float:
        return float(b[metric]) * _TO_NS[b.get("time_unit", "ns")]

    # Registration order (random interleaving shuffles the JSON's order).
    variants.sort(key=lambda v: (v[3].get("family_index", 0),
                                 v[3].get("per_family_instance_index", 0)))
    ratios = []
    paired_floors = set()
    for op, variant, args, b in variants:
        f = floors.get((op, args))
        if f is None:
            unpaired.append(b.get("run_name", b["name"]))
            continue
        paired_floors.add((op, args))
        t, tf = ns(b), ns(f)
        ratios.append({
            "operation": op,
            "variant": variant,
            "args": "/".join(args),
            "name": "/".join((f"BM_{op}", variant, *args)),
            "floor_name": "/".join((f"BM_{op}", FLOOR, *args)),
            "run_name": b.get("run_name", b["name"]),
            "metric": metric,
            "tensordict_ns": t,
            "floor_ns": tf,
            "ratio": t / tf if tf > 0 else float("inf"),
        })
        for peer in PEERS:
            p = peers.get((op, peer, args))
            # tensordict variants only: another variant (torch_save) is not the tensordict
            if p is not None and t > 0 and variant.startswith("tensordict"):
                # how many times faster the tensordict is than the peer
                ratios[-1][f"{peer}_ns"] = ns(p)
                ratios[-1][f"vs_{peer}"] = ns(p) / t
    for key, f in floors.items():
        if key not in paired_floors:
            unpaired.append(f.get("run_name", f["name"]))
    tensordict_rows = {(r["operation"], tuple(filter(None, r["args"].split("/")))): r
                       for r in reversed(ratios)}
    for (op, variant, args), p in peers.items():
        if (op, args) not in tensordict_rows and variant in PEERS:
            unpaired.append(p.get("run_name", p["name"]))
    return ratios, unpaired


def peer_rows(rows: list[dict], metric: str) -> list[dict]:
    """Every peer row (BM_<op>/python..., BM_<op>/torchrl...) with the time of the
    tensordict row of its op and args: 'times_faster' = peer time / tensordict time."""
    by_key: dict[tuple[str, tuple[str, ...]], dict] = {}
    peers = []
    for b in rows:
        parsed = split_name(b.get("run_name", b["name"]))
        if parsed is None:
            continue
        op, variant, args = parsed
        if is_peer(variant):
            peers.append((op, variant, args, b))
        elif variant == "tensordict" or ((op, args) not in by_key and variant != FLOOR):
            by_key[(op, args)] = b
    out = []
    for op, variant, args, b in peers:
        t = float(b[metric]) * _TO_NS[b.get("time_unit", "ns")]
        td = by_key.get((op, args))
        td_ns = float(td[metric]) * _TO_NS[td.get("time_unit", "ns")] if td else None
        out.append({"name": "/".join((f"BM_{op}", variant, *args)), "operation": op,
                    "variant": variant, "args": "/".join(args), "peer_ns": t,
                    "tensordict_ns": td_ns,
                    "times_faster": t / td_ns if td_ns else None})
    return sorted(out, key=lambda r: r["name"])


def is_peer(variant: str) -> bool:
    return any(variant == p or variant.startswith(p + "_") for p in PEERS)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def nproc() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 0


def source_revision() -> str:
    """'abc1234' or 'abc1234 + uncommitted changes in src/ include/', or 'unknown'."""
    try:
        rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--",
                                "src", "include", "benchmarks/*.cpp", "CMakeLists.txt"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return rev + (" + uncommitted changes in src/, include/ or benchmarks/" if dirty else "")


def regenerate_command(argv: list[str]) -> str:
    try:
        script = SCRIPT.relative_to(Path.cwd())
    except ValueError:
        script = SCRIPT
    return " ".join(shlex.quote(a) for a in ["python3", str(script), *argv])


def other_peer_rows(doc: dict, fmt) -> list[str]:
    """The table of the peers' second ways of doing an operation (variants "<peer>_<how>",
    python_consolidated), times written by `fmt`; shared with report.py."""
    rows = [r for r in doc.get("peer_rows", []) if r["variant"] not in PEERS]
    if not rows:
        return []
    out = ["", "Other ways of doing the same in the peer libraries (peer time / tensordict time):",
           "", "| peer row | time | tensordict | times faster |", "| --- | ---: | ---: | ---: |"]
    for r in rows:
        td = fmt(r["tensordict_ns"]) if r["tensordict_ns"] else ""
        tf = f"{r['times_faster']:.1f}x" if r["times_faster"] else ""
        out.append(f"| `{r['name']}` | {fmt(r['peer_ns'])} | {td} | {tf} |")
    return out


def peer_versions(context: dict) -> str:
    """The library versions a peer reported, for the line under a table."""
    return ", ".join(f"{k} {context[k]}" for k in ("python", "torch", "tensordict", "torchrl")
                     if k in context)


def fmt_ns(x: float) -> str:
    if x >= 100:
        return f"{x:,.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


# Counters of a benchmark that times its floor and its tensordict variant in
# alternation within one run (bench_distributed's BM_send_<size>_paired).
_IN_RUN_COUNTERS = ("floor_us", "td_us", "ratio_of_sums", "median_ratio")


def paired_in_run(doc: dict) -> list[dict]:
    """Benchmarks that report their own ratio: of their repetitions, the one
    whose ratio of sums is the median (its times and ratios together)."""
    runs: dict[str, list[dict]] = {}
    for b in doc.get("benchmarks", []):
        if b.get("run_type") == "aggregate" or b.get("error_occurred"):
            continue
        if all(c in b for c in _IN_RUN_COUNTERS):
            runs.setdefault(b.get("run_name", b["name"]), []).append(b)
    out = []
    for run_name, reps in runs.items():
        reps = sorted(reps, key=lambda r: float(r["ratio_of_sums"]))
        mid = reps[(len(reps) - 1) // 2]
        parsed = split_name(run_name)
        name = run_name if parsed is None else "/".join((f"BM_{parsed[0]}", parsed[1], *parsed[2]))
        row = {"run_name": name, "repetitions": len(reps),
               "order": (mid.get("family_index", 0), mid.get("per_family_instance_index", 0)),
               "all_ratios_of_sums": [float(r["ratio_of_sums"]) for r in reps]}
        for c in _IN_RUN_COUNTERS:
            row[c] = float(mid[c])
        out.append(row)
    return sorted(out, key=lambda r: r["order"])


def markdown(name: str, binary: Path, doc: dict, ratios: list[dict],
             unpaired: list[str], args: argparse.Namespace, command: str,
             source: str) -> str:
    ctx = doc.get("context", {})
    load = ctx.get("load_avg")
    scaling = ctx.get("cpu_scaling_enabled")
    # The benchmarks themselves keep about one core busy (the load average
    # is over the last minute, so the previous binary counts too).
    busy = bool(load) and load[0] - 1.0 > 0.5 * max(nproc(), 1)
    lines = [
        f"# Benchmarks: {name}",
        "",
        f"Each tensordict operation next to its floor (the same work written by hand "
        f"with raw LibTorch and standard containers), measured in the same run of "
        f"`{binary.name}`. ratio = tensordict time / floor time "
        f"({args.metric.replace('_', ' ')}"
        + (f", {'fastest' if args.statistic == 'min' else 'median'} of "
           f"{args.repetitions} repetitions run in random order"
           if args.repetitions > 1 else "")
        + "); 1.0 means no overhead.",
        "",
    ]
    with_median = any(r.get("median_ratio") is not None for r in ratios)
    peer_columns = [p for p in PEERS if any(f"vs_{p}" in r for r in ratios)]
    header = "| operation | tensordict (ns) | floor (ns) | ratio |"
    rule = "| --- | ---: | ---: | ---: |"
    if with_median:
        header += " ratio of the medians |"
        rule += " ---: |"
    for p in peer_columns:
        header += f" {PEERS[p]} (ns) | vs {PEERS[p]} |"
        rule += " ---: | ---: |"
    if peer_columns:
        lines[-2] += (" " + ", ".join(f"vs {PEERS[p]} = {PEERS[p]} time / tensordict time "
                                      "(how many times faster the tensordict is)"
                                      for p in peer_columns) + ".")
    lines += [header, rule]
    for r in ratios:
        op = r["operation"]
        if r["args"]:
            op += "/" + r["args"]
        if r["variant"] != "tensordict":
            op += f" ({r['variant']})"
        row = f"| {op} | {fmt_ns(r['tensordict_ns'])} | {fmt_ns(r['floor_ns'])} | {r['ratio']:.2f}x |"
        if with_median:
            m = r.get("median_ratio")
            row += f" {m:.2f}x |" if m is not None else " |"
        for p in peer_columns:
            row += (f" {fmt_ns(r[f'{p}_ns'])} | {r[f'vs_{p}']:.1f}x |" if f"vs_{p}" in r
                    else " | |")
        lines.append(row)
    lines += other_peer_rows(doc, fmt_ns)
    for peer in doc.get("peers", []):
        versions = peer_versions(peer.get("context", {}))
        lines += ["", f"Peer `{peer['command']}`" + (f" ({versions})" if versions else "")
                  + ": run once after the binary in each of the "
                  f"{args.repetitions} round(s), on the same filter."]
    in_run = paired_in_run(doc)
    if in_run:
        lines += ["", "Floor and tensordict alternating within one run, each transfer timed "
                  "alone (of the repetitions, the one with the median ratio of the sums):", "",
                  "| benchmark | tensordict (us) | floor (us) | ratio of the sums | "
                  "median of the per-iteration ratios | ratios of the sums, every repetition |",
                  "| --- | ---: | ---: | ---: | ---: | --- |"]
        for r in in_run:
            every = ", ".join(f"{x:.2f}" for x in r["all_ratios_of_sums"])
            lines.append(f"| {r['run_name']} | {r['td_us']:.1f} | {r['floor_us']:.1f} | "
                         f"{r['ratio_of_sums']:.2f}x | {r['median_ratio']:.2f}x | {every} |")
        unpaired = [u for u in unpaired if (split_name(u) or ("",))[0] not in
                    {(split_name(r["run_name"]) or ("",))[0] for r in in_run}]
    if unpaired:
        lines += ["", "Benchmarks without a pair: " + ", ".join(f"`{u}`" for u in unpaired)]
    if busy:
        lines += ["", f"**Warning:** the machine was busy when this ran (load average "
                  f"{load[0]:.2f} on {nproc()} cores): the numbers are noisy. Rerun on an idle "
                  "machine before comparing them with other runs."]
    lines += [
        "",
        "## Machine and run",
        "",
        f"- CPU: {cpu_model()}, {nproc()} cores available (nproc)"
        + (f", {ctx['mhz_per_cpu']} MHz" if "mhz_per_cpu" in ctx else ""),
        f"- CPU frequency scaling: {'on' if scaling else 'off' if scaling is not None else 'unknown'}",
        f"- Load average at start: {', '.join(f'{x:.2f}' for x in load)}" if load else
        "- Load average at start: unknown",
        f"- OS: {platform.system()} {platform.release()}",
        f"- Source: git {source}",
        f"- Google Benchmark library build: {ctx.get('library_build_type', 'unknown')} "
        "(the benchmark framework's own build type, not tensordict's)",
        f"- Date: {ctx.get('date') or _dt.datetime.now().astimezone().isoformat(timespec='seconds')}",
        "",
        "Regenerate with:",
        "",
        "```sh",
        command,
        "```",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    command = regenerate_command(argv)
    worst = 0.0
    sources = [(b.resolve(), None) for b in args.binaries]
    sources += [(None, f.resolve()) for f in args.from_json]
    for binary, saved in sources:
        if saved is not None:
            doc = json.loads(saved.read_text())
            doc.pop("ratios", None)
            report = doc.get("report", {})
            run_command = report.get("command", command)
            source = report.get("source", "unknown")
            exe = doc.get("context", {}).get("executable")
            binary = Path(exe) if exe else saved
            name = args.name or saved.stem
            reps = max((b.get("repetitions", 1) for b in doc.get("benchmarks", [])), default=1)
            args.repetitions = reps
            if reps > 1 and not any(b.get("run_type") == "iteration"
                                    for b in doc.get("benchmarks", [])):
                args.statistic = "median"  # saved with aggregates only
        else:
            name = report_name(binary, args.name)
            doc = run_with_peers(binary, name, args) if args.peer else run_binary(binary, args)
            run_command, source = command, args.source or source_revision()
        doc["report"] = {"command": run_command, "source": source, "metric": args.metric,
                         "repetitions": args.repetitions, "statistic": args.statistic}
        ratios, unpaired = pair(measured(doc, args.statistic), args.metric)
        if args.statistic != "median":
            by_median = {r["name"]: r for r in pair(measured(doc, "median"), args.metric)[0]}
            for r in ratios:
                m = by_median.get(r["name"])
                r["median_ratio"] = m["ratio"] if m else None
                r["median_tensordict_ns"] = m["tensordict_ns"] if m else None
        doc["ratios"] = ratios
        doc["peer_rows"] = peer_rows(measured(doc, args.statistic), args.metric)
        json_path = args.out_dir / f"{name}.json"
        md_path = args.out_dir / f"{name}.md"
        json_path.write_text(json.dumps(doc, indent=2) + "\n")
        md_path.write_text(markdown(name, binary, doc, ratios, unpaired, args, run_command,
                                    source))
        print(f"run.py: wrote {json_path} and {md_path}", file=sys.stderr)
        width = max((len(r["name"]) for r in ratios), default=0)
        for r in ratios:
            vs = "".join(f"  vs {PEERS[p]} {r[f'vs_{p}']:7.1f}x" for p in PEERS
                         if f"vs_{p}" in r)
            print(f"  {r['name']:<{width}}  {fmt_ns(r['tensordict_ns']):>9} ns  "
                  f"floor {fmt_ns(r['floor_ns']):>9} ns  ratio {r['ratio']:6.2f}x{vs}")
            worst = max(worst, r["ratio"])
        for r in paired_in_run(doc):
            print(f"  {r['run_name']}  ratio of the sums {r['ratio_of_sums']:.2f}x, "
                  f"median ratio {r['median_ratio']:.2f}x")
    if args.fail_above is not None and worst > args.fail_above:
        print(f"run.py: a ratio ({worst:.2f}x) exceeds --fail-above {args.fail_above}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
