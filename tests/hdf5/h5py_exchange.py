"""Files exchanged between h5py and tensordict's HDF5 storage (test_hdf5_h5py.cpp).

  h5py_exchange.py write DIR   h5py writes the files the C++ test reads
  h5py_exchange.py check FILE  h5py checks the file the C++ test wrote
  h5py_exchange.py swmr_read FILE / swmr_write FILE
                               the other process of a SWMR writer/reader pair

The values are formulas both sides compute (r = arange(12).reshape(4, 3)).
What Python tensordict itself writes and reads (its non-tensor encodings, its
attributes) is checked against the real library by the interop suite
(tests/python/test_hdf5_interop.cpp); this file keeps what is h5py's alone:
filters, byte orders, element types, SWMR.
"""
import os
import sys
import time

import h5py
import numpy as np


def write(d):
    r = np.arange(12).reshape(4, 3)
    with h5py.File(f"{d}/gzip.h5", "w") as f:
        f.create_dataset("x", data=np.arange(800, dtype=np.float32).reshape(100, 8),
                         compression="gzip", compression_opts=4, shuffle=True, chunks=(10, 8))
        f.create_dataset("g/y", data=np.arange(100, dtype=np.int64), compression="gzip")
        f.create_dataset("g/z", data=np.arange(100) % 2 == 0, chunks=(7,), fletcher32=True)
    with h5py.File(f"{d}/types.h5", "w") as f:
        f["be_f32"] = (r / 3).astype(">f4")
        f["be_i64"] = (r * -5).astype(">i8")
        f["be_f64"] = (r / 7).astype(">f8")
        f["be_i16"] = (r - 3).astype(">i2")
        f["u16"] = (r + 60000).astype(np.uint16)
        f["u32"] = (r + 4000000000).astype(np.uint32)
        f["f16"] = (r / 4).astype(np.float16)
        f["bool"] = r % 2 == 1
        f["c64"] = (r + 1j * r).astype(np.complex64)
        f["c128"] = (r / 3 - 2j * r).astype(np.complex128)
        f["nt/s"] = "hello h5py"  # no __tensordict_str__ mark: a string of another tool
        f["nt/fixed"] = np.bytes_("fixed")
    with h5py.File(f"{d}/unsupported.h5", "w") as f:
        f["ok"] = np.zeros(4, dtype=np.float32)
        f["u64"] = np.arange(4, dtype=np.uint64)
        f.create_dataset("enum", data=np.arange(4, dtype=np.int8),
                         dtype=h5py.enum_dtype({"RED": 0, "GREEN": 1, "BLUE": 2, "X": 3}, basetype="i1"))
        f.create_dataset("vlen", (4,), dtype=h5py.vlen_dtype(np.int32))


def check(path):
    r = np.arange(12).reshape(4, 3)
    with h5py.File(path, "r") as f:
        expect = {
            "bool": r % 3 == 0,
            "u8": (r + 250).astype(np.uint8),
            "i8": (r - 6).astype(np.int8),
            "i16": (r * -300).astype(np.int16),
            "i32": (r * 100000).astype(np.int32),
            "i64": (r * 10**10).astype(np.int64),
            "f16": (r.astype(np.float32) / 4).astype(np.float16),
            "f32": r.astype(np.float32) / np.float32(3),
            "f64": r / 7,
            "c64": (r + -1j * r).astype(np.complex64),
            "c128": (r / 3 + 1j * r).astype(np.complex128),
            "nested/c": r.astype(np.int16),
            "nested/deeper/z": r % 2 == 0,
        }
        for key, want in expect.items():
            got = f[key][()]
            assert got.dtype == want.dtype, (key, got.dtype, want.dtype)
            assert got.shape == want.shape, (key, got.shape, want.shape)
            assert np.array_equal(got, want), (key, got, want)
        # h5py's own element types: bool is the enum, complex the {r, i} compound.
        t = f["bool"].id.get_type()
        assert t.get_class() == h5py.h5t.ENUM and t.get_nmembers() == 2, t
        assert {t.get_member_name(i): t.get_member_value(i) for i in range(2)} == {b"FALSE": 0, b"TRUE": 1}
        assert t.get_super().get_size() == 1 and t.get_super().get_sign() == h5py.h5t.SGN_2
        assert f["c64"].id.get_type().get_class() == h5py.h5t.COMPOUND
        assert f["f32"].id.get_type().get_order() == h5py.h5t.ORDER_LE
        # No attribute but the mark Python tensordict puts on its strings (h5py's bool).
        seen = []
        f.visititems(lambda name, obj: seen.append((name, dict(obj.attrs))))
        assert all(not attrs for name, attrs in seen if name != "text"), seen
        assert dict(f["text"].attrs) == {"__tensordict_str__": True}, dict(f["text"].attrs)
        assert f["text"].attrs["__tensordict_str__"].dtype == np.dtype("bool")
        # A string: UTF-8, variable length, scalar.
        s = f["text"]
        assert h5py.check_string_dtype(s.dtype).encoding == "utf-8" and s.shape == ()
        assert s[()] == "a string!".encode(), s[()]
        # Creation options reach nested datasets.
        for key in ("f32", "nested/c", "nested/deeper/z"):
            d = f[key]
            assert d.compression == "gzip" and d.compression_opts == 9, (key, d.compression)
            assert d.chunks[0] == 2 and d.shuffle and d.fletcher32, (key, d.chunks)
        assert f["text"].chunks is None
    print("h5py read", path, "as expected")


# SWMR: the other process of a single-writer / many-readers pair. `path` is
# the file; `path.ready` is created once this side is set up, so the C++ side
# starts writing (or reading) only then. N rows: x[i] = i + 1, y[i] = x[i] / 2.
SWMR_ROWS = 40


def wait_for(path, what, timeout=60.0):
    start = time.monotonic()
    while not os.path.exists(path):
        if time.monotonic() - start > timeout:
            raise SystemExit("timed out waiting for " + what)
        time.sleep(0.005)


def swmr_read(path):
    """Reads while C++ writes; fails unless it saw some rows before others."""
    wait_for(path + ".writing", "the C++ writer")
    with h5py.File(path, "r", libver="latest", swmr=True) as f:
        x, y = f["x"], f["y"]
        open(path + ".ready", "w").close()
        seen = set()
        start = time.monotonic()
        while True:
            x.refresh()
            y.refresh()
            xs, ys = x[()], y[()]
            written = int((xs != 0).sum())
            # Each dataset's rows are whole; SWMR orders nothing across
            # datasets, so x[i] may show before y[i].
            for i in range(len(xs)):
                if xs[i] not in (0, i + 1):
                    raise SystemExit("x[%d] is %r" % (i, xs[i]))
                if not ((ys[i] == 0).all() or (ys[i] == (i + 1) / 2).all()):
                    raise SystemExit("y[%d] is torn or wrong: %r" % (i, ys[i]))
            seen.add(written)
            if written == SWMR_ROWS:
                break
            if time.monotonic() - start > 60:
                raise SystemExit("timed out: %d of %d rows seen" % (written, SWMR_ROWS))
            time.sleep(0.002)
    if len(seen) < 3:
        raise SystemExit("the reader saw no rows being written: %r" % sorted(seen))
    print("h5py SWMR reader saw", len(seen), "states")


def swmr_write(path):
    """Writes rows one by one (flushing each) while C++ reads."""
    with h5py.File(path, "w", libver="latest") as f:
        # Chunked, as SWMR writers make them: a reader that opened a
        # contiguous dataset before its storage was allocated (late
        # allocation) never sees the data (HDF5 1.10.8).
        x = f.create_dataset("x", shape=(SWMR_ROWS,), dtype="<i8", chunks=(8,))
        y = f.create_dataset("y", shape=(SWMR_ROWS, 4), dtype="<f4", chunks=(8, 4))
        f.swmr_mode = True
        open(path + ".writing", "w").close()
        wait_for(path + ".ready", "the C++ reader")
        for i in range(SWMR_ROWS):
            y[i] = np.full(4, (i + 1) / 2, dtype="<f4")
            x[i] = i + 1
            f.flush()
            time.sleep(0.01)


if __name__ == "__main__":
    {"write": write, "check": check, "swmr_read": swmr_read, "swmr_write": swmr_write}[
        sys.argv[1]
    ](sys.argv[2])
