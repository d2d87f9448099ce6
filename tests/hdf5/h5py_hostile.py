"""Hostile HDF5 files for test_hdf5_hostile.cpp, written with h5py.

  h5py_hostile.py write DIR             writes the files below into DIR
  h5py_hostile.py hold FILE READY GO    opens FILE read-write (HDF5 takes its
                                        lock), creates READY, waits for GO,
                                        then closes FILE

Every file is valid HDF5; what makes it hostile is its structure: link
cycles, shared groups, NULL dataspaces, shapes no memory holds, data in other
files, strings that are not UTF-8.
"""
import os
import sys
import time

import h5py
import numpy as np


def write(d):
    r = np.arange(6, dtype=np.float32)
    # A group holding a hard link to itself, and one to the root.
    with h5py.File(f"{d}/loop.h5", "w") as f:
        f["a/x"] = r
        f["a/loop"] = f["a"]
    with h5py.File(f"{d}/rootloop.h5", "w") as f:
        f["x"] = r
        f["a/up"] = f["/"]
    with h5py.File(f"{d}/softloop.h5", "w") as f:
        f["a/x"] = r
        f["a/b/up"] = h5py.SoftLink("/a")
    # 40 levels, each linking the next twice: 2^40 paths in a few KB.
    with h5py.File(f"{d}/dag.h5", "w") as f:
        g = f.create_group("l0")
        g["x"] = r
        for i in range(1, 40):
            h = f.create_group(f"l{i}")
            h["x"] = r
            h["p"] = g
            h["q"] = g
            g = h
    # A group linked twice (not a cycle): read as two copies, as h5py does.
    with h5py.File(f"{d}/shared.h5", "w") as f:
        f["a/x"] = r
        f["b"] = f["a"]
    # Groups nested 600 deep.
    with h5py.File(f"{d}/deep.h5", "w") as f:
        f["/".join(["g"] * 600) + "/x"] = r
    # NULL dataspaces (h5py.Empty): a number and a string.
    with h5py.File(f"{d}/null.h5", "w") as f:
        f["ok"] = r
        f.create_dataset("null", data=h5py.Empty("f4"))
        f.create_dataset("null_str", data=h5py.Empty(h5py.string_dtype()))
    # Shapes no memory holds, declared in a few bytes (nothing written).
    with h5py.File(f"{d}/huge.h5", "w") as f:
        f["ok"] = r
        f.create_dataset("overflow", (2**62, 4), dtype="f4")  # 2^66 bytes
        f.create_dataset("terabytes", (2**40,), dtype="f4")
        f.create_dataset("strings", (2**40,), dtype=h5py.string_dtype())
        f.create_dataset("empty_rows", (2**40, 0), dtype=h5py.string_dtype())
        f.create_dataset("opaque", (2**40,), dtype=h5py.opaque_dtype(np.dtype("<i8")))
        s = f.create_dataset("stack_attr", data=np.array(["a", "b"], dtype=object),
                             dtype=h5py.string_dtype())
        s.attrs["__tensordict_stack__"] = np.zeros(1000, dtype=np.int64)
        s = f.create_dataset("stack_negative", data=np.array(["a", "b"], dtype=object),
                             dtype=h5py.string_dtype())
        s.attrs["__tensordict_stack__"] = np.array([-2], dtype=np.int64)
    # Data or links that lead to other files.
    with h5py.File(f"{d}/external.h5", "w") as f:
        f["ok"] = r
        f.create_dataset("raw", (10,), dtype="f4", external=[("/dev/zero", 0, 40)])
        f["elink"] = h5py.ExternalLink("fifo", "/")
        f["through"] = h5py.SoftLink("/elink/x")  # a soft link through the external link
        f["dangling"] = h5py.SoftLink("/nowhere")
    # Strings that are not UTF-8.
    with h5py.File(f"{d}/utf8.h5", "w") as f:
        f["ok"] = r
        f.create_dataset("latin1", data=np.array([b"caf\xe9"], dtype=object),
                         dtype=h5py.string_dtype("ascii"))
        f["fixed"] = np.bytes_(b"\xff\xfe")
        # numpy's str of one code point past U+10FFFF, as an opaque "NUMPY:<U1".
        tid = h5py.h5t.create(h5py.h5t.OPAQUE, 4)
        tid.set_tag(b"NUMPY:<U1")
        sid = h5py.h5s.create(h5py.h5s.SCALAR)
        did = h5py.h5d.create(f.id, b"code_point", tid, sid)
        did.write(h5py.h5s.ALL, h5py.h5s.ALL, np.array([0x110000], dtype="<u4"), mtype=tid)
        # Tags whose item size is not the type's 4 bytes (2^32 - 1 characters,
        # or none): not what numpy wrote.
        for name, tag in ((b"huge_tag", b"NUMPY:<U4294967295"), (b"empty_tag", b"NUMPY:<U0")):
            tid = h5py.h5t.create(h5py.h5t.OPAQUE, 4)
            tid.set_tag(tag)
            did = h5py.h5d.create(f.id, name, tid, h5py.h5s.create(h5py.h5s.SCALAR))
            did.write(h5py.h5s.ALL, h5py.h5s.ALL, np.array([0x41], dtype="<u4"), mtype=tid)


def hold(path, ready, go):
    with h5py.File(path, "r+"):
        open(ready, "w").close()
        deadline = time.time() + 60
        while not os.path.exists(go) and time.time() < deadline:
            time.sleep(0.01)


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write(sys.argv[2])
    elif sys.argv[1] == "hold":
        hold(*sys.argv[2:5])
    else:
        sys.exit(f"unknown mode {sys.argv[1]}")
