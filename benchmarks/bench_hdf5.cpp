// The HDF5 storage (PersistentTensorDict) next to its floor: the same work
// written by hand with the HDF5 C API (datasets opened once, one hyperslab
// selection and one H5Dread/H5Dwrite per dataset). Naming as in
// bench_core.cpp: BM_<op>/<variant>. Files go to $TENSORDICT_BENCH_DIR
// (default: the system temp dir).
#include <benchmark/benchmark.h>
#include <hdf5.h>
#include <tensordict/storage/hdf5.h>
#include <tensordict/tensordict.h>
#include <torch/torch.h>
#include "bench_main.h"

#include <sys/resource.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

namespace fs = std::filesystem;
namespace td = tensordict;

namespace {

constexpr int64_t kRows = 10000;

fs::path bench_dir() {
  const char* env = std::getenv("TENSORDICT_BENCH_DIR");
  fs::path p = env ? fs::path(env) : fs::temp_directory_path() / "tensordict-bench";
  fs::create_directories(p);
  return p;
}

// 10 leaves over two levels, the shapes of an RL transition.
td::TensorDict transitions(double offset = 0) {
  auto r = torch::arange(kRows, torch::kDouble) + offset;
  td::TensorDict next({{"obs", (r.unsqueeze(1) + torch::arange(8)).to(torch::kFloat)},
                       {"reward", r.to(torch::kFloat)},
                       {"done", r.remainder(2).to(torch::kBool)}},
                      {kRows});
  return td::TensorDict(
      {{"obs", (r.unsqueeze(1) + torch::arange(8)).to(torch::kFloat)},
       {"action", r.unsqueeze(1).expand({kRows, 4}).to(torch::kFloat)},
       {"reward", r.to(torch::kFloat)},
       {"done", r.remainder(3).eq(0)},
       {"step", r.to(torch::kLong)},
       {"id", r.unsqueeze(1).expand({kRows, 2}).to(torch::kInt)},
       {"pixels", r.unsqueeze(1).expand({kRows, 3}).remainder(256).to(torch::kByte)},
       {"next", next}},
      {kRows});
}

std::string file_path() { return (bench_dir() / "bench_hdf5.h5").string(); }

// The file, written once per process by the storage (h5py's layout).
const std::string& data_file() {
  static const std::string f = [] {
    td::to_h5(transitions(), file_path()).close();
    return file_path();
  }();
  return f;
}

// The floor's state: every dataset opened once, its file dataspace and the
// memory type of its dtype kept, as a careful hand-written program does.
struct RawFile {
  struct Leaf {
    hid_t dset, space, mem_type;
    std::vector<hsize_t> dims;
    torch::ScalarType dtype;
  };
  hid_t file = -1;
  std::vector<Leaf> leaves;
  hid_t bool_type = -1;
  explicit RawFile(const std::string& name, unsigned flags) {
    file = H5Fopen(name.c_str(), flags, H5P_DEFAULT);
    bool_type = H5Tenum_create(H5T_NATIVE_INT8);
    signed char v = 0;
    H5Tenum_insert(bool_type, "FALSE", &v);
    v = 1;
    H5Tenum_insert(bool_type, "TRUE", &v);
    const std::pair<const char*, torch::ScalarType> names[] = {
        {"action", torch::kFloat},     {"done", torch::kBool},      {"id", torch::kInt},
        {"obs", torch::kFloat},        {"pixels", torch::kByte},    {"reward", torch::kFloat},
        {"step", torch::kLong},        {"next/done", torch::kBool}, {"next/obs", torch::kFloat},
        {"next/reward", torch::kFloat}};
    for (const auto& [n, dtype] : names) {
      Leaf l;
      l.dset = H5Dopen2(file, n, H5P_DEFAULT);
      l.space = H5Dget_space(l.dset);
      l.dims.resize(static_cast<std::size_t>(H5Sget_simple_extent_ndims(l.space)));
      H5Sget_simple_extent_dims(l.space, l.dims.data(), nullptr);
      l.dtype = dtype;
      l.mem_type = dtype == torch::kFloat  ? H5T_NATIVE_FLOAT
                   : dtype == torch::kBool ? bool_type
                   : dtype == torch::kInt  ? H5T_NATIVE_INT32
                   : dtype == torch::kByte ? H5T_NATIVE_UINT8
                                           : H5T_NATIVE_INT64;
      leaves.push_back(l);
    }
  }
  ~RawFile() {
    for (auto& l : leaves) {
      H5Sclose(l.space);
      H5Dclose(l.dset);
    }
    H5Tclose(bool_type);
    H5Fclose(file);
  }
  // Selects rows [start, start + count) of a leaf.
  static void select(Leaf& l, hsize_t start, hsize_t count, H5S_seloper_t op = H5S_SELECT_SET) {
    std::vector<hsize_t> s(l.dims.size(), 0), c(l.dims);
    s[0] = start;
    c[0] = count;
    H5Sselect_hyperslab(l.space, op, s.data(), nullptr, c.data(), nullptr);
  }
  static hid_t memspace(const Leaf& l, hsize_t rows) {
    std::vector<hsize_t> c(l.dims);
    c[0] = rows;
    return H5Screate_simple(static_cast<int>(c.size()), c.data(), nullptr);
  }
  // A memory dataspace of one row of each leaf, made once.
  std::vector<hid_t> row_memspaces() const {
    std::vector<hid_t> mem;
    for (const auto& l : leaves) {
      std::vector<hsize_t> c(l.dims.begin() + 1, l.dims.end());
      mem.push_back(c.empty() ? H5Screate(H5S_SCALAR)
                              : H5Screate_simple(static_cast<int>(c.size()), c.data(), nullptr));
    }
    return mem;
  }
  static std::vector<int64_t> shape(const Leaf& l, int64_t rows) {
    std::vector<int64_t> s(l.dims.begin(), l.dims.end());
    s[0] = rows;
    return s;
  }
};

std::vector<int64_t> random_rows(int64_t n, int seed) {
  std::vector<int64_t> out;
  uint64_t x = 0x9E3779B97F4A7C15ULL * static_cast<uint64_t>(seed + 1);
  for (int64_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    out.push_back(static_cast<int64_t>(x % kRows));
  }
  return out;
}

// ---- one row of 10 leaves -----------------------------------------------------

void BM_h5_row_read_td(benchmark::State& state) {
  auto h5 = td::PersistentTensorDict::from_h5(data_file());
  auto rows = random_rows(1024, 1);
  std::size_t i = 0;
  for (auto _ : state) {
    td::TensorDictBase row = h5[rows[i++ % rows.size()]];
    benchmark::DoNotOptimize(row);
  }
}

void BM_h5_row_read_floor(benchmark::State& state) {
  (void)data_file();
  RawFile f(file_path(), H5F_ACC_RDONLY);
  std::vector<hid_t> mem = f.row_memspaces();
  auto rows = random_rows(1024, 1);
  std::size_t i = 0;
  for (auto _ : state) {
    const auto r = static_cast<hsize_t>(rows[i++ % rows.size()]);
    std::vector<torch::Tensor> out;
    out.reserve(f.leaves.size());
    for (std::size_t k = 0; k < f.leaves.size(); ++k) {
      auto& l = f.leaves[k];
      RawFile::select(l, r, 1);
      std::vector<int64_t> s(l.dims.begin() + 1, l.dims.end());
      torch::Tensor t = torch::empty(s, torch::TensorOptions().dtype(l.dtype));
      H5Dread(l.dset, l.mem_type, mem[k], l.space, H5P_DEFAULT, t.data_ptr());
      out.push_back(std::move(t));
    }
    benchmark::DoNotOptimize(out);
  }
  for (hid_t m : mem) H5Sclose(m);
}

void BM_h5_row_write_td(benchmark::State& state) {
  (void)data_file();
  auto h5 = td::PersistentTensorDict::from_h5(file_path(), "r+");
  td::TensorDict row = transitions(0.5)[7].to_tensordict();
  auto rows = random_rows(1024, 2);
  std::size_t i = 0;
  for (auto _ : state) h5.index_put_({rows[i++ % rows.size()]}, row);
}

void BM_h5_row_write_floor(benchmark::State& state) {
  (void)data_file();
  RawFile f(file_path(), H5F_ACC_RDWR);
  td::TensorDict row = transitions(0.5)[7].to_tensordict();
  const char* names[] = {"action", "done", "id",        "obs",      "pixels",
                         "reward", "step", "next/done", "next/obs", "next/reward"};
  std::vector<torch::Tensor> values;
  std::vector<hid_t> mem = f.row_memspaces();
  for (std::size_t k = 0; k < f.leaves.size(); ++k) {
    std::string n = names[k];
    values.push_back(n.rfind("next/", 0) == 0 ? row.get({"next", n.substr(5)}).contiguous()
                                              : row.get(n).contiguous());
  }
  auto rows = random_rows(1024, 2);
  std::size_t i = 0;
  for (auto _ : state) {
    const auto r = static_cast<hsize_t>(rows[i++ % rows.size()]);
    for (std::size_t k = 0; k < f.leaves.size(); ++k) {
      auto& l = f.leaves[k];
      RawFile::select(l, r, 1);
      H5Dwrite(l.dset, l.mem_type, mem[k], l.space, H5P_DEFAULT, values[k].data_ptr());
    }
  }
  for (hid_t m : mem) H5Sclose(m);
}

// ---- 256 random rows (unsorted, with repeats) of 10 leaves -----------------------

void BM_h5_read_256_random_td(benchmark::State& state) {
  auto h5 = td::PersistentTensorDict::from_h5(data_file());
  std::vector<torch::Tensor> batches;
  batches.reserve(16);
  for (int s = 0; s < 16; ++s) batches.push_back(torch::tensor(random_rows(256, 10 + s)));
  std::size_t i = 0;
  for (auto _ : state) {
    td::TensorDictBase rows = h5.index({batches[i++ % batches.size()]});
    benchmark::DoNotOptimize(rows);
  }
}

// The best hand-written approach: sort and de-duplicate once, one union of
// row runs per dataset, one H5Dread each, index_select back to the order.
void BM_h5_read_256_random_floor(benchmark::State& state) {
  (void)data_file();
  RawFile f(file_path(), H5F_ACC_RDONLY);
  std::vector<std::vector<int64_t>> batches;
  batches.reserve(16);
  for (int s = 0; s < 16; ++s) batches.push_back(random_rows(256, 10 + s));
  std::size_t i = 0;
  for (auto _ : state) {
    const auto& rows = batches[i++ % batches.size()];
    std::vector<int64_t> uniq(rows);
    std::sort(uniq.begin(), uniq.end());
    uniq.erase(std::unique(uniq.begin(), uniq.end()), uniq.end());
    std::vector<int64_t> inverse(rows.size());
    for (std::size_t k = 0; k < rows.size(); ++k)
      inverse[k] = std::lower_bound(uniq.begin(), uniq.end(), rows[k]) - uniq.begin();
    torch::Tensor inv = torch::tensor(inverse);
    std::vector<std::pair<hsize_t, hsize_t>> runs;
    for (int64_t u : uniq) {
      if (!runs.empty() && runs.back().first + runs.back().second == static_cast<hsize_t>(u))
        ++runs.back().second;
      else
        runs.emplace_back(static_cast<hsize_t>(u), 1);
    }
    std::vector<torch::Tensor> out;
    for (auto& l : f.leaves) {
      for (std::size_t k = 0; k < runs.size(); ++k)
        RawFile::select(l, runs[k].first, runs[k].second, k == 0 ? H5S_SELECT_SET : H5S_SELECT_OR);
      hid_t mem = RawFile::memspace(l, uniq.size());
      torch::Tensor t = torch::empty(RawFile::shape(l, static_cast<int64_t>(uniq.size())),
                                     torch::TensorOptions().dtype(l.dtype));
      H5Dread(l.dset, l.mem_type, mem, l.space, H5P_DEFAULT, t.data_ptr());
      H5Sclose(mem);
      out.push_back(t.index_select(0, inv));
    }
    benchmark::DoNotOptimize(out);
  }
}

// ---- from_schema of 1M rows of uint8[3, 64, 64] (12 GB, nothing written) -----------

double peak_rss_mb() {
  struct rusage u {};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

void BM_h5_from_schema_1M_td(benchmark::State& state) {
  td::Schema schema{{"obs", {{3, 64, 64}, torch::kByte}}};
  const std::string f = (bench_dir() / "schema.h5").string();
  for (auto _ : state) {
    auto h5 = td::from_schema(schema, {1'000'000}, td::storage::H5{.filename = f});
    h5.close();
  }
  state.counters["peak_rss_MB"] = peak_rss_mb();
}

void BM_h5_from_schema_1M_floor(benchmark::State& state) {
  const std::string f = (bench_dir() / "schema_floor.h5").string();
  for (auto _ : state) {
    hid_t file = H5Fcreate(f.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t dims[4] = {1'000'000, 3, 64, 64};
    hid_t space = H5Screate_simple(4, dims, nullptr);
    hid_t d = H5Dcreate2(file, "obs", H5T_STD_U8LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dclose(d);
    H5Sclose(space);
    H5Fclose(file);
  }
  state.counters["peak_rss_MB"] = peak_rss_mb();
}

void register_all() {
  static const NamedBench benchmarks[] = {
      {"BM_h5_row_read_10_leaves/tensordict", BM_h5_row_read_td},
      {"BM_h5_row_read_10_leaves/floor", BM_h5_row_read_floor},
      {"BM_h5_row_write_10_leaves/tensordict", BM_h5_row_write_td},
      {"BM_h5_row_write_10_leaves/floor", BM_h5_row_write_floor},
      {"BM_h5_read_256_random_rows/tensordict", BM_h5_read_256_random_td},
      {"BM_h5_read_256_random_rows/floor", BM_h5_read_256_random_floor},
      {"BM_h5_from_schema_1M_rows/tensordict", BM_h5_from_schema_1M_td},
      {"BM_h5_from_schema_1M_rows/floor", BM_h5_from_schema_1M_floor},
  };
  register_min_time(benchmarks, 0.5);
}

}  // namespace

int main(int argc, char** argv) { return run_benchmarks(argc, argv, register_all); }
