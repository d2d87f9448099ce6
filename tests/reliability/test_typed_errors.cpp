// Bad inputs that escaped as raw c10::Error or allocator errors, or crashed
// (issue #19, group 2): each is now a tensordict:: error naming what is wrong.
#include "reliability/reliability.h"

#include <tensordict/tensordict.h>

#include <torch/torch.h>

namespace td = tensordict;
using namespace td_rel;

namespace {

const char* kTdType = "<class 'tensordict._td.TensorDict'>";

// The error must be of the tensordict hierarchy (not a c10::Error or
// std::bad_alloc passing through).
template <class E, class F>
::testing::AssertionResult throws_typed(F&& f, const std::string& needle = "") {
  try {
    f();
  } catch (const E& e) {
    if (!needle.empty() && std::string(e.what()).find(needle) == std::string::npos)
      return ::testing::AssertionFailure() << "message lacks '" << needle << "': " << e.what();
    return ::testing::AssertionSuccess();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "wrong exception type: " << e.what();
  }
  return ::testing::AssertionFailure() << "no exception";
}

}  // namespace

TEST_F(Reliability, OverflowingShapeInMetaJsonIsAFormatError) {
  const fs::path dir = root / "p";
  write_text(dir / "meta.json", std::string("{\"a\": {\"device\": \"cpu\", \"shape\": "
                                            "[4294967296, 4294967296], \"dtype\": "
                                            "\"torch.float32\", \"is_nested\": false}, "
                                            "\"shape\": [], \"device\": \"cpu\", \"_type\": \"") +
                                    kTdType + "\"}");
  write_text(dir / "a.memmap", std::string(16, '\0'));
  EXPECT_TRUE(throws_typed<td::FormatError>([&] { td::load_memmap(dir.string()); }, "int64"));
  // The bytes overflow even where the count does not.
  write_text(dir / "meta.json", std::string("{\"a\": {\"device\": \"cpu\", \"shape\": "
                                            "[4611686018427387904], \"dtype\": "
                                            "\"torch.float64\", \"is_nested\": false}, "
                                            "\"shape\": [], \"device\": \"cpu\", \"_type\": \"") +
                                    kTdType + "\"}");
  EXPECT_TRUE(throws_typed<td::FormatError>([&] { td::load_memmap(dir.string()); }, "int64"));
}

TEST_F(Reliability, OverflowingShapeInASchemaIsASchemaError) {
  td::Schema schema{{"x", td::FieldSpec{{int64_t{1} << 32, int64_t{1} << 32}, at::kFloat}}};
  EXPECT_TRUE(throws_typed<td::SchemaError>([&] { td::from_schema(schema, {4}); }, "int64"));
  EXPECT_TRUE(throws_typed<td::SchemaError>(
      [&] { td::from_schema(schema, {4}, td::storage::Memmap{.prefix = (root / "p").string()}); },
      "int64"));
  EXPECT_FALSE(fs::exists(root / "p"));
}

TEST_F(Reliability, APetabyteFromSchemaIsAStorageError) {
  td::Schema schema{{"x", td::FieldSpec{{int64_t{1} << 47}, at::kFloat}}};  // 512 TiB per row
  EXPECT_TRUE(throws_typed<td::StorageError>([&] { td::from_schema(schema, {2}); }));
  EXPECT_TRUE(throws_typed<td::StorageError>(
      [&] { td::from_schema(schema, {2}, td::storage::Memmap{.prefix = (root / "p").string()}); },
      "allocate"));
  EXPECT_FALSE(fs::exists(root / "p"));
  EXPECT_TRUE(
      throws_typed<td::StorageError>([&] { td::from_schema(schema, {2}, td::storage::Shared{}); }));
}

TEST_F(Reliability, ACudaDeviceWithoutCudaIsADeviceError) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "this build has CUDA";
  td::Schema schema{{"x", td::FieldSpec{{2}, at::kFloat}}};
  EXPECT_TRUE(throws_typed<td::DeviceError>(
      [&] { td::from_schema(schema, {2}, td::storage::Memory{.device = at::Device("cuda:0")}); }));
  EXPECT_TRUE(throws_typed<td::DeviceError>([&] {
    td::from_schema(schema, {2}, "memory", {{"device", std::string("cuda")}});
  }));
  td::TensorDict t;
  t.set("a", torch::ones({2}));
  EXPECT_TRUE(throws_typed<td::DeviceError>([&] { t.to(at::Device("cuda")); }));
  t.memmap((root / "p").string());
  EXPECT_TRUE(throws_typed<td::DeviceError>(
      [&] { td::load_memmap((root / "p").string(), {.device = at::Device("cuda")}); }));
}

TEST_F(Reliability, NegativeOrOverflowingShapesToMemoryMappedTensorAreShapeErrors) {
  const std::string f = (root / "t.bin").string();
  EXPECT_TRUE(
      throws_typed<td::ShapeError>([&] { td::MemoryMappedTensor::empty(f, {-1}, at::kFloat); }));
  EXPECT_TRUE(throws_typed<td::ShapeError>([&] {
    td::MemoryMappedTensor::zeros(f, {int64_t{1} << 62, 4}, at::kFloat);
  }));
  write_text(f, std::string(64, '\0'));
  EXPECT_TRUE(throws_typed<td::ShapeError>(
      [&] { td::MemoryMappedTensor::from_filename(f, at::kFloat, {-4}); }));
  EXPECT_TRUE(throws_typed<td::ShapeError>(
      [&] { td::MemoryMappedTensor::from_filename(f, at::kDouble, {int64_t{1} << 61}); }));
}

TEST_F(Reliability, SparseAndMetaLeavesAreRefusedByMemmapAndConsolidate) {
  td::TensorDict sparse;
  sparse.set("a", torch::ones({2}));
  sparse.set("s", torch::eye(3).to_sparse());
  EXPECT_TRUE(throws_typed<td::TypeError>([&] { sparse.memmap((root / "p").string()); }, "'s'"));
  EXPECT_TRUE(
      throws_typed<td::TypeError>([&] { sparse.memmap_like((root / "p").string()); }, "'s'"));
  EXPECT_TRUE(throws_typed<td::TypeError>([&] { sparse.consolidate(); }, "'s'"));
  EXPECT_TRUE(
      throws_typed<td::TypeError>([&] { sparse.consolidate((root / "c.td").string()); }, "'s'"));
  // A meta leaf holds no data: refused where data is needed, its shape saved by memmap_like.
  td::TensorDict meta;
  meta.set("a", torch::ones({2}));
  meta.set("m", torch::empty({3}, torch::TensorOptions().device(at::kMeta)));
  EXPECT_TRUE(throws_typed<td::DeviceError>([&] { meta.memmap((root / "p").string()); }, "'m'"));
  EXPECT_TRUE(throws_typed<td::DeviceError>([&] { meta.consolidate(); }, "'m'"));
  EXPECT_TRUE(
      throws_typed<td::DeviceError>([&] { meta.consolidate((root / "c.td").string()); }, "'m'"));
  EXPECT_FALSE(fs::exists(root / "p"));
  EXPECT_FALSE(fs::exists(root / "c.td"));
  auto like = meta.memmap_like((root / "p").string());
  EXPECT_TRUE(like.get("m").equal(torch::zeros({3})));
}

TEST_F(Reliability, LoadStateDictFileOfADirectoryIsAFormatError) {
  EXPECT_TRUE(
      throws_typed<td::FormatError>([&] { td::load_state_dict_file(root.string()); }, "directory"));
}

// from_schema asking for more than a small file system holds is a
// StorageError at allocation, not a SIGBUS at the first row written. The
// child process mounts a 2 MiB tmpfs in its own mount namespace.
TEST_F(Reliability, AFullDiskIsAStorageErrorAtAllocationNotASigbus) {
  fs::create_directories(root / "small");
  const int rc = run_child({"fulldisk", (root / "small").string()});
  ASSERT_NE(rc, 77) << "the child could not mount a small file system";
  EXPECT_EQ(rc, 0) << "child status " << rc << (rc == 1000 + SIGBUS ? " (SIGBUS)" : "");
}
