// Files exchanged with plain h5py (the project's Python environment), both
// directions: h5py writes files (gzip, chunked, big-endian, strings of other
// tools, unsupported types) that the storage reads; the storage writes a file
// h5py checks (tests/hdf5/h5py_exchange.py holds h5py's side); SWMR and file
// locking across processes. What Python tensordict itself writes and reads is
// checked with the real library in tests/python/test_hdf5_interop.cpp.
#include "support/core_test_helpers.h"
#include "support/typed_test_helpers.h"

#include <tensordict/storage/hdf5.h>

#include <torch/version.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <set>
#include <thread>

namespace {

namespace td = tensordict;
using namespace torch::indexing;
using td_test::expect_message_contains;

int run_h5py(const std::string& mode, const std::string& arg) {
  const std::string cmd =
      std::string(TENSORDICT_PYTHON) + " " + TD_H5PY_SCRIPT + " " + mode + " '" + arg + "'";
  return std::system(cmd.c_str());
}

struct H5py : ::testing::Test {
  td_test::TempDir dir{"td_h5py"};
  void SetUp() override { std::filesystem::create_directories(dir.path); }
};

TEST_F(H5py, ReadsGzipChunkedFiles) {
  ASSERT_EQ(run_h5py("write", dir.str()), 0);
  auto h5 = td::PersistentTensorDict::from_h5(dir.str("gzip.h5"));
  EXPECT_EQ(h5.batch_size().vec(), (std::vector<int64_t>{100}));
  auto x = torch::arange(800, torch::kFloat).view({100, 8});
  EXPECT_TRUE(h5.get("x").equal(x));
  auto idx = torch::tensor({57, 3, 57, 99});
  EXPECT_TRUE(h5.index({idx}).get("x").equal(x.index({idx})));
  EXPECT_TRUE(h5.index({Slice(5, 95, 11)}).get({"g", "y"}).equal(torch::arange(5, 95, 11)));
  EXPECT_TRUE(h5.get({"g", "z"}).equal(torch::arange(100).remainder(2).eq(0)));
  // Writes through the filters, read back by a second handle.
  h5.close();  // HDF5 refuses to open a file read-only and read-write at once
  {
    auto rw = td::PersistentTensorDict::from_h5(dir.str("gzip.h5"), "r+");
    rw.index_put_({idx}, torch::tensor(-1));
  }
  auto again = td::PersistentTensorDict::from_h5(dir.str("gzip.h5"));
  EXPECT_TRUE(again.get("x").index({idx}).eq(-1).all().item<bool>());
  EXPECT_EQ(again.get("x")[0].sum().item<float>(), x[0].sum().item<float>());
}

TEST_F(H5py, ReadsEveryElementTypeBigEndianIncluded) {
  ASSERT_EQ(run_h5py("write", dir.str()), 0);
  auto h5 = td::PersistentTensorDict::from_h5(dir.str("types.h5"));
  auto r = torch::arange(12).view({4, 3});
  auto rd = r.to(torch::kDouble);
  EXPECT_TRUE(h5.get("be_f32").equal((rd / 3).to(torch::kFloat)));
  EXPECT_TRUE(h5.get("be_i64").equal(r * -5));
  EXPECT_TRUE(h5.get("be_f64").equal(rd / 7));
  EXPECT_TRUE(h5.get("be_i16").equal((r - 3).to(torch::kShort)));
  EXPECT_TRUE(h5[2].get("be_f32").equal((rd[2] / 3).to(torch::kFloat)));  // row read too
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
  // LibTorch's uint16/uint32, as Python tensordict reads them.
  EXPECT_EQ(h5.get("u16").scalar_type(), torch::kUInt16);
  EXPECT_EQ(h5.get("u32").scalar_type(), torch::kUInt32);
  EXPECT_TRUE(h5.get("u16").to(torch::kLong).equal(r + 60000));
  EXPECT_TRUE(h5.get("u32").to(torch::kLong).equal(r + int64_t{4000000000}));
#else
  // LibTorch before 2.3 has no uint16/uint32: widened to int32/int64.
  EXPECT_TRUE(h5.get("u16").equal((r + 60000).to(torch::kInt)));
  EXPECT_TRUE(h5.get("u32").equal(r + int64_t{4000000000}));
#endif
  EXPECT_TRUE(h5.get("f16").equal((rd / 4).to(torch::kHalf)));
  EXPECT_TRUE(h5.get("bool").equal(r.remainder(2).eq(1)));
  EXPECT_TRUE(h5.get("c64").equal(torch::complex(rd, rd).to(torch::kComplexFloat)));
  EXPECT_TRUE(h5.get("c128").equal(torch::complex(rd / 3, -2 * rd)));
  // Strings of another tool (no __tensordict_str__ mark) are strings too;
  // Python tensordict's own encodings: tests/python/test_hdf5_interop.cpp.
  EXPECT_EQ(h5.get_non_tensor({"nt", "s"}), "hello h5py");
  EXPECT_EQ(h5.get_non_tensor({"nt", "fixed"}), "fixed");
  // A group of non-tensors only takes its parent's batch size (Python raises
  // IndexError) and does not constrain the parent's.
  EXPECT_EQ(h5.batch_size().vec(), (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(h5.get_tensordict("nt").batch_size().vec(), (std::vector<int64_t>{4, 3}));
}

TEST_F(H5py, UnsupportedTypesAreNamedErrors) {
  ASSERT_EQ(run_h5py("write", dir.str()), 0);
  auto h5 = td::PersistentTensorDict::from_h5(dir.str("unsupported.h5"));
  EXPECT_EQ(h5.keys().size(), 4u);
  EXPECT_TRUE(h5.get("ok").equal(torch::zeros({4})));
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
  EXPECT_TRUE(h5.get("u64").to(torch::kLong).equal(torch::arange(4)));  // LibTorch's uint64
  for (const char* key : {"enum", "vlen"}) {
#else
  for (const char* key : {"u64", "enum", "vlen"}) {
#endif
    try {
      (void)h5.at(key);
      FAIL() << key << " read";
    } catch (const td::Error& e) {
      expect_message_contains(e.what(), {"unsupported.h5", key, "unsupported element type"});
    }
  }
}

TEST_F(H5py, ChecksWhatWeWrite) {
  auto r = torch::arange(12).view({4, 3});
  auto rf = r.to(torch::kFloat);
  td::TensorDict nested({{"c", r.to(torch::kShort)},
                         {"deeper", td::TensorDict({{"z", r.remainder(2).eq(0)}}, {4, 3})}},
                        {4});
  td::TensorDict src({{"bool", r.remainder(3).eq(0)},
                      {"u8", (r + 250).to(torch::kByte)},
                      {"i8", (r - 6).to(torch::kChar)},
                      {"i16", (r * -300).to(torch::kShort)},
                      {"i32", (r * 100000).to(torch::kInt)},
                      {"i64", r * int64_t{10000000000}},
                      {"f16", (rf / 4).to(torch::kHalf)},
                      {"f32", rf / 3},
                      {"f64", r.to(torch::kDouble) / 7},
                      {"c64", torch::complex(rf, -rf)},
                      {"c128", torch::complex(r.to(torch::kDouble) / 3, r.to(torch::kDouble))},
                      {"nested", nested}},
                     {4});
  src.set_non_tensor("text", "a string!");
  td::H5DatasetOptions options;
  options.chunks = {2};
  options.gzip = 9;
  options.shuffle = true;
  options.fletcher32 = true;
  td::to_h5(src, dir.str("ours.h5"), options).close();
  EXPECT_EQ(run_h5py("check", dir.str("ours.h5")), 0);
}

// HDF5's file locking across processes: readers share a file, a writer has
// it alone (the other process is h5py, a separate program on the same file).
TEST_F(H5py, FileLockingAcrossProcesses) {
  const std::string f = dir.str("locked.h5");
  td::to_h5(td::TensorDict({{"x", torch::arange(10)}}, {10}), f).close();
  const std::string read = std::string(TENSORDICT_PYTHON) +
                           " -c \"import h5py, sys; h5py.File(sys.argv[1], 'r')['x'][3]\" '" + f +
                           "' 2>/dev/null";
  {
    auto reader = td::PersistentTensorDict::from_h5(f, "r");
    EXPECT_EQ(std::system(read.c_str()), 0) << "a second reader was refused";
    EXPECT_EQ(reader[3].get("x").item<int64_t>(), 3);
  }
  {
    auto writer = td::PersistentTensorDict::from_h5(f, "r+");
    EXPECT_NE(std::system(read.c_str()), 0) << "a reader opened a file open for writing";
  }
  EXPECT_EQ(std::system(read.c_str()), 0);
}

// SWMR (single writer, many readers) across processes, h5py on the other
// side both ways: every row the writer flushed is seen by the reader while
// the writer still writes; without SWMR the reader would be locked out.
constexpr int64_t kSwmrRows = 40;  // SWMR_ROWS in h5py_exchange.py

bool wait_for_file(const std::string& path) {
  for (int i = 0; i < 6000 && !std::filesystem::exists(path); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return std::filesystem::exists(path);
}

TEST_F(H5py, SwmrWriterHereReaderInH5py) {
  const std::string f = dir.str("swmr.h5");
  td::Schema schema{{"x", {{}, torch::kInt64}}, {"y", {{4}, torch::kFloat32}}};
  td::storage::H5 h5{.filename = f};
  h5.swmr = true;
  auto writer = td::from_schema(schema, {kSwmrRows}, h5);
  EXPECT_TRUE(writer.swmr_mode());
  auto reader = std::async(std::launch::async, [&] { return run_h5py("swmr_read", f); });
  std::ofstream(f + ".writing").close();
  ASSERT_TRUE(wait_for_file(f + ".ready")) << "the h5py reader did not open the file";
  for (int64_t i = 0; i < kSwmrRows; ++i) {
    const float half = static_cast<float>(i + 1) / 2;
    writer.index_put_(
        {i}, td::TensorDict({{"x", torch::tensor(i + 1)}, {"y", torch::full({4}, half)}}, {}));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(reader.get(), 0);
  // Structure is fixed while SWMR writing (HDF5's rule): a clear error, nothing changed.
  TD_EXPECT_THROW_MSG(writer.set("z", torch::zeros({kSwmrRows})), td::StorageError, "SWMR writing");
  TD_EXPECT_THROW_MSG(writer.del_("x"), td::StorageError, "SWMR writing");
  EXPECT_EQ(writer.keys().size(), 2u);
}

TEST_F(H5py, SwmrWriterInH5pyReaderHere) {
  const std::string f = dir.str("swmr_py.h5");
  auto writer = std::async(std::launch::async, [&] { return run_h5py("swmr_write", f); });
  ASSERT_TRUE(wait_for_file(f + ".writing")) << "the h5py writer did not start";
  td::H5OpenOptions o;
  o.mode = "r";
  o.swmr = true;
  auto reader = td::PersistentTensorDict::open(f, o);
  EXPECT_TRUE(reader.swmr_mode());
  std::ofstream(f + ".ready").close();
  std::set<int64_t> states;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  int64_t written = 0;
  while (written < kSwmrRows && std::chrono::steady_clock::now() < deadline) {
    auto rows = reader.index({Slice()});  // one selection per dataset, refreshed first
    at::Tensor x = rows.get("x"), y = rows.get("y");
    written = x.ne(0).sum().item<int64_t>();
    // Each dataset's rows are whole; SWMR orders nothing across datasets.
    for (int64_t i = 0; i < kSwmrRows; ++i) {
      const int64_t v = x[i].item<int64_t>();
      ASSERT_TRUE(v == 0 || v == i + 1) << "x[" << i << "] = " << v;
      ASSERT_TRUE(y[i].eq(0).all().item<bool>() ||
                  y[i].equal(torch::full({4}, static_cast<float>(i + 1) / 2)))
          << "y[" << i << "] = " << y[i];
    }
    states.insert(written);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_EQ(written, kSwmrRows);
  EXPECT_GE(states.size(), 3u) << "the reader saw no rows being written";
  EXPECT_EQ(writer.get(), 0);
  auto all = reader.to_tensordict();  // after the writer closed: every row, both datasets
  EXPECT_TRUE(all.get("x").equal(torch::arange(1, kSwmrRows + 1)));
  EXPECT_TRUE(all.get("y").equal(
      (torch::arange(1, kSwmrRows + 1, torch::kFloat32) / 2).unsqueeze(1).expand({kSwmrRows, 4})))
      << all.get("y");
}

TEST_F(H5py, SwmrNeedsAFileCreatedForIt) {
  const std::string f = dir.str("plain.h5");
  td::to_h5(td::TensorDict({{"x", torch::arange(4)}}, {4}), f).close();
  td::H5OpenOptions o;
  o.mode = "r+";
  o.swmr = true;
  TD_EXPECT_THROW_MSG(td::PersistentTensorDict::open(f, o), td::FormatError, "swmr");
  auto plain = td::PersistentTensorDict::from_h5(f, "r+");
  TD_EXPECT_THROW_MSG(plain.start_swmr_write(), td::StorageError, "swmr = true");
  EXPECT_FALSE(plain.swmr_mode());
  EXPECT_TRUE(plain.get("x").equal(torch::arange(4)));
}

}  // namespace
