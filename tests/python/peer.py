"""The real Python tensordict on the other side of the interop suite
(tests/python/test_*.cpp, ctest -L python). One process per suite and
direction, because importing torch takes seconds:

  peer.py version                 prints tensordict's and torch's versions
  peer.py SUITE write DIR         writes every Python case of SUITE into
                                  DIR/<case>/ (the storage under test, plus
                                  DIR/<case>/truth/, see truth.py)
  peer.py SUITE check DIR         reads every case C++ wrote into DIR/<case>/
                                  with tensordict, checks it against its truth
                                  and writes DIR/results.json: {case: "OK" or
                                  what differs}

A suite is the module SUITE_cases.py beside this file, with
  python_cases()           {name: function(case_dir)} writing the case
  check_cpp_case(name, case_dir)   raising AssertionError on a difference
Either may use the helpers of truth.py.
"""
import importlib
import json
import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main(argv):
    if argv[1] == "version":
        import tensordict
        import torch

        print(f"tensordict {tensordict.__version__} torch {torch.__version__}")
        return 0
    suite, action, directory = argv[1], argv[2], argv[3]
    cases = importlib.import_module(f"{suite}_cases")
    results = {}
    if action == "write":
        for name, write in cases.python_cases().items():
            case_dir = os.path.join(directory, name)
            os.makedirs(case_dir, exist_ok=True)
            try:
                write(case_dir)
                results[name] = "OK"
            except Exception:  # reported to the C++ case that reads it
                results[name] = traceback.format_exc()
    elif action == "check":
        for name in sorted(os.listdir(directory)):
            case_dir = os.path.join(directory, name)
            if not os.path.isdir(case_dir):
                continue
            try:
                cases.check_cpp_case(name, case_dir)
                results[name] = "OK"
            except Exception:
                results[name] = traceback.format_exc()
    else:
        print(f"peer.py: unknown action {action}")
        return 2
    with open(os.path.join(directory, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
