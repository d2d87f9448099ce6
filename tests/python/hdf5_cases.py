"""HDF5 files both ways (test_hdf5_interop.cpp), run by peer.py.

Each case directory holds data.h5 (the file under test) and truth/ (truth.py).

Python -> C++: python_cases() writes the files with the real
PersistentTensorDict (from_dict, to_h5, h5py's create_dataset keywords).
Some cases also record what Python itself does with the file (python.json),
for the C++ test to pin a difference, or what Python refuses (refused.json).

C++ -> Python: check_cpp_case() opens each file with
PersistentTensorDict.from_h5 and compares to_tensordict() with the truth,
after checking what 0.15.3 gives for non-tensors (a string that tensordict
wrote is bytes, marked by an attribute; numbers come back as numpy values).
For cpp_rows it then writes rows and a leaf in place and records the result
in truth_after/, which C++ reads back.
"""
import json
import os
import warnings

import h5py
import numpy as np
import torch
from tensordict import NonTensorData, NonTensorStack, PersistentTensorDict, TensorDict

from truth import check_truth, write_truth

# The attributes 0.15.3 puts on the datasets it writes.
STR_ATTR = "__tensordict_str__"
STACK_ATTR = "__tensordict_stack__"


def values(dtype, shape, offset=0):
    """Distinctive values of `dtype`: signs, fractions, NaN, -0.0 and inf
    where the dtype holds them."""
    n = 1
    for d in shape:
        n *= d
    i = torch.arange(n, dtype=torch.int64) + offset
    if dtype.is_complex:
        real = i.double() / 3 - 1
        t = torch.complex(real, -real * 2).to(dtype)
    elif dtype.is_floating_point:
        t = (i.double() / 3 - 1).to(dtype)
        if offset == 0:
            special = [float("nan"), -0.0, float("inf"), -float("inf")]
            t[: min(n, 4)] = torch.tensor(special[: min(n, 4)], dtype=torch.float64).to(dtype)
    elif dtype == torch.bool:
        t = i % 3 == 0
    elif dtype == torch.int64:
        t = i * 3_000_000_000_017 - 5_000_000_000_000
    else:
        info = torch.iinfo(dtype)
        t = ((i * 37 - 50) % (info.max - info.min + 1) + info.min).to(dtype)
    return t.reshape(shape)


DTYPES = [torch.float16, torch.float32, torch.float64, torch.complex64, torch.complex128,
          torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]


# ---- the content of each case (the same names as test_hdf5_interop.cpp) --------------


def dtypes_td():
    # alternating shapes [4, 3] and [4], so that from_h5 infers the batch size [4]
    return TensorDict({str(d).split(".")[1]: values(d, (4, 3) if i % 2 else (4,))
                       for i, d in enumerate(DTYPES)}, batch_size=[4])


def nested_td():
    deep = TensorDict({"y": values(torch.float64, (3, 4, 2))}, batch_size=[3, 4, 2])
    inner = TensorDict({"x": values(torch.int32, (3, 4)), "deep": deep}, batch_size=[3, 4])
    return TensorDict({"t": values(torch.float32, (3,)), "n": inner}, batch_size=[3])


def gzip_td():
    inner = TensorDict({"z": values(torch.int16, (100, 3))}, batch_size=[100])
    return TensorDict({"x": values(torch.float32, (100, 3)), "y": values(torch.int64, (100, 3)),
                       "b": values(torch.bool, (100, 3)), "g": inner}, batch_size=[100])


def non_tensors_td():
    td = TensorDict({"t": values(torch.float32, (3,)),
                     "g": TensorDict({"t2": values(torch.int64, (3,))}, batch_size=[3])},
                    batch_size=[3])
    td["s"] = NonTensorData("héllo ✓ h5")
    td["n"] = NonTensorData(7)
    td["x"] = NonTensorData(2.5)
    td["flag"] = NonTensorData(True)
    td["lst"] = NonTensorData([1, 2, 3])
    td["words"] = NonTensorData(["a", "bc"])
    td["g", "name"] = NonTensorData("inner")
    return td


def stacks_td():
    td = TensorDict({"t": values(torch.float32, (3,))}, batch_size=[3])
    td["words"] = NonTensorStack("a", "bé", "ccc")
    td["ints"] = NonTensorStack(1, -2, 3)
    td["flags"] = NonTensorStack(True, False, True)
    td["reals"] = NonTensorStack(0.5, 1.5, -2.25)
    return td


def stacks_2d_td():
    td = TensorDict({"t": values(torch.int32, (2, 2, 3))}, batch_size=[2, 2])
    td["grid"] = NonTensorStack(NonTensorStack("a", "b"), NonTensorStack("c", "d"))
    return td


def scalars_td():
    return TensorDict({"a": torch.tensor(1.25), "b": torch.tensor(-7), "v": values(torch.int8, (5,))},
                      batch_size=[])


def batch_given_td():
    # The tensors share [2, 3]: from_h5 would infer [2, 3], the file is opened with [2].
    return TensorDict({"a": values(torch.float32, (2, 3)), "b": values(torch.int64, (2, 3, 4))},
                      batch_size=[2])


def rows_td():
    # tensors only: h5py refuses chunks=True for the scalar dataset of a non-tensor
    return TensorDict({"obs": values(torch.float32, (6, 3)), "act": values(torch.int64, (6,)),
                       "nested": TensorDict({"r": values(torch.float64, (6,))}, batch_size=[6])},
                      batch_size=[6])


ROW_INDEX = [4, 1, 4]  # unsorted, with a repeat


def exchange_td():
    """The file whose rows the other side writes (py_rows, cpp_rows)."""
    td = TensorDict({"obs": values(torch.float32, (5, 3)), "act": values(torch.int64, (5,)),
                     "nested": TensorDict({"r": values(torch.float64, (5, 2))}, batch_size=[5])},
                    batch_size=[5])
    td["s"] = NonTensorData("label")
    return td


def python_rows(td):
    """The row writes and in-place leaf update Python makes on a cpp_rows file
    (and on its in-memory copy): td[i] = row, td[idx] = rows, a leaf set_."""
    f64 = torch.float64
    td[1] = TensorDict({"obs": torch.full((3,), 10.5), "act": torch.tensor(11),
                        "nested": TensorDict({"r": torch.tensor([12.0, 13.0], dtype=f64)}, [])},
                       [])
    td[[0, 3]] = TensorDict({"obs": torch.full((2, 3), -1.0), "act": torch.tensor([-2, -3]),
                             "nested": TensorDict({"r": torch.full((2, 2), -4.0, dtype=f64)}, [2])},
                            [2])
    td.set_("act", td.get("act") * 100 + 1)
    td.set_(("nested", "r"), torch.arange(10, dtype=torch.float64).reshape(5, 2))


# ---- Python -> C++ ------------------------------------------------------------------


def _write(td, case_dir, **kwargs):
    out = PersistentTensorDict.from_dict(td, os.path.join(case_dir, "data.h5"), **kwargs)
    out.close()
    write_truth(td, os.path.join(case_dir, "truth"))


def _to_h5(td, case_dir, **kwargs):
    td.to_h5(os.path.join(case_dir, "data.h5"), **kwargs).close()
    write_truth(td, os.path.join(case_dir, "truth"))


def _gzip(case_dir):
    td = gzip_td()
    _write(td, case_dir, compression="gzip", compression_opts=6, shuffle=True, chunks=(7, 3))
    with h5py.File(os.path.join(case_dir, "data.h5"), "r") as f:
        for key in ("x", "y", "b", "g/z"):
            d = f[key]
            assert d.compression == "gzip" and d.compression_opts == 6 and d.shuffle, key
            assert d.chunks == (7, 3), (key, d.chunks)


def _python_json(case_dir, **what):
    with open(os.path.join(case_dir, "python.json"), "w") as f:
        json.dump(what, f)


def _scalar_non_tensor(case_dir):
    # A number non-tensor is a scalar opaque dataset, which 0.15.3's from_h5
    # counts as a 0-d array: it infers [] for the root.
    td = TensorDict({"t": values(torch.float32, (3, 2)), "u": values(torch.int64, (3,))},
                    batch_size=[3])
    td["n"] = NonTensorData(5)
    _write(td, case_dir)
    back = PersistentTensorDict.from_h5(os.path.join(case_dir, "data.h5"))
    _python_json(case_dir, inferred_batch_size=list(back.batch_size))
    back.close()


def unsigned_td():
    return TensorDict({"u16": torch.tensor([0, 1, 60000, 65535]).to(torch.uint16),
                       "u32": torch.tensor([0, 1, 4_000_000_000, 4_294_967_295]).to(torch.uint32)},
                      batch_size=[4])


def u64_td():
    # -1 and -7 as uint64: values above 2**63
    return TensorDict({"u64": torch.tensor([1, -1, 0, -7]).view(torch.uint64)}, batch_size=[4])


def _unsigned(case_dir):
    td = unsigned_td()
    out = PersistentTensorDict.from_dict(td, os.path.join(case_dir, "data.h5"))
    back = out.to_tensordict()
    out.close()
    _python_json(case_dir, dtypes={k: str(v.dtype) for k, v in back.items()})
    write_truth(td, os.path.join(case_dir, "truth"))
    # What a LibTorch before 2.3 reads: the same values, widened to the next signed dtype.
    write_truth(TensorDict({"u16": td["u16"].to(torch.int32), "u32": td["u32"].to(torch.int64)},
                           batch_size=[4]), os.path.join(case_dir, "truth_widened"))
    u64 = u64_td()
    PersistentTensorDict.from_dict(u64, os.path.join(case_dir, "u64.h5")).close()
    write_truth(u64, os.path.join(case_dir, "truth_u64"))


def _refused(case_dir):
    refused = {}
    for name, dtype in (("bfloat16", torch.bfloat16), ("complex32", torch.complex32)):
        path = os.path.join(case_dir, name + ".h5")
        try:
            td = TensorDict({"x": torch.zeros(3, dtype=dtype)}, batch_size=[3])
            PersistentTensorDict.from_dict(td, path).close()
            refused[name] = None
        except TypeError as err:
            refused[name] = {"error": "TypeError", "message": str(err)}
    # h5py refuses filters on the scalar dataset of a non-tensor
    td = TensorDict({"x": values(torch.float32, (100, 3))}, batch_size=[100])
    td["s"] = NonTensorData("compressed beside")
    try:
        PersistentTensorDict.from_dict(td, os.path.join(case_dir, "gzip_non_tensor.h5"),
                                       compression="gzip").close()
        refused["gzip_non_tensor"] = None
    except TypeError as err:
        refused["gzip_non_tensor"] = {"error": "TypeError", "message": str(err)}
    with open(os.path.join(case_dir, "refused.json"), "w") as f:
        json.dump(refused, f)


def _groups_without_tensors(case_dir):
    # from_h5 in 0.15.3: IndexError for a group of non-tensors only, and [] for
    # the parent of an empty group (and the group).
    inferred = {}
    for name, inner in (("non_tensor_group", TensorDict({"s": NonTensorData("only")}, [3])),
                        ("empty_group", TensorDict({}, [3]))):
        td = TensorDict({"t": values(torch.float32, (3,)), "g": inner}, batch_size=[3])
        PersistentTensorDict.from_dict(td, os.path.join(case_dir, name + ".h5")).close()
        write_truth(td, os.path.join(case_dir, "truth_" + name))
        try:
            back = PersistentTensorDict.from_h5(os.path.join(case_dir, name + ".h5"))
            inferred[name] = {"root": list(back.batch_size), "g": list(back["g"].batch_size)}
            back.close()
        except IndexError:
            inferred[name] = "IndexError"
    _python_json(case_dir, inferred=inferred)


def _bytes_stack(case_dir):
    # bytes elements are an opaque |S array; they read here as strings
    td = TensorDict({"t": values(torch.float32, (2,))}, batch_size=[2])
    td["k"] = NonTensorStack(b"ab", b"c")
    PersistentTensorDict.from_dict(td, os.path.join(case_dir, "data.h5")).close()
    back = PersistentTensorDict.from_h5(os.path.join(case_dir, "data.h5"))
    _python_json(case_dir, elements=[type(v).__name__ for v in back["k"].tolist()])
    back.close()
    read_here = TensorDict({"t": td["t"]}, batch_size=[2])
    read_here["k"] = NonTensorStack("ab", "c")
    write_truth(read_here, os.path.join(case_dir, "truth"))


def _row_reads(case_dir):
    td = rows_td()
    _write(td, case_dir, chunks=True)
    write_truth(td[ROW_INDEX], os.path.join(case_dir, "truth_rows"))


def python_cases():
    return {
        "dtypes": lambda d: _write(dtypes_td(), d),
        "nested": lambda d: _to_h5(nested_td(), d),
        "gzip_chunked": _gzip,
        "non_tensors": lambda d: _write(non_tensors_td(), d),
        "stacks": lambda d: _to_h5(stacks_td(), d),
        "stacks_2d": lambda d: _write(stacks_2d_td(), d),
        "scalars": lambda d: _write(scalars_td(), d),
        "batch_given": lambda d: _write(batch_given_td(), d),
        "row_reads": _row_reads,
        "scalar_non_tensor": _scalar_non_tensor,
        "unsigned": _unsigned,
        "refused": _refused,
        "groups_without_tensors": _groups_without_tensors,
        "bytes_stack": _bytes_stack,
        "py_rows": lambda d: _write(exchange_td(), d),
    }


# ---- C++ -> Python ------------------------------------------------------------------

# The batch size each case is opened with (from_h5 infers the others): the
# chunks of gzip_chunked make every dataset [100, 3]; a number non-tensor
# makes 0.15.3 infer [] (see _scalar_non_tensor). C++ opens the same way.
OPEN_BATCH = {"gzip_chunked": [100], "gzip_non_tensor": [100], "non_tensors": [3], "batch_given": [2], "py_rows": [5],
              "cpp_rows": [5]}


def _plain(value):
    """A non-tensor as 0.15.3 reads it, as the JSON value truth.py holds."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def _normalized(td, f, prefix=()):
    """td with its non-tensors as JSON values, after checking that each string
    that C++ wrote is marked as tensordict marks the strings it writes (and
    so reads as bytes in 0.15.3)."""
    out = td.empty()
    for key in td.keys():
        value = td._get_str(key, None)
        path = "/".join(prefix + (key,))
        if isinstance(value, NonTensorStack):
            node = f[path]
            assert list(node.attrs[STACK_ATTR]) == list(value.batch_size), (path, dict(node.attrs))
            out[key] = value
        elif isinstance(value, NonTensorData):
            data = value.data
            if isinstance(data, bytes):
                assert f[path].attrs.get(STR_ATTR) is not None, f"{path}: no {STR_ATTR} attribute"
                assert bool(f[path].attrs[STR_ATTR]), path
                data = data.decode()
            out[key] = NonTensorData(_plain(data), batch_size=value.batch_size)
        elif isinstance(value, TensorDict):
            out[key] = _normalized(value, f, prefix + (key,))
        else:
            out[key] = value
    return out


def _read_checked(path, truth_dir, batch_size):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # 0.15.3: "strings will be str in 0.17"
        h5 = PersistentTensorDict.from_h5(path, batch_size=batch_size)
        try:
            td = h5.to_tensordict()
        finally:
            h5.close()
    with h5py.File(path, "r") as f:
        # No attribute other than 0.15.3's own: no batch size, no names.
        for name, obj in [("/", f)] + [(n, f[n]) for n in _walk(f)]:
            extra = set(obj.attrs) - {STR_ATTR, STACK_ATTR}
            assert not extra, f"{name}: attributes {sorted(extra)}"
        td = _normalized(td, f)
    check_truth(td, truth_dir)
    return td


def _walk(f):
    names = []
    f.visit(names.append)
    return names


def check_cpp_case(name, case_dir):
    path = os.path.join(case_dir, "data.h5")
    batch = OPEN_BATCH.get(name)
    if name == "row_reads":
        h5 = PersistentTensorDict.from_h5(path)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                rows = h5[ROW_INDEX].to_tensordict()
        finally:
            h5.close()
        check_truth(_normalized_rows(rows), os.path.join(case_dir, "truth_rows"))
        return
    _read_checked(path, os.path.join(case_dir, "truth"), batch)
    if name == "gzip_chunked":
        with h5py.File(path, "r") as f:
            for key in ("x", "y", "b", "g/z"):
                d = f[key]
                assert d.compression == "gzip" and d.compression_opts == 6, (key, d.compression)
                assert d.shuffle and d.chunks == (7, 3), (key, d.shuffle, d.chunks)
    elif name == "unsigned":
        _read_checked(os.path.join(case_dir, "u64.h5"), os.path.join(case_dir, "truth_u64"), None)
        with h5py.File(path, "r") as f:
            assert f["u16"].dtype == np.dtype("<u2") and f["u32"].dtype == np.dtype("<u4")
    elif name == "gzip_non_tensor":
        with h5py.File(path, "r") as f:
            assert f["x"].compression == "gzip" and f["x"].chunks == (7, 3), f["x"].chunks
            for key in ("s", "n"):
                assert f[key].compression is None and f[key].chunks is None, key
    elif name == "non_tensors":
        with h5py.File(path, "r") as f:
            assert h5py.check_string_dtype(f["s"].dtype).encoding == "utf-8"
            assert f["n"].dtype == np.dtype("<i8") and h5py.check_opaque_dtype(f["n"].dtype)
        inferred = PersistentTensorDict.from_h5(path)
        # 0.15.3 counts the scalar number as a 0-d array (see _scalar_non_tensor)
        assert list(inferred.batch_size) == [], inferred.batch_size
        inferred.close()
    elif name == "cpp_rows":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            expected = _read_checked(path, os.path.join(case_dir, "truth"), [5])
            h5 = PersistentTensorDict.from_h5(path, mode="r+", batch_size=[5])
            python_rows(h5)
            python_rows(expected)
            h5.close()
        write_truth(expected, os.path.join(case_dir, "truth_after"))


def _normalized_rows(td):
    for key in list(td.keys()):
        value = td._get_str(key, None)
        if isinstance(value, NonTensorData) and isinstance(value.data, bytes):
            td[key] = NonTensorData(value.data.decode(), batch_size=value.batch_size)
    return td
