#include "python/peer.h"

#include <tensordict/dtype.h>
#include <tensordict/non_tensor.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include <unistd.h>

namespace td = tensordict;

namespace td_python {

namespace {

std::string tensor_bytes(const at::Tensor& t) {
  const at::Tensor c = t.detach().cpu().contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), c.nbytes());
}

nlohmann::json key_json(const td::NestedKey& key) {
  nlohmann::json parts = nlohmann::json::array();
  for (const auto& p : key.parts()) parts.push_back(p);
  return parts;
}

}  // namespace

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

fs::path fresh_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("td-python-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string quoted(const fs::path& path) { return "'" + path.string() + "'"; }

PeerRun run_peer(const std::string& args, const fs::path& log) {
  const std::string cmd = std::string(TENSORDICT_PYTHON) + " " + TENSORDICT_PEER_SCRIPT + " " +
                          args + " > " + quoted(log) + " 2>&1";
  const int rc = std::system(cmd.c_str());
  return {rc, read_file(log)};
}

nlohmann::json run_suite(const std::string& suite, const std::string& action, const fs::path& dir) {
  const PeerRun run = run_peer(suite + " " + action + " " + quoted(dir),
                               dir.parent_path() / (dir.filename().string() + ".log"));
  EXPECT_EQ(run.rc, 0) << "peer.py " << suite << " " << action << ":\n" << run.out;
  if (run.rc != 0) return nlohmann::json::object();
  return nlohmann::json::parse(read_file(dir / "results.json"));
}

// Distinctive values (memmap_cases.py's values(), written again here):
// signs, fractions, NaN, -0.0, infinities, and values above 2^63.
at::Tensor distinctive_values(at::ScalarType dtype, std::vector<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  const at::Tensor i = torch::arange(n, torch::kLong);
  at::Tensor t;
  if (at::isComplexType(dtype)) {
    const at::Tensor real = i.to(torch::kDouble) / 3 - 1;
    t = torch::complex(real, -real * 2).to(dtype);
  } else if (at::isFloatingType(dtype)) {
    t = (i.to(torch::kDouble) / 3 - 1).to(dtype);
    const double special[] = {std::nan(""), -0.0, INFINITY, -INFINITY};
    for (int64_t k = 0; k < std::min<int64_t>(n, 4); ++k) t[k] = special[k];
  } else if (dtype == torch::kBool) {
    t = i % 3 == 0;
  } else if (dtype == torch::kUInt64) {
    t = (i * 7919 - 40).view(torch::kUInt64);
  } else if (dtype == torch::kUInt16 || dtype == torch::kUInt32) {
    t = ((i * 40503) % (1 << 16)).to(dtype);
  } else if (dtype == torch::kLong) {
    t = i * 3000000000017 - 5000000000000;
  } else {
    const int64_t bits = at::elementSize(dtype) * 8;
    const int64_t lo = -(int64_t{1} << (bits - 1)), range = int64_t{1} << bits;
    t = (torch::remainder(i * 37 - 50, range) + lo).to(dtype);
  }
  return t.reshape(shape);
}

void write_truth(const td::TensorDictBase& data, const fs::path& dir) {
  fs::create_directories(dir);
  nlohmann::json entries = nlohmann::json::array();
  int n = 0;
  for (const auto& [key, value] : data.items(/*include_nested=*/true, /*leaves_only=*/false)) {
    nlohmann::json e{{"key", key_json(key)}};
    if (value.is_tensor()) {
      const at::Tensor& t = value.tensor();
      e["kind"] = "tensor";
      e["dtype"] = td::dtype_to_string(t.scalar_type());
      e["shape"] = t.sizes().vec();
      e["file"] = std::to_string(n) + ".bin";
      std::ofstream(dir / e["file"].get<std::string>(), std::ios::binary) << tensor_bytes(t);
    } else if (value.is_tensordict()) {
      e["kind"] = "tensordict";
      e["batch_size"] = value.tensordict().batch_size();
    } else if (value.is_non_tensor()) {
      e["kind"] = "non_tensor";
      e["value"] = value.non_tensor().data();
    } else {
      e["kind"] = "non_tensor_stack";
      e["value"] = value.non_tensor_stack().tolist();
    }
    entries.push_back(std::move(e));
    ++n;
  }
  std::ofstream(dir / "manifest.json")
      << nlohmann::json{{"batch_size", data.batch_size()}, {"entries", entries}}.dump();
}

::testing::AssertionResult matches_truth(const td::TensorDictBase& data, const fs::path& dir) {
  const nlohmann::json truth = nlohmann::json::parse(read_file(dir / "manifest.json"));
  if (nlohmann::json(data.batch_size()) != truth["batch_size"])
    return ::testing::AssertionFailure() << "batch_size " << nlohmann::json(data.batch_size())
                                         << ", expected " << truth["batch_size"];
  std::map<nlohmann::json, nlohmann::json> want;
  for (const auto& e : truth["entries"]) want[e["key"]] = e;
  std::map<nlohmann::json, td::Value> got;
  for (auto& [key, value] : data.items(true, false)) got.emplace(key_json(key), std::move(value));
  nlohmann::json got_keys = nlohmann::json::array(), want_keys = nlohmann::json::array();
  for (const auto& [k, v] : got) got_keys.push_back(k);
  for (const auto& [k, v] : want) want_keys.push_back(k);
  if (got_keys != want_keys)
    return ::testing::AssertionFailure() << "keys " << got_keys << ", expected " << want_keys;
  for (const auto& [k, e] : want) {
    const td::Value& value = got.at(k);
    const std::string kind = e["kind"];
    const char* got_kind = value.is_tensor()       ? "tensor"
                           : value.is_tensordict() ? "tensordict"
                           : value.is_non_tensor() ? "non_tensor"
                                                   : "non_tensor_stack";
    if (kind != got_kind)
      return ::testing::AssertionFailure() << k << ": a " << got_kind << ", expected a " << kind;
    if (kind == "tensor") {
      const at::Tensor& t = value.tensor();
      if (td::dtype_to_string(t.scalar_type()) != e["dtype"] ||
          nlohmann::json(t.sizes().vec()) != e["shape"])
        return ::testing::AssertionFailure() << k << ": " << t.scalar_type() << " " << t.sizes()
                                             << ", expected " << e["dtype"] << " " << e["shape"];
      if (!t.device().is_cpu())
        return ::testing::AssertionFailure() << k << ": on " << t.device() << ", expected cpu";
      if (tensor_bytes(t) != read_file(dir / e["file"].get<std::string>()))
        return ::testing::AssertionFailure() << k << ": values " << t << " differ from the truth";
    } else if (kind == "tensordict") {
      if (nlohmann::json(value.tensordict().batch_size()) != e["batch_size"])
        return ::testing::AssertionFailure()
               << k << ": batch_size " << nlohmann::json(value.tensordict().batch_size())
               << ", expected " << e["batch_size"];
    } else {
      const nlohmann::json v =
          kind == "non_tensor" ? value.non_tensor().data() : value.non_tensor_stack().tolist();
      if (v != e["value"])
        return ::testing::AssertionFailure() << k << ": " << v << ", expected " << e["value"];
    }
  }
  return ::testing::AssertionSuccess();
}

td::TensorDict zeros_like_truth(const fs::path& dir) {
  const nlohmann::json truth = nlohmann::json::parse(read_file(dir / "manifest.json"));
  td::TensorDict out({}, truth["batch_size"].get<std::vector<int64_t>>());
  for (const auto& e : truth["entries"]) {
    const td::NestedKey key(e["key"].get<std::vector<std::string>>());
    const std::string kind = e["kind"];
    if (kind == "tensor")
      out.set(key, torch::zeros(e["shape"].get<std::vector<int64_t>>(),
                                td::dtype_from_string(e["dtype"])));
    else if (kind == "tensordict")
      out.set(key, td::TensorDict({}, e["batch_size"].get<std::vector<int64_t>>()));
    else if (kind == "non_tensor")
      out.set_non_tensor(key, e["value"]);
    else
      out.set_non_tensor_stack(key, e["value"]);
  }
  return out;
}

::testing::AssertionResult peer_ok(const nlohmann::json& results, const std::string& name) {
  if (!results.contains(name))
    return ::testing::AssertionFailure() << "the Python peer reported nothing for " << name;
  if (results[name] != "OK")
    return ::testing::AssertionFailure() << "the Python peer on " << name << ":\n"
                                         << results[name].get<std::string>();
  return ::testing::AssertionSuccess();
}

}  // namespace td_python
