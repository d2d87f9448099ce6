#!/usr/bin/env python3
"""clang-tidy, with the committed .clang-tidy, over every library, example,
benchmark and tool source that BUILD_DIR compiles (its compile_commands.json);
fails on any finding (issue #33; the CTest style.clang_tidy runs it). Test and
fuzz sources are compiled with GCC's precompiled header, which clang cannot
read, and are not checked.

A file is not checked again when its compile command, every file it includes
(the contents of the project's own, the size of the others, from the build's
dependency files), the clang-tidy version and .clang-tidy all match an
earlier clean check: clean results are cached, as ccache caches objects, in
$TENSORDICT_TIDY_CACHE (default ~/.cache/tensordict-clang-tidy). A file that is
not built yet (no dependency file) is always checked.

  python3 scripts/run_clang_tidy.py --build-dir build [--jobs N] [--clang-tidy PATH]
"""
import argparse
import concurrent.futures
import hashlib
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHECKED_DIRS = ("src/", "examples/", "benchmarks/", "tools/")
# GCC options in the build's commands that clang does not know: dropped from
# the commands clang-tidy reads.
GCC_ONLY_FLAGS = ("-fno-ipa-icf",)
OWN_DIRS = ("include", "src", "examples", "tests", "benchmarks", "tools")


def dependencies(build_dir: Path, entry: dict) -> list[str] | None:
    """The files the object of `entry` was built from (its .d file), or None."""
    output = entry.get("output")
    if not output:
        return None
    # CMake names the output from the top of the build for targets in
    # subdirectories (examples/, benchmarks/), whose commands run below it.
    for base in (Path(entry["directory"]), build_dir):
        depfile = base / (output + ".d")
        if depfile.is_file():
            break
    else:
        return None
    text = depfile.read_text(errors="replace").replace("\\\n", " ")
    _, _, deps = text.partition(":")
    return shlex.split(deps)


def cache_key(entry: dict, deps: list[str], tool: str, config: bytes) -> str:
    """Paths count relative to the checkout (a fresh clone elsewhere hits the same
    entries); the project's own files by content, the others (LibTorch, the
    system) by size, since a fresh clone installs them anew."""
    root = str(ROOT)
    h = hashlib.sha256()
    h.update(tool.encode())
    h.update(config)
    command = entry.get("command") or " ".join(entry.get("arguments", []))
    h.update(command.replace(root, "<root>").encode())
    for dep in sorted(set(deps)):
        path = (Path(entry["directory"]) / dep).resolve()
        h.update(str(path).replace(root, "<root>").encode())
        try:
            if path.is_relative_to(ROOT) and path.relative_to(ROOT).parts[0] in OWN_DIRS:
                h.update(path.read_bytes())
            else:
                h.update(str(path.stat().st_size).encode())
        except OSError:
            h.update(b"missing")
    return h.hexdigest()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-dir", required=True, type=Path)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--clang-tidy", default="clang-tidy")
    args = ap.parse_args()
    build_dir = args.build_dir.resolve()
    commands = build_dir / "compile_commands.json"
    if not commands.is_file():
        print(f"run_clang_tidy: {commands} is missing (configure with "
              "CMAKE_EXPORT_COMPILE_COMMANDS=ON, the project's default)", file=sys.stderr)
        return 2
    version = subprocess.run([args.clang_tidy, "--version"], capture_output=True, text=True,
                             check=True).stdout
    config = (ROOT / ".clang-tidy").read_bytes()
    cache = Path(os.environ.get("TENSORDICT_TIDY_CACHE",
                                Path.home() / ".cache" / "tensordict-clang-tidy"))
    cache.mkdir(parents=True, exist_ok=True)

    # The commands as clang-tidy reads them: GCC-only options dropped.
    all_entries = json.loads(commands.read_text())
    for entry in all_entries:
        for flag in GCC_ONLY_FLAGS:
            if "command" in entry:
                entry["command"] = entry["command"].replace(" " + flag, "")
            if "arguments" in entry:
                entry["arguments"] = [a for a in entry["arguments"] if a != flag]
    tidy_db = build_dir / "clang-tidy"
    tidy_db.mkdir(exist_ok=True)
    (tidy_db / "compile_commands.json").write_text(json.dumps(all_entries))

    entries, seen = [], set()
    for entry in all_entries:
        source = Path(entry["directory"], entry["file"]).resolve()
        rel = source.relative_to(ROOT).as_posix() if ROOT in source.parents else None
        command = entry.get("command") or " ".join(entry.get("arguments", []))
        if "cmake_pch" in command:  # GCC's precompiled header: clang cannot read it
            continue
        if rel and rel.startswith(CHECKED_DIRS) and rel not in seen:
            seen.add(rel)
            entries.append((rel, entry))

    def check(item):
        rel, entry = item
        deps = dependencies(build_dir, entry)
        key = cache_key(entry, deps, version, config) if deps else None
        if key and (cache / key).exists():
            return rel, True, ""
        run = subprocess.run([args.clang_tidy, "-p", str(tidy_db), "--quiet", str(ROOT / rel)],
                             capture_output=True, text=True, cwd=ROOT)
        findings = "\n".join(line for line in run.stdout.splitlines()
                             if ": warning: " in line or ": error: " in line)
        if run.returncode == 0 and not findings:
            if key:
                (cache / key).touch()
            return rel, False, ""
        if run.returncode < 0:
            return rel, False, f"{rel}: clang-tidy died of signal {-run.returncode}\n{run.stderr}"
        return rel, False, f"{rel}:\n{run.stdout}{run.stderr}"

    failed, cached = [], 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for rel, was_cached, report in pool.map(check, entries):
            cached += was_cached
            if report:
                failed.append(rel)
                print(report)
    print(f"run_clang_tidy: {len(entries)} files, {cached} clean in the cache, "
          f"{len(entries) - cached} checked, {len(failed)} with findings")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
