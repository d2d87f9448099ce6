// tensordict-inspect PATH [--json] [--max-values N]
//
// Prints the tree of a saved tensordict (a memmap directory written by this
// library or by Python tensordict, an HDF5 file when built with the HDF5
// component, a Redis store at redis://host:port/<td_id> or
// unix://<socket>/<td_id> when built with the Redis component): keys, shapes, dtypes, batch sizes
// and non-tensor values, in Python's repr layout. With --json, prints a machine-readable form with
// the values of small leaves (at most N elements, default 64) and the sum of larger ones, so other
// programs can check what was read.
#include <tensordict/tensordict.h>
#ifdef TENSORDICT_INSPECT_HDF5
#include <tensordict/storage/hdf5.h>
#endif
#ifdef TENSORDICT_INSPECT_REDIS
#include <tensordict/storage/redis.h>
#endif

#include <ATen/ATen.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>

namespace td = tensordict;
using json = nlohmann::ordered_json;

namespace {

json tensor_values(const at::Tensor& t) {
  at::Tensor c = t.detach().cpu();
  if (c.dim() == 0) {
    if (c.is_complex())
      return json::array({at::real(c).item<double>(), at::imag(c).item<double>()});
    if (c.scalar_type() == at::kBool) return c.item<bool>();
    if (c.is_floating_point()) return c.item<double>();
    // uint64 values past 2^63 do not fit item<int64_t>(): the same bits, read
    // back as unsigned.
    if (td::dtype_to_string(c.scalar_type()) == "torch.uint64")
      return static_cast<std::uint64_t>(c.to(at::kLong).item<int64_t>());
    return c.item<int64_t>();
  }
  json out = json::array();
  for (int64_t i = 0; i < c.size(0); ++i) out.push_back(tensor_values(c[i]));
  return out;
}

json describe(const td::TensorDictBase& data, int64_t max_values) {
  json out;
  out["type"] = data.type_name();
  out["batch_size"] = data.batch_size().vec();
  out["device"] = data.device() ? data.device()->str() : "None";
  if (data.is<td::LazyStackedTensorDict>()) {
    // Members may differ (keys, shapes): describe each one.
    auto stack = data.as<td::LazyStackedTensorDict>();
    out["stack_dim"] = stack.stack_dim();
    json members = json::array();
    for (const auto& m : stack.tensordicts()) members.push_back(describe(m, max_values));
    out["members"] = members;
    return out;
  }
  json entries = json::object();
  for (const auto& [key, value] : data.items()) {
    const std::string& k = key.front();
    switch (value.kind()) {
      case td::EntryKind::Tensor: {
        const at::Tensor& t = value.tensor();
        json e;
        e["kind"] = "tensor";
        e["shape"] = t.sizes().vec();
        e["dtype"] = td::dtype_to_string(t.scalar_type());
        if (t.numel() <= max_values) {
          e["values"] = tensor_values(t);
        } else if (t.is_complex()) {
          // Summed in complex128: LibTorch has no sum for complex32.
          at::Tensor s = t.to(at::kComplexDouble).sum();
          e["sum"] = json::array({at::real(s).item<double>(), at::imag(s).item<double>()});
        } else {
          e["sum"] = t.to(at::kDouble).sum().item<double>();
        }
        entries[k] = e;
        break;
      }
      case td::EntryKind::TensorDict:
        entries[k] = describe(value.tensordict(), max_values);
        entries[k]["kind"] = "tensordict";
        break;
      case td::EntryKind::NonTensor:
      case td::EntryKind::NonTensorStack: {
        const bool stack = value.is_non_tensor_stack();
        json e;
        e["kind"] = stack ? "non_tensor_stack" : "non_tensor";
        e["batch_size"] = stack ? value.non_tensor_stack().batch_size().vec()
                                : value.non_tensor().batch_size().vec();
        const nlohmann::json data =
            stack ? value.non_tensor_stack().tolist() : value.non_tensor().data();
        e["data"] = json::parse(data.dump());
        entries[k] = e;
        break;
      }
    }
  }
  out["entries"] = entries;
  return out;
}

int usage(const char* argv0) {
  std::cerr << "usage: " << argv0 << " PATH [--json] [--max-values N]\n"
            << "Prints the tree of a saved tensordict (memmap directory"
#ifdef TENSORDICT_INSPECT_HDF5
            << ", HDF5 file"
#endif
#ifdef TENSORDICT_INSPECT_REDIS
            << ", redis://host:port/<td_id> or unix://<socket>/<td_id> store"
#endif
            << ").\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string path;
  bool as_json = false;
  int64_t max_values = 64;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--json"))
      as_json = true;
    else if (!std::strcmp(argv[i], "--max-values") && i + 1 < argc)
      max_values = std::stoll(argv[++i]);
    else if (!std::strcmp(argv[i], "-h") || !std::strcmp(argv[i], "--help"))
      return usage(argv[0]), 0;
    else if (path.empty() && argv[i][0] != '-')
      path = argv[i];
    else
      return usage(argv[0]);
  }
  if (path.empty()) return usage(argv[0]);
  try {
    td::TensorDictBase data;
    const auto ext = std::filesystem::path(path).extension();
    if (path.starts_with("redis://") || path.starts_with("unix://")) {
#ifdef TENSORDICT_INSPECT_REDIS
      td::storage::Redis where = td::redis::parse_url(path);
      if (where.td_id.empty())
        throw td::ValueError("tensordict-inspect: '" + path + "' names no td_id");
      data = td::redis::from_store(where);
#else
      throw td::ValueError("tensordict-inspect: built without the Redis component");
#endif
    } else if (std::filesystem::is_regular_file(path) || ext == ".h5" || ext == ".hdf5") {
      // A file (or a name ending .h5/.hdf5) is an HDF5 file, batch sizes
      // inferred as from_h5.
#ifdef TENSORDICT_INSPECT_HDF5
      data = td::PersistentTensorDict::from_h5(path, "r");
#else
      throw td::ValueError("tensordict-inspect: '" + path +
                           "' is a file; HDF5 files need the HDF5 component");
#endif
    } else {
      // A value Python pickled is shown as its marker rather than refused.
      data = td::load_memmap(path,
                             td::LoadOptions{.writable = false, .pickled_values_as_markers = true});
    }
    if (as_json)  // keys are UTF-8 (the loaders refuse others); replace any that is not
      std::cout << describe(data, max_values).dump(2, ' ', false, json::error_handler_t::replace)
                << "\n";
    else
      std::cout << data << "\n";
  } catch (const td::Error& e) {
    std::cerr << "tensordict-inspect: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    // Not a refused input but a defect of this tool or the library: said so,
    // never an abort.
    std::cerr << "tensordict-inspect: internal error (please report it): " << e.what() << "\n";
    return 2;
  }
  return 0;
}
