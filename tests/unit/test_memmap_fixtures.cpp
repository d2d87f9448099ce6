// Memmap directories written by the real Python tensordict (0.3.2), the
// upstream repository's own test artifact, and hand-built HEAD-layout trees
// (the format: docs/storage.md, "The format, and Python compatibility").
// MANIFEST.json records what Python 0.3.2 reads back from each fixture;
// every entry it can read is checked here against our loader.
#include "pch.h"

#include "support/core_test_helpers.h"
#include "support/data_path.h"

#include <tensordict/storage/memmap.h>
#include <tensordict/storage/shared.h>

#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace td = tensordict;
namespace fs = std::filesystem;
using td_test::data_path;
using json = nlohmann::json;

namespace {

fs::path memmap_fixtures() { return data_path("python-0.3.2/memmap"); }

json read_manifest() {
  std::ifstream in(memmap_fixtures() / "MANIFEST.json");
  EXPECT_TRUE(in) << "cannot open " << (memmap_fixtures() / "MANIFEST.json");
  return json::parse(in);
}

std::vector<unsigned char> file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  EXPECT_TRUE(in) << "cannot open " << p;
  return std::vector<unsigned char>(std::istreambuf_iterator<char>(in), {});
}

td::NestedKey split_key(const std::string& dotted) {
  std::vector<std::string> parts;
  std::stringstream ss(dotted);
  for (std::string p; std::getline(ss, p, '.');) parts.push_back(p);
  return td::NestedKey(parts);
}

// Flattens a manifest value (nested lists, [re, im] pairs for complex
// elements, or a bare scalar for 0-d) into row-major doubles, checking that the
// nesting matches `shape`.
void flatten_expected(const json& v, at::IntArrayRef shape, std::size_t depth, bool complex,
                      std::vector<double>& out) {
  if (depth == shape.size()) {
    if (complex) {
      ASSERT_TRUE(v.is_array() && v.size() == 2) << "complex element " << v.dump();
      out.push_back(v[0].get<double>());
      out.push_back(v[1].get<double>());
    } else if (v.is_boolean()) {
      out.push_back(v.get<bool>() ? 1.0 : 0.0);
    } else {
      ASSERT_TRUE(v.is_number()) << v.dump();
      out.push_back(v.get<double>());
    }
    return;
  }
  ASSERT_TRUE(v.is_array()) << v.dump();
  ASSERT_EQ(static_cast<int64_t>(v.size()), shape[depth]) << v.dump();
  for (const auto& item : v) flatten_expected(item, shape, depth + 1, complex, out);
}

std::vector<double> flatten_actual(const at::Tensor& t) {
  at::Tensor d = t.is_complex() ? at::view_as_real(t.to(at::kComplexDouble)) : t.to(at::kDouble);
  d = d.contiguous().reshape({-1});
  return std::vector<double>(d.data_ptr<double>(), d.data_ptr<double>() + d.numel());
}

// Compares the leaf `t` with a MANIFEST leaf description.
void expect_leaf_matches(const at::Tensor& t, const json& spec) {
  std::vector<int64_t> shape = spec.at("shape").get<std::vector<int64_t>>();
  EXPECT_EQ(t.sizes().vec(), shape);
  EXPECT_EQ(td::detail::dtype_to_string(t.scalar_type()), spec.at("dtype").get<std::string>());
  if (t.sizes().vec() != shape) return;
  if (spec.contains("sum")) {
    EXPECT_NEAR(t.to(at::kDouble).sum().item<double>(), spec["sum"].get<double>(), 1e-9);
  }
  if (spec.contains("values")) {
    std::vector<double> expected;
    flatten_expected(spec["values"], shape, 0, t.is_complex(), expected);
    EXPECT_EQ(flatten_actual(t), expected);
  }
}

// Everything our loader returns beyond what 0.3.2 read back, per fixture.
// HEAD Python recreates empty tensors from meta.json; 0.3.2 silently dropped
// them, and it did not list NonTensorData/NonTensorStack entries among the
// tensor leaves of its manifest.
const std::map<std::string, std::set<std::string>> kExtraLeaves = {
    {"empty", {"empty"}},
    {"nontensor", {"n", "p", "s"}},
    {"nontensorstack", {"ns", "nsp"}},
};

std::set<std::string> leaf_keys(const td::TensorDictBase& t) {
  std::set<std::string> out;
  for (const auto& k : t.keys(
           td::KeysOptions{.include_nested = true, .leaves_only = true, .non_tensor_leaves = true}))
    out.insert(k.join("."));
  return out;
}

}  // namespace

TEST(MemmapFixtures, DataDirectoryIsFound) {
  EXPECT_TRUE(fs::is_directory(data_path())) << data_path();
  EXPECT_TRUE(fs::exists(memmap_fixtures() / "MANIFEST.json"));
  EXPECT_TRUE(fs::exists(data_path("python-0.3.2/h5/v032.h5")));
  EXPECT_TRUE(fs::exists(data_path("python-0.3.2/memmap/keys/a b.memmap")));
  EXPECT_TRUE(fs::exists(data_path("python-0.3.2/memmap/keys/c%d.memmap")));
  EXPECT_TRUE(fs::exists(data_path("hand-built/head_plain/b%20c.memmap")));
}

TEST(MemmapFixtures, EveryReadableManifestEntryLoadsAsPythonReadsIt) {
  json manifest = read_manifest();
  int checked = 0;
  for (const auto& [name, fixture] : manifest.items()) {
    SCOPED_TRACE("fixture " + name);
    if (fixture.contains("error")) continue;
    const std::string prefix = (memmap_fixtures() / name).string();
    td::TensorDictBase t = td::load_memmap(prefix, {.pickled_values_as_markers = true});
    EXPECT_EQ(t.type_name(), fixture.at("type").get<std::string>());
    EXPECT_EQ(t.batch_size().vec(), fixture.at("batch_size").get<std::vector<int64_t>>());
    std::set<std::string> expected_keys;
    for (const auto& [key, spec] : fixture.at("leaves").items()) {
      SCOPED_TRACE("key " + key);
      expected_keys.insert(key);
      td::NestedKey nk = split_key(key);
      ASSERT_TRUE(t.contains(nk)) << t;
      expect_leaf_matches(t.get(nk), spec);
    }
    if (auto extra = kExtraLeaves.find(name); extra != kExtraLeaves.end())
      expected_keys.insert(extra->second.begin(), extra->second.end());
    EXPECT_EQ(leaf_keys(t), expected_keys);
    ++checked;
  }
  EXPECT_EQ(checked, 12);  // 15 entries, 3 of them errors in 0.3.2 itself
}

TEST(MemmapFixtures, LoadedLeavesAreMappedFromTheFixtureFiles) {
  auto t = td::load_memmap((memmap_fixtures() / "plain").string());
  auto fa = td::MemoryMappedTensor::filename(t.get("a"));
  ASSERT_TRUE(fa.has_value());
  EXPECT_EQ(fs::path(*fa).filename(), "a.memmap");
  EXPECT_EQ(t.saved_path(), fs::absolute(memmap_fixtures() / "plain").string());
  EXPECT_FALSE(t.is_locked());  // as Python's load_memmap
}

TEST(MemmapFixtures, PlainBytesMatchTheSpec) {
  // docs/formats.md, "Leaf files": a.memmap = 0..5 int32 LE, b.memmap = [1.5, -2.0] float32 LE.
  EXPECT_EQ(file_bytes(memmap_fixtures() / "plain/a.memmap"),
            (std::vector<unsigned char>{0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0,
                                        3, 0, 0, 0, 4, 0, 0, 0, 5, 0, 0, 0}));
  EXPECT_EQ(file_bytes(memmap_fixtures() / "plain/b.memmap"),
            (std::vector<unsigned char>{0x00, 0x00, 0xc0, 0x3f, 0x00, 0x00, 0x00, 0xc0}));
  // And our writer produces the same bytes from the loaded values.
  auto t = td::load_memmap((memmap_fixtures() / "plain").string());
  fs::path out = fs::temp_directory_path() / ("td-mmfix-plain-" + std::to_string(::getpid()));
  fs::remove_all(out);
  t.memmap(out.string());
  EXPECT_EQ(file_bytes(out / "a.memmap"), file_bytes(memmap_fixtures() / "plain/a.memmap"));
  EXPECT_EQ(file_bytes(out / "b.memmap"), file_bytes(memmap_fixtures() / "plain/b.memmap"));
  fs::remove_all(out);
}

TEST(MemmapFixtures, DtypeBytesMatchTheSpec) {
  const fs::path d = memmap_fixtures() / "dtypes";
  using B = std::vector<unsigned char>;
  EXPECT_EQ(file_bytes(d / "bool.memmap"), (B{0x01, 0x00, 0x01}));
  EXPECT_EQ(file_bytes(d / "bf16.memmap"), (B{0x80, 0x3f, 0x00, 0x40, 0x00, 0xbf}));
  EXPECT_EQ(file_bytes(d / "f16.memmap"), (B{0x00, 0x3c, 0x00, 0x40, 0x00, 0xb8}));
  EXPECT_EQ(file_bytes(d / "i8.memmap"), (B{0xff, 0x02, 0x03}));
  EXPECT_EQ(file_bytes(d / "c64.memmap"),
            (B{0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x40, 0x40,
               0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x40, 0x00, 0x00, 0x00, 0x00}));
  // Our writer reproduces every one of them.
  auto t = td::load_memmap(d.string());
  fs::path out = fs::temp_directory_path() / ("td-mmfix-dtypes-" + std::to_string(::getpid()));
  fs::remove_all(out);
  t.memmap(out.string());
  for (const char* k : {"bool", "bf16", "f16", "u8", "i8", "i16", "c64", "f64"})
    EXPECT_EQ(file_bytes(out / (std::string(k) + ".memmap")),
              file_bytes(d / (std::string(k) + ".memmap")))
        << k;
  fs::remove_all(out);
}

TEST(MemmapFixtures, NestedAndStridedBytesMatchTheSpec) {
  EXPECT_EQ(file_bytes(memmap_fixtures() / "nested/sub/deeper/z.memmap"),
            (std::vector<unsigned char>{0x01, 0x00}));
  // docs/formats.md, "Byte order": t = arange(12.).reshape(3,4).t() is written materialised.
  auto bytes = file_bytes(memmap_fixtures() / "strided/t.memmap");
  ASSERT_EQ(bytes.size(), 48u);
  std::vector<float> t(12);
  std::memcpy(t.data(), bytes.data(), 48);
  EXPECT_EQ(t, (std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
  auto exp = file_bytes(memmap_fixtures() / "strided/exp.memmap");
  ASSERT_EQ(exp.size(), 48u);
  std::memcpy(t.data(), exp.data(), 48);
  EXPECT_EQ(t, std::vector<float>(12, 7.0f));
  // memmap_like of zeros(()).expand(1000, 4): 16000 bytes of zeros.
  auto big = file_bytes(memmap_fixtures() / "like/big.memmap");
  EXPECT_EQ(big.size(), 16000u);
  EXPECT_TRUE(std::all_of(big.begin(), big.end(), [](unsigned char c) { return c == 0; }));
}

TEST(MemmapFixtures, EmptyTensorIsRecreatedFromMetadata) {
  // 0.3.2 wrote no file for the [0, 3] leaf and dropped it on load; HEAD (and
  // we) recreate it from meta.json.
  EXPECT_FALSE(fs::exists(memmap_fixtures() / "empty/empty.memmap"));
  auto t = td::load_memmap((memmap_fixtures() / "empty").string());
  ASSERT_TRUE(t.contains("empty"));
  EXPECT_EQ(t.get("empty").sizes().vec(), (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(t.get("empty").scalar_type(), at::kFloat);
  EXPECT_EQ(t.get("scalar").dim(), 0);
  EXPECT_EQ(t.get("scalar").item<float>(), 3.0f);
}

TEST(MemmapFixtures, LegacyRawKeyNamesAreFound) {
  // 0.3.2 wrote raw key names: "a b.memmap", "c%d.memmap".
  auto t = td::load_memmap((memmap_fixtures() / "keys").string());
  EXPECT_EQ(leaf_keys(t), (std::set<std::string>{"a b", "c%d"}));
  EXPECT_EQ(fs::path(*td::MemoryMappedTensor::filename(t.get("c%d"))).filename(), "c%d.memmap");
  EXPECT_EQ(fs::path(*td::MemoryMappedTensor::filename(t.get("a b"))).filename(), "a b.memmap");
}

TEST(MemmapFixtures, NonTensorDataOf032IsRead) {
  // 0.3.2's own loader did not list these; HEAD drops 0.3.2 sub-directories.
  // We read them by scanning (docs/formats.md, "Layouts by version").
  auto t = td::load_memmap((memmap_fixtures() / "nontensor").string(),
                           {.pickled_values_as_markers = true});
  ASSERT_TRUE(t.is_non_tensor("s"));
  EXPECT_EQ(t.get_non_tensor("s"), json("a string!"));
  ASSERT_TRUE(t.is_non_tensor("n"));
  EXPECT_EQ(t.get_non_tensor("n"), json::parse(R"({"k":[1,2.5,null]})"));
  // Pickled values are never unpickled: an opaque marker object, when asked for.
  ASSERT_TRUE(t.is_non_tensor("p"));
  json p = t.get_non_tensor("p");
  ASSERT_TRUE(p.is_object()) << p.dump();
  EXPECT_EQ(p.at("__tensordict_opaque__"), "pickle");
  EXPECT_EQ(fs::path(p.at("file").get<std::string>()).filename(), "other.pickle");
  EXPECT_EQ(p.at("bytes"), 34);
  EXPECT_FALSE(p.contains("data"));
  // Batch sizes come from the parent / _tensordict/meta.json ([3]).
  for (const char* k : {"s", "n", "p"})
    EXPECT_EQ(t.at(k).non_tensor().batch_size().vec(), (std::vector<int64_t>{3})) << k;
}

TEST(MemmapFixtures, NonTensorStackOf032IsRead) {
  auto t = td::load_memmap((memmap_fixtures() / "nontensorstack").string(),
                           {.pickled_values_as_markers = true});
  ASSERT_TRUE(t.is_non_tensor("ns"));
  ASSERT_EQ(t.entry_kind("ns"), td::EntryKind::NonTensorStack);
  EXPECT_EQ(t.get_non_tensor("ns"), json::parse(R"(["x","y","z"])"));
  EXPECT_EQ(t.get_non_tensor_stack("ns").batch_size().vec(), (std::vector<int64_t>{3}));
  EXPECT_EQ(t[1].get_non_tensor("ns"), "y");
  // The pickled variant cannot be read (pickles are never executed): one
  // opaque value for the whole batch.
  ASSERT_TRUE(t.is_non_tensor("nsp"));
  json nsp = t.get_non_tensor("nsp");
  EXPECT_EQ(nsp.at("__tensordict_opaque__"), "pickle");
  EXPECT_EQ(fs::path(nsp.at("file").get<std::string>()).filename(), "pickle.pkl");
  // The 0/, 1/, 2/ artefact directories of 0.3.2 are not loaded as keys.
  EXPECT_EQ(leaf_keys(t), (std::set<std::string>{"a", "ns", "nsp"}));
}

TEST(MemmapFixtures, PickledValuesAreRefusedByDefaultNamingTheKey) {
  TD_EXPECT_THROW_MSG(td::load_memmap((memmap_fixtures() / "nontensor").string()), td::FormatError,
                      "key 'p': the value was pickled by Python");
  TD_EXPECT_THROW_MSG(td::load_memmap((memmap_fixtures() / "nontensorstack").string()),
                      td::FormatError, "pickled_values_as_markers");
}

TEST(MemmapFixtures, NestedTensorDictsOf032AreFoundByScanning) {
  auto t = td::load_memmap((memmap_fixtures() / "nested").string());
  ASSERT_EQ(t.entry_kind("sub"), td::EntryKind::TensorDict);
  ASSERT_EQ(t.entry_kind({"sub", "deeper"}), td::EntryKind::TensorDict);
  EXPECT_EQ(t.get_tensordict("sub").batch_size().vec(), (std::vector<int64_t>{2}));
  EXPECT_EQ(t.get_tensordict({"sub", "deeper"}).saved_path(),
            fs::absolute(memmap_fixtures() / "nested/sub/deeper").string());
}

TEST(MemmapFixtures, LazyStackOf032LoadsAsALazyStack) {
  // lazy_stack([{"a": f32[2], "b": f32[2,3]}, {"a": f32[2], "c": f32[2,1]}], dim=1)
  const fs::path prefix = memmap_fixtures() / "lazystack";
  td::TensorDictBase t = td::load_memmap(prefix.string());
  ASSERT_TRUE(t.is<td::LazyStackedTensorDict>()) << t.type_name();
  auto stack = t.as<td::LazyStackedTensorDict>();
  EXPECT_EQ(stack.stack_dim(), 1);
  ASSERT_EQ(stack.num_members(), 2u);
  EXPECT_EQ(t.batch_size().vec(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(t.keys(), (std::vector<td::NestedKey>{"a"}));  // the common key only
  // "a" is stacked along dim 1 from the two members' files.
  auto a0 = stack.tensordicts()[0].get("a");
  auto a1 = stack.tensordicts()[1].get("a");
  EXPECT_TRUE(torch::equal(t.get("a"), torch::stack({a0, a1}, 1)));
  EXPECT_TRUE(td::MemoryMappedTensor::filename(a0).has_value());
  // The exclusive keys are reached through the members: t[:, 0] is member 0.
  auto m0 = t.index({torch::indexing::Slice(), 0});
  EXPECT_TRUE(m0.is_same(stack.tensordicts()[0]));
  EXPECT_EQ(m0.get("b").sizes().vec(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(t.index({torch::indexing::Slice(), 1}).get("c").sizes().vec(),
            (std::vector<int64_t>{2, 1}));
  EXPECT_FALSE(t.contains("b"));
  EXPECT_EQ(t.saved_path(), fs::absolute(prefix).string());
}

TEST(MemmapFixtures, UpstreamArtifactWithTrailingBytes) {
  // test/artifacts/mmap_example: files longer than their payload, a bfloat16
  // leaf, a NonTensorData without _is_non_tensor, stdlib-spaced JSON.
  const fs::path root = data_path("upstream-artifact/mmap_example");
  EXPECT_EQ(fs::file_size(root / "nested/int64.memmap"), 17u);
  EXPECT_EQ(fs::file_size(root / "nested/bfloat16.memmap"), 6u);
  auto t = td::load_memmap(root.string());
  EXPECT_EQ(t.batch_size().vec(), (std::vector<int64_t>{2, 1}));
  ASSERT_EQ(t.entry_kind("nested"), td::EntryKind::TensorDict);
  EXPECT_EQ(t.get_tensordict("nested").batch_size().vec(), (std::vector<int64_t>{2, 1}));
  at::Tensor i64 = t.get({"nested", "int64"});
  EXPECT_EQ(i64.scalar_type(), at::kLong);
  EXPECT_TRUE(at::equal(i64, torch::tensor({1, 2}, torch::kLong).view({2, 1})));
  at::Tensor bf = t.get({"nested", "bfloat16"});
  EXPECT_EQ(bf.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(at::equal(bf, torch::ones({2, 1}, torch::kBFloat16)));
  ASSERT_TRUE(t.is_non_tensor({"nested", "string"}));
  EXPECT_EQ(t.get_non_tensor({"nested", "string"}), json::parse(R"(["a string!"])"));
  EXPECT_EQ(leaf_keys(t),
            (std::set<std::string>{"nested.int64", "nested.string", "nested.bfloat16"}));
}

TEST(MemmapFixtures, HandBuiltHeadPlainDecodesPercentEncodedNames) {
  const fs::path root = data_path("hand-built/head_plain");
  auto t = td::load_memmap(root.string());
  EXPECT_EQ(t.batch_size().vec(), (std::vector<int64_t>{2}));
  EXPECT_EQ(leaf_keys(t), (std::set<std::string>{"a", "b c", "sub.x"}));
  EXPECT_TRUE(at::equal(t.get("a"), torch::arange(6, torch::kInt).view({2, 3})));
  EXPECT_TRUE(at::equal(t.get("b c"), torch::tensor({1.5f, -2.0f})));
  EXPECT_EQ(fs::path(*td::MemoryMappedTensor::filename(t.get("b c"))).filename(), "b%20c.memmap");
  EXPECT_TRUE(at::equal(t.get({"sub", "x"}), torch::ones({2, 2}, torch::kLong)));
  EXPECT_EQ(t.get_tensordict("sub").batch_size().vec(), (std::vector<int64_t>{2}));
}

TEST(MemmapFixtures, HandBuiltHeadNonTensor) {
  auto t = td::load_memmap(data_path("hand-built/head_nontensor").string());
  EXPECT_EQ(t.batch_size().vec(), (std::vector<int64_t>{3}));
  EXPECT_TRUE(at::equal(t.get("a"), torch::zeros({3})));
  ASSERT_TRUE(t.is_non_tensor("s"));
  EXPECT_EQ(t.get_non_tensor("s"), json("hello"));
  // No _tensordict/ in HEAD: the batch size comes from the parent.
  EXPECT_EQ(t.at("s").non_tensor().batch_size().vec(), (std::vector<int64_t>{3}));
}

TEST(MemmapFixtures, HandBuiltTrailingByteIsTolerated) {
  const fs::path root = data_path("hand-built/trailing");
  EXPECT_EQ(fs::file_size(root / "a.memmap"), 17u);
  auto t = td::load_memmap(root.string());
  EXPECT_TRUE(at::equal(t.get("a"), torch::tensor({0, 1}, torch::kLong)));
}

TEST(MemmapFixtures, MetaDeviceReadsNoLeafData) {
  auto t = td::load_memmap((memmap_fixtures() / "dtypes").string(),
                           td::LoadOptions{.device = at::Device(at::kMeta)});
  EXPECT_EQ(t.get("c64").device().type(), at::kMeta);
  EXPECT_EQ(t.get("c64").scalar_type(), at::kComplexFloat);
  EXPECT_EQ(t.get("bf16").sizes().vec(), (std::vector<int64_t>{3}));
}
