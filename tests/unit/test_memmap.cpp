// Memory-mapped storage: memmap / memmap_ / memmap_like / save / load_memmap,
// MemoryMappedTensor, key encoding, errors on corrupt directories, shared
// memory. Layout and bytes: docs/storage.md, "The format, and Python compatibility".
#include "pch.h"

#include "support/core_test_helpers.h"

#include <tensordict/storage/memmap.h>
#include <tensordict/storage/shared.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace td = tensordict;
namespace fs = std::filesystem;
using json = nlohmann::json;
using Shape = std::vector<int64_t>;
using torch::indexing::Slice;

namespace {

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  EXPECT_TRUE(in) << "cannot open " << p;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_text(const fs::path& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  ASSERT_TRUE(out) << "cannot write " << p;
  out << s;
}

std::string bytes_of(const at::Tensor& t) {
  at::Tensor c = t.resolve_conj().resolve_neg().contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), c.nbytes());
}

// Every path under `root` (relative, '/'-separated) with its content ("<dir>"
// for directories, "-> target" for symbolic links).
std::map<std::string, std::string> snapshot_dir(const fs::path& root) {
  std::map<std::string, std::string> out;
  if (!fs::exists(root)) return out;
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator();
       ++it) {
    std::string rel = fs::relative(it->path(), root).generic_string();
    if (it->is_symlink())
      out[rel] = "-> " + fs::read_symlink(it->path()).string();
    else if (it->is_directory())
      out[rel] = "<dir>";
    else
      out[rel] = read_text(it->path());
  }
  return out;
}

// A fresh directory per test; the tensordict goes to `prefix` (root/"p"), so
// that anything written next to it is visible in `root`.
class Memmap : public ::testing::Test {
 protected:
  void SetUp() override {
    static int counter = 0;
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    root = fs::temp_directory_path() / ("td-memmap-" + std::to_string(::getpid()) + "-" +
                                        info->name() + "-" + std::to_string(counter++));
    fs::remove_all(root);
    fs::create_directories(root);
    prefix = root / "p";
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root, ec);
    // Shared-memory directories of a test that failed before unlinking them.
    for (const auto& name : shared_names)
      if (fs::exists(name)) td::unlink_shared(name);
  }
  std::string P() const { return prefix.string(); }

  fs::path root;
  fs::path prefix;
  std::vector<std::string> shared_names;
};

const std::vector<at::ScalarType> kAllDtypes = {
    at::kBool, at::kByte,     at::kChar,  at::kShort,  at::kInt,          at::kLong,
    at::kHalf, at::kBFloat16, at::kFloat, at::kDouble, at::kComplexFloat, at::kComplexDouble};

at::Tensor sample(at::ScalarType dtype, at::IntArrayRef shape) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  at::Tensor base = torch::arange(n, torch::kDouble).reshape(shape);
  if (dtype == at::kBool) return (base.remainder(3) == 1);
  if (at::isComplexType(dtype)) return at::complex(base - 1.5, -base).to(dtype);
  if (at::isFloatingType(dtype)) return (base * 0.5 - 1).to(dtype);
  if (dtype == at::kByte) return (base * 37 + 200).remainder(256).to(dtype);
  return (base * 3 - 5).to(dtype);
}

}  // namespace

// ---- round trips -------------------------------------------------------------------

TEST_F(Memmap, EveryDtypeRoundTripsWithExactBytes) {
  td::TensorDict t(at::IntArrayRef{2});
  for (auto dt : kAllDtypes) t.set(td::detail::dtype_to_string(dt).substr(6), sample(dt, {2, 3}));
  auto m = t.memmap(P());
  auto meta = json::parse(read_text(prefix / "meta.json"));
  auto loaded = td::load_memmap(P());
  for (auto dt : kAllDtypes) {
    const std::string dts = td::detail::dtype_to_string(dt);
    const std::string k = dts.substr(6);
    SCOPED_TRACE(k);
    EXPECT_EQ(read_text(prefix / (k + ".memmap")), bytes_of(t.get(k)));
    EXPECT_EQ(fs::file_size(prefix / (k + ".memmap")), 6 * c10::elementSize(dt));
    EXPECT_EQ(meta.at(k).at("dtype"), dts);
    EXPECT_EQ(meta.at(k).at("shape"), json::parse("[2,3]"));
    for (const auto* r : {&m, &loaded}) {
      at::Tensor x = r->get(k);
      EXPECT_EQ(x.scalar_type(), dt);
      EXPECT_EQ(x.sizes().vec(), (Shape{2, 3}));
      EXPECT_TRUE(at::equal(x, t.get(k)));
      EXPECT_TRUE(td::MemoryMappedTensor::is_memory_mapped(x));
    }
  }
  EXPECT_EQ(loaded.batch_size().vec(), (Shape{2}));
  EXPECT_TRUE(loaded.equal(t));
}

TEST_F(Memmap, ZeroDimLeavesHaveAOneElementFile) {
  td::TensorDict t;
  for (auto dt : kAllDtypes)
    t.set(td::detail::dtype_to_string(dt).substr(6), sample(dt, {}).reshape({}));
  t.memmap(P());
  auto meta = json::parse(read_text(prefix / "meta.json"));
  auto loaded = td::load_memmap(P());
  for (auto dt : kAllDtypes) {
    const std::string k = td::detail::dtype_to_string(dt).substr(6);
    SCOPED_TRACE(k);
    EXPECT_EQ(fs::file_size(prefix / (k + ".memmap")), c10::elementSize(dt));
    EXPECT_EQ(meta.at(k).at("shape"), json::array());
    EXPECT_EQ(loaded.get(k).dim(), 0);
    EXPECT_TRUE(at::equal(loaded.get(k), t.get(k)));
  }
}

TEST_F(Memmap, EmptyTensorsWriteNoFileAndLoadBackWithTheirShape) {
  td::TensorDict t({{"e0", torch::zeros({0})},
                    {"e1", torch::zeros({2, 0, 3}, torch::kInt)},
                    {"full", torch::ones({2})}});
  auto m = t.memmap(P());
  EXPECT_FALSE(fs::exists(prefix / "e0.memmap"));
  EXPECT_FALSE(fs::exists(prefix / "e1.memmap"));
  EXPECT_TRUE(fs::exists(prefix / "full.memmap"));
  auto meta = json::parse(read_text(prefix / "meta.json"));
  EXPECT_EQ(meta.at("e0").at("shape"), json::parse("[0]"));
  EXPECT_EQ(meta.at("e1").at("shape"), json::parse("[2,0,3]"));
  EXPECT_EQ(meta.at("e1").at("dtype"), "torch.int32");
  EXPECT_EQ(m.get("e1").sizes().vec(), (Shape{2, 0, 3}));
  auto loaded = td::load_memmap(P());
  EXPECT_EQ(loaded.get("e0").sizes().vec(), (Shape{0}));
  EXPECT_EQ(loaded.get("e0").scalar_type(), at::kFloat);
  EXPECT_EQ(loaded.get("e1").sizes().vec(), (Shape{2, 0, 3}));
  EXPECT_EQ(loaded.get("e1").scalar_type(), at::kInt);
  EXPECT_EQ(loaded.keys(), (std::vector<td::NestedKey>{"e0", "e1", "full"}));
}

TEST_F(Memmap, NestedTensorDictsWithLongerBatchSizes) {
  td::TensorDict deep({{"z", sample(at::kBool, {2, 3, 4})}}, {2, 3, 4});
  td::TensorDict mid({{"y", sample(at::kLong, {2, 3, 5})}, {"deep", deep}}, {2, 3});
  td::TensorDict t({{"x", sample(at::kFloat, {2})}, {"mid", mid}}, {2});
  auto m = t.memmap(P());
  EXPECT_EQ(read_text(prefix / "meta.json"),
            R"({"x":{"device":"cpu","shape":[2],"dtype":"torch.float32","is_nested":false},)"
            R"("mid":{"type":"TensorDict"},"shape":[2],"device":"cpu",)"
            R"("_type":"<class 'tensordict._td.TensorDict'>"})");
  EXPECT_EQ(json::parse(read_text(prefix / "mid/meta.json")).at("shape"), json::parse("[2,3]"));
  EXPECT_EQ(json::parse(read_text(prefix / "mid/deep/meta.json")).at("shape"),
            json::parse("[2,3,4]"));
  EXPECT_EQ(read_text(prefix / "mid/deep/z.memmap"), bytes_of(deep.get("z")));
  for (const td::TensorDictBase& r : {m, td::load_memmap(P())}) {
    EXPECT_EQ(r.get_tensordict("mid").batch_size().vec(), (Shape{2, 3}));
    EXPECT_EQ(r.get_tensordict({"mid", "deep"}).batch_size().vec(), (Shape{2, 3, 4}));
    EXPECT_TRUE(r.equal(t));
  }
}

TEST_F(Memmap, NonTensorValuesRoundTrip) {
  const std::vector<std::pair<std::string, json>> values = {
      {"str", "a string!"},
      {"int", 7},
      {"neg", -3},
      {"float", 2.5},
      {"t", true},
      {"f", false},
      {"null", nullptr},
      {"list", json::parse(R"([1,"two",3.5,null,[true]])")},
      {"obj", json::parse(R"({"k":[1,2.5,null],"inner":{"a":"b"}})")},
      {"utf8", "caf\u00e9 \u2603"},
  };
  td::TensorDict t({{"a", torch::zeros({3})}}, {3});
  for (const auto& [k, v] : values) t.set_non_tensor(k, v);
  t.set_non_tensor({"sub", "label"}, "cat");
  auto m = t.memmap(P());
  auto root_meta = json::parse(read_text(prefix / "meta.json"));
  for (const auto& [k, v] : values) {
    SCOPED_TRACE(k);
    EXPECT_EQ(root_meta.at(k), json::parse(R"({"type":"NonTensorData"})"));
    EXPECT_EQ(read_text(prefix / k / "meta.json"),
              R"({"_type":"<class 'tensordict.tensorclass.NonTensorData'>","data":)" + v.dump() +
                  R"(,"_metadata":null,"_is_non_tensor":true})");
    // Beside meta.json only _tensordict/meta.json, which Python 0.3.2
    // requires (docs/formats.md, "Non-tensor directories") and 0.14 reads when present.
    EXPECT_EQ(
        snapshot_dir(prefix / k),
        (std::map<std::string, std::string>{
            {"meta.json", read_text(prefix / k / "meta.json")},
            {"_tensordict", "<dir>"},
            {"_tensordict/meta.json",
             R"({"shape":[3],"device":"cpu","_type":"<class 'tensordict._td.TensorDict'>"})"}}));
  }
  auto loaded = td::load_memmap(P());
  for (const auto* r : {&m, &loaded}) {
    for (const auto& [k, v] : values) {
      ASSERT_TRUE(r->is_non_tensor(k)) << k;
      EXPECT_EQ(r->get_non_tensor(k), v) << k;
      EXPECT_EQ(r->at(k).non_tensor().batch_size().vec(), (Shape{3})) << k;
    }
    EXPECT_EQ(r->get_non_tensor({"sub", "label"}), json("cat"));
  }
}

TEST_F(Memmap, NonTensorWrittenInPlaceKeepsThe032BatchFile) {
  td::TensorDict t({{"a", torch::zeros({3})}, {"label", "cat"}}, {3});
  auto m = t.memmap(P());
  // A directory saved before the file was written (earlier versions of this
  // library) gets it with the first in-place write.
  fs::remove_all(prefix / "label" / "_tensordict");
  m.update_(td::TensorDict({{"label", "dog"}}, {3}));
  EXPECT_EQ(read_text(prefix / "label" / "_tensordict" / "meta.json"),
            R"({"shape":[3],"device":"cpu","_type":"<class 'tensordict._td.TensorDict'>"})");
  EXPECT_EQ(td::load_memmap(P()).get_non_tensor("label"), json("dog"));
}

TEST_F(Memmap, StridedSourcesAreWrittenMaterialised) {
  at::Tensor base = torch::arange(12, torch::kFloat).reshape({3, 4});
  at::Tensor big = torch::arange(40, torch::kFloat);
  at::Tensor cplx = at::complex(torch::arange(4, torch::kFloat), torch::ones({4}));
  td::TensorDict t({{"t", base.t()},                                         // transposed
                    {"off", big.slice(0, 5, 17).view({4, 3})},               // storage offset
                    {"step", big.slice(0, 0, 24, 2).view({4, 3})},           // strided
                    {"exp", torch::tensor({7.0f}).expand({4, 3})},           // expanded
                    {"conj", cplx.conj()},                                   // lazy conjugate
                    {"neg", torch::arange(4, torch::kDouble)._neg_view()}},  // lazy negation
                   {4});
  auto m = t.memmap(P());
  for (const char* k : {"t", "off", "step", "exp", "conj", "neg"}) {
    SCOPED_TRACE(k);
    EXPECT_EQ(read_text(prefix / (std::string(k) + ".memmap")), bytes_of(t.get(k)));
    EXPECT_TRUE(at::equal(m.get(k), t.get(k)));
    EXPECT_TRUE(m.get(k).is_contiguous());
  }
  EXPECT_EQ(fs::file_size(prefix / "exp.memmap"), 48u);
  std::vector<float> tv(12);
  std::memcpy(tv.data(), read_text(prefix / "t.memmap").data(), 48);
  EXPECT_EQ(tv, (std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
  EXPECT_TRUE(at::equal(td::load_memmap(P()).get("conj"), cplx.conj().resolve_conj()));
}

TEST_F(Memmap, SaveAndLoadAreMemmapAndLoadMemmap) {
  td::TensorDict t({{"a", torch::arange(4)}}, {4});
  auto s = t.save(P());
  EXPECT_TRUE(s.is_memmap());
  EXPECT_TRUE(td::load(P()).equal(t));
}

TEST_F(Memmap, ThreadCountDoesNotChangeTheOutput) {
  td::TensorDict t(at::IntArrayRef{8});
  for (const char* k : {"k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8", "k9"})
    t.set(k, torch::randn({8, 5}));
  t.set({"sub", "x"}, torch::randn({8}));
  t.memmap(P(), td::MemmapOptions{.num_threads = 1});
  auto one = snapshot_dir(prefix);
  t.memmap((root / "q").string(), td::MemmapOptions{.num_threads = 4});
  EXPECT_EQ(snapshot_dir(root / "q"), one);
}

// ---- exact meta.json bytes (HEAD, orjson style) -----------------------------------

TEST_F(Memmap, MetaJsonBytesMatchHeadExample13) {
  td::TensorDict t(
      {{"a", torch::arange(6, torch::kInt).reshape({2, 3})}, {"b", torch::tensor({1.5f, -2.0f})}},
      {2});
  t.memmap(P());
  EXPECT_EQ(read_text(prefix / "meta.json"),
            R"({"a":{"device":"cpu","shape":[2,3],"dtype":"torch.int32","is_nested":false},)"
            R"("b":{"device":"cpu","shape":[2],"dtype":"torch.float32","is_nested":false},)"
            R"("shape":[2],"device":"cpu","_type":"<class 'tensordict._td.TensorDict'>"})");
  // The leaf bytes of the same data (docs/formats.md, "Leaf files").
  EXPECT_EQ(read_text(prefix / "a.memmap"),
            std::string("\0\0\0\0\1\0\0\0\2\0\0\0\3\0\0\0\4\0\0\0\5\0\0\0", 24));
  EXPECT_EQ(read_text(prefix / "b.memmap"), std::string("\x00\x00\xc0\x3f\x00\x00\x00\xc0", 8));
}

TEST_F(Memmap, DirectoryMatchesHeadExample112) {
  // docs/formats.md, "Example directory", byte for byte.
  td::TensorDict t({{"obs", torch::randn({4, 3})},
                    {"a b", torch::arange(4)},
                    {"nested", td::TensorDict({{"m", torch::zeros({4, 2}, torch::kBool)}}, {4})},
                    {"label", "cat"},
                    {"words", td::NonTensorStack({"x", "y", "z", "w"})}},
                   {4});
  t.memmap(P());
  EXPECT_EQ(read_text(prefix / "meta.json"),
            R"({"obs":{"device":"cpu","shape":[4,3],"dtype":"torch.float32","is_nested":false},)"
            R"("a b":{"device":"cpu","shape":[4],"dtype":"torch.int64","is_nested":false},)"
            R"("nested":{"type":"TensorDict"},"label":{"type":"NonTensorData"},)"
            R"("words":{"type":"NonTensorStack"},)"
            R"("shape":[4],"device":"cpu","_type":"<class 'tensordict._td.TensorDict'>"})");
  EXPECT_EQ(read_text(prefix / "words/meta.json"),
            R"({"_type":"<class 'tensordict.tensorclass.NonTensorStack'>","stack_dim":0,)"
            R"("device":null,"data":["x","y","z","w"]})");
  EXPECT_EQ(read_text(prefix / "nested/meta.json"),
            R"({"m":{"device":"cpu","shape":[4,2],"dtype":"torch.bool","is_nested":false},)"
            R"("shape":[4],"device":"cpu","_type":"<class 'tensordict._td.TensorDict'>"})");
  EXPECT_EQ(read_text(prefix / "label/meta.json"),
            R"({"_type":"<class 'tensordict.tensorclass.NonTensorData'>","data":"cat",)"
            R"("_metadata":null,"_is_non_tensor":true})");
  auto files = snapshot_dir(prefix);
  std::set<std::string> names;
  for (const auto& [k, v] : files) names.insert(k);
  // Plus label/_tensordict/meta.json, which HEAD does not write but reads
  // when present, and without which Python 0.3.2 cannot read the directory
  // (docs/storage.md).
  EXPECT_EQ(names, (std::set<std::string>{
                       "meta.json", "obs.memmap", "a%20b.memmap", "nested", "nested/meta.json",
                       "nested/m.memmap", "label", "label/meta.json", "label/_tensordict",
                       "label/_tensordict/meta.json", "words", "words/meta.json"}));
  EXPECT_EQ(files["obs.memmap"].size(), 48u);
  EXPECT_EQ(files["a%20b.memmap"].size(), 32u);
  EXPECT_EQ(files["nested/m.memmap"].size(), 8u);
}

TEST_F(Memmap, MemmapLikeWritesTheSameMetaJsonAsMemmap) {
  td::TensorDict t(
      {{"x", torch::randn({5, 2})}, {"s", td::TensorDict({{"y", torch::ones({5})}}, {5})}}, {5});
  t.memmap(P());
  t.memmap_like((root / "like").string());
  EXPECT_EQ(read_text(root / "like/meta.json"), read_text(prefix / "meta.json"));
  EXPECT_EQ(read_text(root / "like/s/meta.json"), read_text(prefix / "s/meta.json"));
}

// ---- key encoding (docs/formats.md, "Key encoding") --------------------------------

TEST(MemmapKeys, EncodeMatchesSpecExamples) {
  using td::detail::encode_key_for_filesystem;
  EXPECT_EQ(encode_key_for_filesystem("a/b/c"), "a%2Fb%2Fc");
  EXPECT_EQ(encode_key_for_filesystem("a/b% c"), "a%2Fb%25%20c");
  EXPECT_EQ(encode_key_for_filesystem("x y"), "x%20y");
  EXPECT_EQ(encode_key_for_filesystem("C:x"), "C%3Ax");
  EXPECT_EQ(encode_key_for_filesystem("tab\there"), "tab%09here");
  EXPECT_EQ(encode_key_for_filesystem("a.b"), "a.b");
  EXPECT_EQ(encode_key_for_filesystem("\u00e9"), "\u00e9");
  EXPECT_EQ(encode_key_for_filesystem(""), "%");
  EXPECT_EQ(encode_key_for_filesystem("."), "%2E");
  EXPECT_EQ(encode_key_for_filesystem(".."), "%2E%2E");
  EXPECT_EQ(encode_key_for_filesystem("..."), "...");
  EXPECT_EQ(encode_key_for_filesystem("50%"), "50%25");
  EXPECT_EQ(encode_key_for_filesystem("<>:\"|?*\\"), "%3C%3E%3A%22%7C%3F%2A%5C");
  EXPECT_EQ(encode_key_for_filesystem(std::string_view("a\0b", 3)), "a%00b");
  EXPECT_EQ(encode_key_for_filesystem("\x1f\x7f"), "%1F%7F");
  EXPECT_EQ(encode_key_for_filesystem("plain_Key-1~!@#$^&()[]{}=+,;'`"),
            "plain_Key-1~!@#$^&()[]{}=+,;'`");
}

TEST(MemmapKeys, DecodeIsTheInverse) {
  using td::detail::decode_key_from_filesystem;
  using td::detail::encode_key_for_filesystem;
  EXPECT_EQ(decode_key_from_filesystem("%"), "");
  EXPECT_EQ(decode_key_from_filesystem("%2E"), ".");
  EXPECT_EQ(decode_key_from_filesystem("%2E%2E"), "..");
  EXPECT_EQ(decode_key_from_filesystem("a%2Fb%25%20c"), "a/b% c");
  EXPECT_EQ(decode_key_from_filesystem("tab%09here"), "tab\there");
  EXPECT_EQ(decode_key_from_filesystem("C%3Ax"), "C:x");
  // A '%' not followed by two hex digits is literal.
  EXPECT_EQ(decode_key_from_filesystem("50%"), "50%");
  EXPECT_EQ(decode_key_from_filesystem("c%d"), "c%d");
  EXPECT_EQ(decode_key_from_filesystem("%4"), "%4");
  EXPECT_EQ(decode_key_from_filesystem("%zz1"), "%zz1");
  EXPECT_EQ(decode_key_from_filesystem("a%"), "a%");
  for (std::string k : {"", ".", "..", "a/b", "a b", "50%", "C:x", "\u00e9", "tab\t", "a.b", "%2E",
                        "%", "%%", "x\x7f\x01y", "<>:\"|?*\\"})
    EXPECT_EQ(decode_key_from_filesystem(encode_key_for_filesystem(k)), k) << k;
  std::string nul("a\0b", 3);
  EXPECT_EQ(decode_key_from_filesystem(encode_key_for_filesystem(nul)), nul);
}

namespace {
// Keys that need encoding (docs/formats.md, "Key encoding") except "" (the core refuses empty keys;
// see Memmap.EmptyKeyIsEncodedButCannotBeLoaded) with their file names.
const std::vector<std::pair<std::string, std::string>> kOddKeys = {
    {"a/b", "a%2Fb"}, {"a b", "a%20b"},     {"50%", "50%25"},    {".", "%2E"},   {"..", "%2E%2E"},
    {"C:x", "C%3Ax"}, {"\u00e9", "\u00e9"}, {"tab\t", "tab%09"}, {"a.b", "a.b"},
};
}  // namespace

TEST_F(Memmap, OddKeysOfLeavesAreEncodedAndStayInsideThePrefix) {
  td::TensorDict t(at::IntArrayRef{2});
  int i = 0;
  for (const auto& [k, f] : kOddKeys) t.set(k, torch::full({2}, i++));
  EXPECT_TRUE(snapshot_dir(root).empty());
  t.memmap(P());
  std::set<std::string> names;
  for (const auto& [rel, content] : snapshot_dir(root)) names.insert(rel);
  std::set<std::string> expected = {"p", "p/meta.json"};
  for (const auto& [k, f] : kOddKeys) expected.insert("p/" + f + ".memmap");
  EXPECT_EQ(names, expected);
  auto meta = json::parse(read_text(prefix / "meta.json"));
  auto loaded = td::load_memmap(P());
  i = 0;
  for (const auto& [k, f] : kOddKeys) {
    SCOPED_TRACE(k);
    EXPECT_TRUE(meta.contains(k));  // raw key inside meta.json
    ASSERT_TRUE(loaded.contains(k));
    EXPECT_TRUE(at::equal(loaded.get(k), torch::full({2}, i++)));
  }
  std::vector<td::NestedKey> keys;
  for (const auto& [k, f] : kOddKeys) keys.emplace_back(k);
  EXPECT_EQ(loaded.keys(), keys);
}

TEST_F(Memmap, OddKeysOfNestedTensorDictsAreEncodedAndStayInsideThePrefix) {
  td::TensorDict t(at::IntArrayRef{2});
  int i = 0;
  for (const auto& [k, f] : kOddKeys)
    t.set(k, td::TensorDict({{"x", torch::full({2}, i++)}, {"a b", torch::zeros({2})}}, {2}));
  t.memmap(P());
  std::set<std::string> names;
  for (const auto& [rel, content] : snapshot_dir(root)) names.insert(rel);
  std::set<std::string> expected = {"p", "p/meta.json"};
  for (const auto& [k, f] : kOddKeys) {
    expected.insert("p/" + f);
    expected.insert("p/" + f + "/meta.json");
    expected.insert("p/" + f + "/x.memmap");
    expected.insert("p/" + f + "/a%20b.memmap");
  }
  EXPECT_EQ(names, expected);
  auto loaded = td::load_memmap(P());
  i = 0;
  for (const auto& [k, f] : kOddKeys) {
    SCOPED_TRACE(k);
    ASSERT_EQ(loaded.entry_kind(k), td::EntryKind::TensorDict);
    EXPECT_TRUE(at::equal(loaded.get({k, "x"}), torch::full({2}, i++)));
    EXPECT_TRUE(loaded.contains({k, "a b"}));
  }
}

TEST_F(Memmap, EmptyKeyIsEncodedButCannotBeLoaded) {
  // The writer encodes "" as "%" (docs/formats.md, "Key encoding"). The core refuses empty keys, so
  // the only way to hold one is the node interface; loading such a directory
  // is refused with an error naming the file.
  td::TensorDict t;
  t.set("ok", torch::ones({1}));
  t.node().write("", td::Value(torch::full({1}, 5.0)));
  t.memmap(P());
  EXPECT_EQ(read_text(prefix / "%.memmap"), bytes_of(torch::full({1}, 5.0)));
  EXPECT_TRUE(json::parse(read_text(prefix / "meta.json")).contains(""));
  TD_EXPECT_THROW_MSG(td::load_memmap(P()), td::KeyError, "meta.json", "empty key");
}

TEST_F(Memmap, LegacyRawNameIsFoundForSafeKeysOnly) {
  // 0.3.2 wrote raw names; "a b" is a safe legacy key (no '/', '\', drive).
  fs::create_directories(prefix);
  write_text(prefix / "meta.json",
             R"({"a b": {"device": "cpu", "shape": [1], "dtype": "torch.float32"}, )"
             R"("shape": [], "device": "cpu", "_type": "<class 'tensordict._td.TensorDict'>"})");
  write_text(prefix / "a b.memmap", std::string("\0\0\x80\x3f", 4));
  auto t = td::load_memmap(P());
  EXPECT_EQ(t.get("a b").item<float>(), 1.0f);
}

// ---- the layout before 0.4: raw names (docs/formats.md, "Layouts by version") -----------

// A leaf entry as Python 0.3.2 writes it (stdlib spacing, no "is_nested").
std::string v032_leaf(const std::string& key, int64_t n) {
  return json(key).dump() + R"(: {"device": "cpu", "shape": [)" + std::to_string(n) +
         R"(], "dtype": "torch.float32"})";
}
std::string v032_meta(const std::vector<std::string>& entries, int64_t batch) {
  std::string out = "{";
  for (const auto& e : entries) out += e + ", ";
  return out + R"("shape": [)" + std::to_string(batch) +
         R"(], "device": "cpu", "_type": "<class 'tensordict._td.TensorDict'>"})";
}

TEST_F(Memmap, Layout032FileNamesAreRawKeys) {
  fs::create_directories(prefix);
  write_text(prefix / "meta.json",
             v032_meta({v032_leaf("C:x", 2), v032_leaf("a b", 2), v032_leaf("a%20b", 2)}, 2));
  write_text(prefix / "C:x.memmap", bytes_of(torch::tensor({1.0f, 2.0f})));
  write_text(prefix / "a b.memmap", bytes_of(torch::tensor({3.0f, 4.0f})));
  write_text(prefix / "a%20b.memmap", bytes_of(torch::tensor({5.0f, 6.0f})));
  auto t = td::load_memmap(P());
  EXPECT_EQ(t.keys(), (std::vector<td::NestedKey>{"C:x", "a b", "a%20b"}));
  EXPECT_TRUE(at::equal(t.get("C:x"), torch::tensor({1.0f, 2.0f})));
  // Each key reads its own file: "a b" is not the encoded name "a%20b".
  EXPECT_TRUE(at::equal(t.get("a b"), torch::tensor({3.0f, 4.0f})));
  EXPECT_TRUE(at::equal(t.get("a%20b"), torch::tensor({5.0f, 6.0f})));
}

TEST_F(Memmap, Layout032DirectoryNamesAreNeverDecoded) {
  for (const std::string name : {"x%41y", "a%20b", "a b"}) {
    fs::create_directories(prefix / name);
    write_text(prefix / name / "meta.json", v032_meta({v032_leaf("v", 2)}, 2));
    write_text(prefix / name / "v.memmap",
               bytes_of(torch::full({2}, static_cast<float>(name.size()))));
  }
  fs::create_directories(prefix / "C:x" / "deeper");
  write_text(prefix / "C:x" / "meta.json", v032_meta({}, 2));
  write_text(prefix / "C:x" / "deeper" / "meta.json", v032_meta({v032_leaf("w", 2)}, 2));
  write_text(prefix / "C:x" / "deeper" / "w.memmap", bytes_of(torch::ones({2})));
  write_text(prefix / "meta.json", v032_meta({}, 2));
  auto t = td::load_memmap(P());
  EXPECT_EQ(t.keys(true, true),
            (std::vector<td::NestedKey>{
                {"C:x", "deeper", "w"}, {"a b", "v"}, {"a%20b", "v"}, {"x%41y", "v"}}));
  EXPECT_TRUE(at::equal(t.get({"a b", "v"}), torch::full({2}, 3.0f)));
  EXPECT_TRUE(at::equal(t.get({"a%20b", "v"}), torch::full({2}, 5.0f)));
  EXPECT_TRUE(at::equal(t.get({"x%41y", "v"}), torch::full({2}, 5.0f)));
}

TEST_F(Memmap, Layout032RawNameOutsideTheDirectoryIsAFormatError) {
  fs::create_directories(prefix);
  write_text(root / "secret.memmap", bytes_of(torch::ones({2})));
  write_text(prefix / "meta.json", v032_meta({v032_leaf("../secret", 2)}, 2));
  TD_EXPECT_THROW_MSG(td::load_memmap(P()), td::FormatError, "'../secret'", "outside");
}

TEST_F(Memmap, HeadLayoutIgnoresDirectoriesMetaJsonDoesNotList) {
  // A directory with "is_nested" entries is 0.5 or later: as in Python, only
  // the sub-directories listed in meta.json belong to it.
  td::TensorDict({{"x", torch::ones({2})}}, {2}).memmap(P());
  fs::create_directories(prefix / "stray");
  write_text(prefix / "stray" / "meta.json", v032_meta({}, 2));
  EXPECT_EQ(td::load_memmap(P()).keys(true), (std::vector<td::NestedKey>{"x"}));
}

TEST_F(Memmap, ReservedKeysAreRefusedAndNothingIsWritten) {
  for (const char* k : {"shape", "device", "_type"}) {
    SCOPED_TRACE(k);
    td::TensorDict leaf({{"ok", torch::ones({2})}, {k, torch::zeros({2})}}, {2});
    TD_EXPECT_THROW_MSG(leaf.memmap(P()), td::KeyError, k);
    EXPECT_FALSE(fs::exists(prefix));
    td::TensorDict nested({{"ok", torch::ones({2})}}, {2});
    nested.set({"sub", k}, torch::zeros({2}));
    TD_EXPECT_THROW_MSG(nested.memmap(P()), td::KeyError, k, "sub");
    EXPECT_FALSE(fs::exists(prefix));
    td::TensorDict dir({{"ok", torch::ones({2})}}, {2});
    dir.set({k, "x"}, torch::zeros({2}));
    TD_EXPECT_THROW_MSG(dir.memmap(P()), td::KeyError, k);
    EXPECT_FALSE(fs::exists(prefix));
  }
  td::TensorDict meta_dir({{"ok", torch::ones({2})}}, {2});
  meta_dir.set({"meta.json", "x"}, torch::zeros({2}));
  TD_EXPECT_THROW_MSG(meta_dir.memmap(P()), td::KeyError, "meta.json");
  EXPECT_FALSE(fs::exists(prefix));
  EXPECT_TRUE(snapshot_dir(root).empty());
}

// ---- the memmapped tensordict -------------------------------------------------------

TEST_F(Memmap, MemmapResultIsLockedAndWritesThroughInPlace) {
  td::TensorDict t(
      {{"x", torch::zeros({4, 2})}, {"sub", td::TensorDict({{"y", torch::zeros({4})}}, {4})}}, {4});
  auto m = t.memmap(P());
  EXPECT_TRUE(m.is_locked());
  EXPECT_TRUE(m.is_memmap());
  EXPECT_FALSE(t.is_locked());
  EXPECT_FALSE(t.is_memmap());
  EXPECT_TRUE(m.get_tensordict("sub").is_locked());
  EXPECT_EQ(m.device(), at::Device(at::kCPU));
  EXPECT_THROW(m.set("x", torch::ones({4, 2})), td::LockedError);
  EXPECT_THROW(m.set("new", torch::ones({4})), td::LockedError);
  EXPECT_FALSE(fs::exists(prefix / "new.memmap"));

  m.set_("x", torch::full({4, 2}, 3.0));
  EXPECT_TRUE(at::equal(td::load_memmap(P()).get("x"), torch::full({4, 2}, 3.0f)));

  m.update_(td::TensorDict({{"sub", td::TensorDict({{"y", torch::full({4}, 2.0)}}, {4})}}, {4}));
  EXPECT_TRUE(at::equal(td::load_memmap(P()).get({"sub", "y"}), torch::full({4}, 2.0f)));

  m.index_put_({Slice(1, 3)},
               td::TensorDict({{"x", torch::full({2, 2}, 9.0)},
                               {"sub", td::TensorDict({{"y", torch::full({2}, 8.0)}}, {2})}},
                              {2}));
  auto re = td::load_memmap(P());
  EXPECT_TRUE(
      at::equal(re.get("x"), torch::tensor({3.f, 3.f, 9.f, 9.f, 9.f, 9.f, 3.f, 3.f}).view({4, 2})));
  EXPECT_TRUE(at::equal(re.get({"sub", "y"}), torch::tensor({2.f, 8.f, 8.f, 2.f})));
  // The source was not touched.
  EXPECT_TRUE(at::equal(t.get("x"), torch::zeros({4, 2})));
}

TEST_F(Memmap, IndexingAMemmapKeepsWritingToTheFiles) {
  auto m = td::TensorDict({{"x", torch::zeros({3, 2})}}, {3}).memmap(P());
  auto row = m[1];
  row.set_("x", torch::ones({2}));
  EXPECT_TRUE(at::equal(td::load_memmap(P()).get("x")[1], torch::ones({2})));
}

TEST_F(Memmap, MemmapInPlace) {
  td::TensorDict t(
      {{"x", torch::arange(4.0)}, {"sub", td::TensorDict({{"y", torch::ones({4, 2})}}, {4})}}, {4});
  td::TensorDictBase sub = t.get_tensordict("sub");  // a handle taken before
  t.memmap_(P());
  EXPECT_TRUE(t.is_locked());
  EXPECT_TRUE(t.is_memmap());
  EXPECT_EQ(td::MemoryMappedTensor::filename(t.get("x")), (prefix / "x.memmap").string());
  EXPECT_EQ(td::MemoryMappedTensor::filename(sub.get("y")), (prefix / "sub/y.memmap").string());
  sub.set_("y", torch::full({4, 2}, 5.0));
  EXPECT_TRUE(at::equal(td::load_memmap(P()).get({"sub", "y"}), torch::full({4, 2}, 5.0f)));
  // memmap_ again to the same prefix reuses the files.
  t.memmap_(P(), td::MemmapOptions{.existsok = false});
  EXPECT_TRUE(at::equal(t.get({"sub", "y"}), torch::full({4, 2}, 5.0f)));
}

TEST_F(Memmap, MemmapLikeOfAnExpandedSourceIsAFullSizeZeroFile) {
  td::TensorDict t({{"x", torch::zeros({}).expand({1000, 4})}}, {1000});
  auto m = t.memmap_like(P());
  EXPECT_EQ(fs::file_size(prefix / "x.memmap"), 16000u);
  std::string bytes = read_text(prefix / "x.memmap");
  EXPECT_EQ(bytes, std::string(16000, '\0'));
  EXPECT_EQ(m.get("x").sizes().vec(), (Shape{1000, 4}));
  EXPECT_TRUE(m.get("x").is_contiguous());
  EXPECT_TRUE(m.is_memmap());
  // memmap_like copies no data, even from a non-zero source.
  auto like = td::TensorDict({{"y", torch::ones({3})}}, {3}).memmap_like((root / "q").string());
  EXPECT_TRUE(at::equal(like.get("y"), torch::zeros({3})));
}

TEST_F(Memmap, SavedPath) {
  td::TensorDict t(
      {{"x", torch::zeros({2})}, {"sub", td::TensorDict({{"y", torch::zeros({2})}}, {2})}}, {2});
  EXPECT_FALSE(t.saved_path().has_value());
  auto m = t.memmap(P());
  EXPECT_EQ(m.saved_path(), fs::absolute(prefix).string());
  EXPECT_EQ(m.get_tensordict("sub").saved_path(), fs::absolute(prefix / "sub").string());
  auto l = td::load_memmap(P());
  EXPECT_EQ(l.saved_path(), fs::absolute(prefix).string());
  EXPECT_EQ(l.get_tensordict("sub").saved_path(), fs::absolute(prefix / "sub").string());
  t.memmap_((root / "q").string());
  EXPECT_EQ(t.saved_path(), fs::absolute(root / "q").string());
  EXPECT_EQ(t.get_tensordict("sub").saved_path(), fs::absolute(root / "q/sub").string());
}

TEST_F(Memmap, MemmapRefreshRereadsTheDirectory) {
  auto m = td::TensorDict({{"x", torch::zeros({3})}}, {3}).memmap(P());
  // Another handle changes a value on disk.
  auto other = td::load_memmap(P());
  other.set_("x", torch::full({3}, 4.0));
  m.memmap_refresh_();
  EXPECT_TRUE(at::equal(m.get("x"), torch::full({3}, 4.0f)));
  // Another writer rewrites the directory with a new key.
  td::TensorDict({{"x", torch::full({3}, 6.0)}, {"y", torch::ones({3, 2})}}, {3}).memmap(P());
  m.memmap_refresh_();
  EXPECT_TRUE(m.is_locked());
  EXPECT_TRUE(m.is_memmap());
  ASSERT_TRUE(m.contains("y"));
  EXPECT_TRUE(at::equal(m.get("y"), torch::ones({3, 2})));
  EXPECT_TRUE(at::equal(m.get("x"), torch::full({3}, 6.0f)));

  td::TensorDict never({{"x", torch::zeros({1})}});
  EXPECT_THROW(never.memmap_refresh_(), td::ValueError);
}

TEST_F(Memmap, ReadOnlyLoadIsCopyOnWrite) {
  td::TensorDict({{"x", torch::arange(4.0)}}, {4}).memmap(P());
  const std::string before = read_text(prefix / "x.memmap");
  auto ro = td::load_memmap(P(), td::LoadOptions{.writable = false});
  ro.get("x").fill_(9.0);
  ro.set_("x", torch::full({4}, 7.0));
  EXPECT_TRUE(at::equal(ro.get("x"), torch::full({4}, 7.0f)));  // this process sees it
  EXPECT_EQ(read_text(prefix / "x.memmap"), before);            // the file does not
  EXPECT_TRUE(at::equal(td::load_memmap(P()).get("x"), torch::arange(4.0f)));
}

TEST_F(Memmap, MetaDeviceLoadReadsNoData) {
  td::TensorDict({{"x", torch::zeros({4, 3})},
                  {"b", torch::zeros({4}, torch::kBFloat16)},
                  {"sub", td::TensorDict({{"y", torch::zeros({4, 2}, torch::kLong)}}, {4})},
                  {"label", "cat"}},
                 {4})
      .memmap(P());
  fs::remove(prefix / "x.memmap");
  fs::remove(prefix / "b.memmap");
  fs::remove(prefix / "sub/y.memmap");
  auto t = td::load_memmap(P(), td::LoadOptions{.device = at::Device(at::kMeta)});
  EXPECT_EQ(t.batch_size().vec(), (Shape{4}));
  EXPECT_EQ(t.get("x").device().type(), at::kMeta);
  EXPECT_EQ(t.get("x").sizes().vec(), (Shape{4, 3}));
  EXPECT_EQ(t.get("b").scalar_type(), at::kBFloat16);
  EXPECT_EQ(t.get({"sub", "y"}).sizes().vec(), (Shape{4, 2}));
  EXPECT_EQ(t.get({"sub", "y"}).device().type(), at::kMeta);
  EXPECT_EQ(t.get_non_tensor("label"), json("cat"));
}

// ---- MemoryMappedTensor -------------------------------------------------------------

TEST_F(Memmap, MemoryMappedTensorFromTensor) {
  fs::path f = root / "t.bin";
  at::Tensor src = torch::arange(12, torch::kInt).reshape({3, 4}).t();
  at::Tensor m = td::MemoryMappedTensor::from_tensor(src, f.string());
  EXPECT_TRUE(at::equal(m, src));
  EXPECT_TRUE(m.is_contiguous());
  EXPECT_EQ(td::MemoryMappedTensor::filename(m), f.string());
  EXPECT_EQ(read_text(f), bytes_of(src));
  // Views keep the filename; writes through them reach the file.
  at::Tensor row = m[1];
  at::Tensor view = m.view({-1}).slice(0, 2, 6);
  EXPECT_EQ(td::MemoryMappedTensor::filename(row), f.string());
  EXPECT_EQ(td::MemoryMappedTensor::filename(view), f.string());
  row.fill_(-1);
  at::Tensor back = td::MemoryMappedTensor::from_filename(f.string(), at::kInt, {4, 3});
  EXPECT_TRUE(at::equal(back[1], torch::full({3}, -1, torch::kInt)));
  // Not mapped: no filename.
  EXPECT_FALSE(td::MemoryMappedTensor::filename(src).has_value());
  EXPECT_FALSE(td::MemoryMappedTensor::is_memory_mapped(m.clone()));
  EXPECT_FALSE(td::MemoryMappedTensor::filename(at::Tensor()).has_value());
}

TEST_F(Memmap, MemoryMappedTensorEmptyAndZeros) {
  for (bool use_zeros : {false, true}) {
    fs::path f = root / (use_zeros ? "z.bin" : "e.bin");
    write_text(f, std::string(1000, 'x'));  // an older, longer file is replaced
    at::Tensor m = use_zeros ? td::MemoryMappedTensor::zeros(f.string(), {3, 4}, at::kDouble)
                             : td::MemoryMappedTensor::empty(f.string(), {3, 4}, at::kDouble);
    EXPECT_EQ(m.sizes().vec(), (Shape{3, 4}));
    EXPECT_EQ(m.scalar_type(), at::kDouble);
    EXPECT_EQ(fs::file_size(f), 96u);
    EXPECT_TRUE(at::equal(m, torch::zeros({3, 4}, torch::kDouble)));
    EXPECT_EQ(td::MemoryMappedTensor::filename(m), f.string());
    m.fill_(2.0);
    EXPECT_TRUE(at::equal(td::MemoryMappedTensor::from_filename(f.string(), at::kDouble, {12}),
                          torch::full({12}, 2.0, torch::kDouble)));
  }
}

TEST_F(Memmap, MemoryMappedTensorFromFilename) {
  fs::path f = root / "f.bin";
  write_text(f, bytes_of(torch::arange(6, torch::kLong)) + "junk");  // longer: fine
  at::Tensor m = td::MemoryMappedTensor::from_filename(f.string(), at::kLong, {2, 3});
  EXPECT_TRUE(at::equal(m, torch::arange(6, torch::kLong).view({2, 3})));
  at::Tensor ro = td::MemoryMappedTensor::from_filename(f.string(), at::kLong, {6}, false);
  ro.fill_(0);
  EXPECT_TRUE(at::equal(m, torch::arange(6, torch::kLong).view({2, 3})));  // copy-on-write
  TD_EXPECT_THROW_MSG(td::MemoryMappedTensor::from_filename(f.string(), at::kLong, {7}),
                      td::FormatError, f.string().c_str(), "truncated");
  TD_EXPECT_THROW_MSG(
      td::MemoryMappedTensor::from_filename((root / "nope").string(), at::kLong, {1}), td::Error,
      "nope");
}

// ---- corrupt or foreign directories --------------------------------------------------

namespace {
// Writes a small valid directory: x f32[2,3], sub/y i64[2], label "cat".
void write_sample(const fs::path& prefix) {
  td::TensorDict({{"x", torch::zeros({2, 3})},
                  {"sub", td::TensorDict({{"y", torch::arange(2)}}, {2})},
                  {"label", "cat"}},
                 {2})
      .memmap(prefix.string());
}
}  // namespace

TEST_F(Memmap, TruncatedLeafFileIsAFormatError) {
  write_sample(prefix);
  fs::resize_file(prefix / "x.memmap", 20);
  auto before = snapshot_dir(root);
  TD_EXPECT_THROW_MSG(td::load_memmap(P()), td::FormatError, (prefix / "x.memmap").string().c_str(),
                      "'x'", "truncated", "20");
  EXPECT_EQ(snapshot_dir(root), before);
  fs::resize_file(prefix / "x.memmap", 24);
  fs::resize_file(prefix / "sub/y.memmap", 3);
  before = snapshot_dir(root);
  TD_EXPECT_THROW_MSG(td::load_memmap(P()), td::FormatError,
                      (prefix / "sub/y.memmap").string().c_str(), "('sub', 'y')");
  EXPECT_EQ(snapshot_dir(root), before);
}

TEST_F(Memmap, UnknownDtypeIsAFormatError) {
  write_sample(prefix);
  std::string meta = read_text(prefix / "meta.json");
  meta.replace(meta.find("torch.float32"), 13, "torch.float128");
  write_text(prefix / "meta.json", meta);
  auto before = snapshot_dir(root);
  TD_EXPECT_THROW_MSG(td::load_memmap(P()), td::FormatError,
                      (prefix / "meta.json").string().c_str(), "'x'", "torch.float128");
  EXPECT_EQ(snapshot_dir(root), before);
}

TEST_F(Memmap, MalformedJsonIsAFormatError) {
  write_sample(prefix);
  write_text(prefix / "sub/meta.json", R"({"y": {"device": "cpu", "shape": [2], )");
  auto before = snapshot_dir(root);
  TD_EXPECT_THROW_MSG(td::load_memmap(P()), td::FormatError,
                      (prefix / "sub/meta.json").string().c_str(), "malformed");
  EXPECT_EQ(snapshot_dir(root), before);
}

TEST_F(Memmap, MissingMetaJsonIsAFormatError) {
  write_sample(prefix);
  fs::remove(prefix / "meta.json");
  auto before = snapshot_dir(root);
  TD_EXPECT_THROW_MSG(td::load_memmap(P()), td::FormatError,
                      (prefix / "meta.json").string().c_str());
  EXPECT_EQ(snapshot_dir(root), before);
  TD_EXPECT_THROW_MSG(td::load_memmap((root / "nowhere").string()), td::FormatError, "nowhere");
}

TEST_F(Memmap, MetaJsonArrayIsAFormatError) {
  write_sample(prefix);
  write_text(prefix / "meta.json", "[1, 2, 3]");
  auto before = snapshot_dir(root);
  TD_EXPECT_THROW_MSG(td::load_memmap(P()), td::FormatError,
                      (prefix / "meta.json").string().c_str(), "not a JSON object");
  EXPECT_EQ(snapshot_dir(root), before);
}

TEST_F(Memmap, MissingLeafFileIsAFormatError) {
  write_sample(prefix);
  fs::remove(prefix / "sub/y.memmap");
  auto before = snapshot_dir(root);
  TD_EXPECT_THROW_MSG(td::load_memmap(P()), td::FormatError,
                      (prefix / "sub/y.memmap").string().c_str(), "('sub', 'y')",
                      (prefix / "sub/meta.json").string().c_str());
  EXPECT_EQ(snapshot_dir(root), before);
}

TEST_F(Memmap, NegativeShapeIsAFormatError) {
  write_sample(prefix);
  std::string meta = read_text(prefix / "meta.json");
  meta.replace(meta.find("[2,3]"), 5, "[2,-3]");
  write_text(prefix / "meta.json", meta);
  auto before = snapshot_dir(root);
  TD_EXPECT_THROW_MSG(td::load_memmap(P()), td::FormatError,
                      (prefix / "meta.json").string().c_str(), "'x'", "shape");
  EXPECT_EQ(snapshot_dir(root), before);
}

TEST_F(Memmap, LeafEntryWithoutShapeIsAFormatError) {
  write_sample(prefix);
  write_text(prefix / "sub/meta.json",
             R"({"y":{"device":"cpu","dtype":"torch.int64"},"shape":[2],"device":"cpu",)"
             R"("_type":"<class 'tensordict._td.TensorDict'>"})");
  TD_EXPECT_THROW_MSG(td::load_memmap(P()), td::FormatError,
                      (prefix / "sub/meta.json").string().c_str(), "('sub', 'y')", "shape");
}

TEST_F(Memmap, WronglyTypedFieldsAreFormatErrors) {
  write_sample(prefix);
  const std::string good = read_text(prefix / "meta.json");
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"\"is_nested\":false", "\"is_nested\":\"no\""},
           {"\"_type\":\"<class 'tensordict._td.TensorDict'>\"", "\"_type\":3"},
           {"\"shape\":[2],\"device\"", "\"shape\":[2.5],\"device\""},
           {"\"dtype\":\"torch.float32\"", "\"dtype\":32"}}) {
    SCOPED_TRACE(to);
    std::string meta = good;
    ASSERT_NE(meta.find(from), std::string::npos);
    meta.replace(meta.find(from), from.size(), to);
    write_text(prefix / "meta.json", meta);
    TD_EXPECT_THROW_MSG(td::load_memmap(P()), td::FormatError,
                        (prefix / "meta.json").string().c_str());
  }
}

TEST_F(Memmap, LeafShapeNotStartingWithTheBatchSizeIsAFormatError) {
  write_sample(prefix);
  std::string meta = read_text(prefix / "meta.json");
  meta.replace(meta.find("[2,3]"), 5, "[3,2]");
  write_text(prefix / "meta.json", meta);
  TD_EXPECT_THROW_MSG(td::load_memmap(P()), td::FormatError,
                      (prefix / "meta.json").string().c_str(), "'x'");
}

TEST_F(Memmap, StdlibSpacedJsonLoads) {
  fs::create_directories(prefix / "s");
  // 0.3.2 spelling: json.dump with ", " / ": " and \u escapes.
  write_text(
      prefix / "meta.json",
      "{\"\\u00e9\": {\"device\": \"cpu\", \"shape\": [2, 1], \"dtype\": \"torch.int16\"}, "
      "\"s\": {\"type\": \"NonTensorData\"}, "
      "\"shape\": [2], \"device\": \"cpu\", \"_type\": \"<class 'tensordict._td.TensorDict'>\"}");
  write_text(prefix / "\u00e9.memmap", std::string("\x01\x00\xff\xff", 4));
  write_text(
      prefix / "s/meta.json",
      "{\"_type\": \"<class 'tensordict.tensorclass.NonTensorData'>\", \"data\": "
      "{\"caf\\u00e9\": [1, 2.5e-05, null, true]}, \"_metadata\": null, \"_is_non_tensor\": true}");
  auto t = td::load_memmap(P());
  EXPECT_TRUE(at::equal(t.get("\u00e9"), torch::tensor({1, -1}, torch::kShort).view({2, 1})));
  EXPECT_EQ(t.get_non_tensor("s"), json::parse("{\"caf\u00e9\": [1, 2.5e-05, null, true]}"));
}

TEST_F(Memmap, DeviceNoneMissingFieldsAndLeafDevicesAreAccepted) {
  fs::create_directories(prefix / "sub");
  // "None" (and a missing "device") mean no device; a missing "shape" means
  // batch []; a leaf's "device" is the source device and is ignored
  // (docs/formats.md, "meta.json of a tensordict").
  write_text(prefix / "meta.json",
             R"({"x":{"device":"cuda:0","shape":[2],"dtype":"torch.float32","is_nested":false},)"
             R"("sub":{"type":"TensorDict"},"shape":[2],"device":"None",)"
             R"("_type":"<class 'tensordict._td.TensorDict'>"})");
  write_text(prefix / "x.memmap", bytes_of(torch::tensor({1.0f, 2.0f})));
  write_text(prefix / "sub/meta.json", R"({"_type":"<class 'tensordict._td.TensorDict'>"})");
  auto t = td::load_memmap(P());
  EXPECT_FALSE(t.device().has_value());
  EXPECT_EQ(t.get("x").device(), at::Device(at::kCPU));
  EXPECT_TRUE(at::equal(t.get("x"), torch::tensor({1.0f, 2.0f})));
  ASSERT_EQ(t.entry_kind("sub"), td::EntryKind::TensorDict);
  EXPECT_FALSE(t.get_tensordict("sub").device().has_value());
}

TEST_F(Memmap, UnavailableDeviceOfATensorDictIsAnError) {
  write_sample(prefix);
  std::string meta = read_text(prefix / "meta.json");
  const std::string from = "\"shape\":[2],\"device\":\"cpu\"";
  ASSERT_NE(meta.find(from), std::string::npos);
  meta.replace(meta.find(from), from.size(), "\"shape\":[2],\"device\":\"cuda:0\"");
  write_text(prefix / "meta.json", meta);
  if (torch::cuda::is_available()) GTEST_SKIP() << "CUDA is available";
  TD_EXPECT_THROW_MSG(td::load_memmap(P()), td::DeviceError,
                      (prefix / "meta.json").string().c_str(), "'x'", "cuda");
  TD_EXPECT_THROW_MSG(td::load_memmap(P(), td::LoadOptions{.device = at::Device("cuda:0")}),
                      td::DeviceError, "'x'", "cuda");
}

TEST_F(Memmap, NaNAndInfinityTokensLoad) {
  fs::create_directories(prefix / "v");
  write_text(prefix / "meta.json",
             R"({"v": {"type": "NonTensorData"}, "shape": [], "device": "cpu", )"
             R"("_type": "<class 'tensordict._td.TensorDict'>"})");
  write_text(prefix / "v/meta.json",
             R"({"_type": "<class 'tensordict.tensorclass.NonTensorData'>", )"
             R"("data": {"nan": NaN, "inf": Infinity, "ninf": -Infinity, "list": [NaN, 1], )"
             R"("str": "NaN Infinity"}, "_metadata": null, "_is_non_tensor": true})");
  auto t = td::load_memmap(P());
  json v = t.get_non_tensor("v");
  ASSERT_TRUE(v.at("nan").is_number_float()) << v.dump();
  EXPECT_TRUE(std::isnan(v.at("nan").get<double>()));
  ASSERT_TRUE(v.at("inf").is_number_float()) << v.dump();
  EXPECT_EQ(v.at("inf").get<double>(), std::numeric_limits<double>::infinity());
  ASSERT_TRUE(v.at("ninf").is_number_float()) << v.dump();
  EXPECT_EQ(v.at("ninf").get<double>(), -std::numeric_limits<double>::infinity());
  ASSERT_TRUE(v.at("list").at(0).is_number_float()) << v.dump();
  EXPECT_TRUE(std::isnan(v.at("list").at(0).get<double>()));
  EXPECT_EQ(v.at("list").at(1), 1);
  EXPECT_EQ(v.at("str"), "NaN Infinity");
}

TEST_F(Memmap, NonFiniteFloatsAreWrittenAsNullLikeOrjson) {
  td::TensorDict t;
  t.set_non_tensor("v", json::array({std::nan(""), 1.5}));
  t.memmap(P());
  EXPECT_EQ(json::parse(read_text(prefix / "v/meta.json")).at("data"), json::parse("[null,1.5]"));
}

// ---- existing files -------------------------------------------------------------------

TEST_F(Memmap, ExistsokFalseRefusesAnExistingLeafAndWritesNothing) {
  td::TensorDict({{"x", torch::zeros({2})}}, {2}).memmap(P());
  auto before = snapshot_dir(root);
  td::TensorDict again({{"a_new", torch::ones({2})},
                        {"x", torch::ones({2})},
                        {"sub", td::TensorDict({{"y", torch::ones({2})}}, {2})}},
                       {2});
  TD_EXPECT_THROW_MSG(again.memmap(P(), td::MemmapOptions{.existsok = false}), td::StorageError,
                      (prefix / "x.memmap").string().c_str(), "'x'");
  EXPECT_EQ(snapshot_dir(root), before);
  // With existsok (the default) it is overwritten.
  again.memmap(P());
  EXPECT_TRUE(at::equal(td::load_memmap(P()).get("x"), torch::ones({2})));
}

TEST_F(Memmap, SourceMappedFromTheTargetFileIsReadBeforeItIsOverwritten) {
  auto m = td::TensorDict({{"x", torch::arange(8.0).view({4, 2})}}, {4}).memmap(P());
  // A part of m saved over m's own directory: x.memmap is both the source and
  // the target.
  auto part = m.index({Slice(1, 3)});
  auto saved = part.memmap(P());
  EXPECT_TRUE(at::equal(saved.get("x"), torch::arange(2.0f, 6.0f).view({2, 2})));
  EXPECT_TRUE(at::equal(td::load_memmap(P()).get("x"), torch::arange(2.0f, 6.0f).view({2, 2})));
  EXPECT_EQ(fs::file_size(prefix / "x.memmap"), 16u);
}

TEST_F(Memmap, SourceMappedFromAnotherTargetFileIsReadBeforeItIsOverwritten) {
  auto m = td::TensorDict({{"x", torch::arange(4.0)}}, {4}).memmap(P());
  // y's source is x.memmap, which this same call rewrites with 5s.
  td::TensorDict t({{"x", torch::full({4}, 5.0)}, {"y", m.get("x")}}, {4});
  t.memmap(P(), td::MemmapOptions{.num_threads = 1});
  auto l = td::load_memmap(P());
  EXPECT_TRUE(at::equal(l.get("x"), torch::full({4}, 5.0f)));
  EXPECT_TRUE(at::equal(l.get("y"), torch::arange(4.0f)));
}

TEST_F(Memmap, SavingOverADirectoryLeavesEarlierMappingsOfItIntact) {
  td::TensorDict({{"x", torch::arange(1024.0)}}, {1024}).memmap(P());
  at::Tensor old_x = td::load_memmap(P()).get("x");
  td::TensorDict({{"x", torch::full({1024}, 7.0)}}, {1024}).memmap(P());
  // The old file was replaced, not truncated: its mapping still reads the old
  // bytes (a truncated one would crash with SIGBUS), the directory the new ones.
  EXPECT_TRUE(at::equal(old_x, torch::arange(1024.0f)));
  EXPECT_TRUE(at::equal(td::load_memmap(P()).get("x"), torch::full({1024}, 7.0f)));
}

TEST_F(Memmap, ResavingReplacesDataAndDtype) {
  td::TensorDict({{"x", torch::zeros({2})}}, {2}).memmap(P());
  td::TensorDict({{"x", torch::ones({2})}}, {2}).memmap(P());  // same layout, new data
  EXPECT_TRUE(at::equal(td::load_memmap(P()).get("x"), torch::ones({2})));
  td::TensorDict({{"x", torch::ones({2}, torch::kDouble)}}, {2}).memmap(P());  // new dtype
  EXPECT_EQ(td::load_memmap(P()).get("x").scalar_type(), torch::kDouble);
  EXPECT_EQ(fs::file_size(prefix / "x.memmap"), 16u);
}

// ---- saving over an earlier save -------------------------------------------------------

TEST_F(Memmap, ResavingWithFewerKeysLeavesExactlyWhatWasSaved) {
  td::TensorDict a({{"x", torch::ones({4})}}, {4});
  a.set({"old", "c"}, torch::zeros({4}));
  a.set_non_tensor("label", "cat");
  a.set("gone", torch::zeros({4, 2}));
  a.memmap(P());
  td::TensorDict({{"x", torch::full({4}, 2.0)}}, {4}).memmap(P());
  auto back = td::load_memmap(P());
  EXPECT_EQ(back.keys(true), (std::vector<td::NestedKey>{"x"}));
  EXPECT_TRUE(at::equal(back.get("x"), torch::full({4}, 2.0f)));
  // Nothing of the earlier save remains for a reader that scans directories
  // (Python 0.3.2) either, and nothing is left beside the prefix.
  EXPECT_EQ((std::set<std::string>{"meta.json", "x.memmap"}), [&] {
    std::set<std::string> names;
    for (const auto& [rel, _] : snapshot_dir(prefix)) names.insert(rel);
    return names;
  }());
  EXPECT_EQ(snapshot_dir(root).size(), 3u);  // p, p/meta.json, p/x.memmap
}

TEST_F(Memmap, ResavingWithAnotherBatchSizeLoadsAsSaved) {
  td::TensorDict a({{"x", torch::ones({4})}}, {4});
  a.set({"old", "c"}, torch::zeros({4}));
  a.memmap(P());
  td::TensorDict b({{"x", torch::full({2, 3}, 2.0)}}, {2});
  b.set({"new", "d"}, torch::ones({2, 5}));
  b.memmap(P());
  auto back = td::load_memmap(P());
  EXPECT_EQ(back.batch_size().vec(), (Shape{2}));
  EXPECT_EQ(back.keys(true), (std::vector<td::NestedKey>{"x", "new", {"new", "d"}}));
  EXPECT_TRUE(back.equal(b));
}

TEST_F(Memmap, FailedSaveLeavesTheEarlierSaveIntact) {
  td::TensorDict a({{"x", torch::ones({4})}, {"y", torch::arange(4.0)}}, {4});
  a.set({"sub", "z"}, torch::zeros({4}));
  a.memmap(P());
  const auto before = snapshot_dir(root);
  // A key whose file name is longer than the filesystem allows (NAME_MAX):
  // its file cannot be created after x's has been written (one thread, in
  // key order), a real failure half-way through the save.
  const std::string too_long(300, 'k');
  td::TensorDict b({{"x", torch::full({4}, 2.0)}, {too_long, torch::zeros({4})}}, {4});
  TD_EXPECT_THROW_MSG(b.memmap(P(), td::MemmapOptions{.num_threads = 1}), td::StorageError,
                      "File name too long", ("'" + too_long + "'").c_str());
  EXPECT_EQ(snapshot_dir(root), before);  // no staging directory left either
  auto back = td::load_memmap(P());
  EXPECT_TRUE(back.equal(a));
  // The same for a nested directory that cannot be created, and for
  // memmap_, whose tensordict is left as it was.
  td::TensorDict c({{"x", torch::full({4}, 3.0)}}, {4});
  c.set({too_long, "w"}, torch::zeros({4}));
  EXPECT_THROW(c.memmap_(P()), td::StorageError);
  EXPECT_EQ(snapshot_dir(root), before);
  EXPECT_FALSE(c.is_memmap());
  EXPECT_FALSE(c.is_locked());
  EXPECT_FALSE(td::MemoryMappedTensor::is_memory_mapped(c.get("x")));
}

TEST_F(Memmap, MemmapInPlaceAgainAtTheSamePrefixKeepsTheData) {
  td::TensorDict t({{"x", torch::arange(6.0)}}, {6});
  t.set({"sub", "y"}, torch::ones({6}));
  t.memmap_(P());
  at::Tensor x = t.get("x");
  // Saved again where its leaves already live: the files are reused (linked
  // into the new directory), so the mapped tensors still write to the save.
  t.memmap_(P());
  EXPECT_TRUE(at::equal(td::load_memmap(P()).get("x"), torch::arange(6.0f)));
  t.get("x").fill_(9.0);
  EXPECT_TRUE(at::equal(td::load_memmap(P()).get("x"), torch::full({6}, 9.0f)));
  EXPECT_TRUE(at::equal(x, torch::full({6}, 9.0f)));
}

TEST_F(Memmap, SaveRefusesANonEmptyDirectoryThatIsNotASave) {
  fs::create_directories(prefix);
  write_text(prefix / "notes.txt", "precious");
  TD_EXPECT_THROW_MSG(td::TensorDict({{"x", torch::ones({2})}}, {2}).memmap(P()), td::StorageError,
                      "refusing to replace", "meta.json");
  EXPECT_EQ(read_text(prefix / "notes.txt"), "precious");
  // An empty directory is fine.
  fs::remove(prefix / "notes.txt");
  td::TensorDict({{"x", torch::ones({2})}}, {2}).memmap(P());
  EXPECT_TRUE(at::equal(td::load_memmap(P()).get("x"), torch::ones({2})));
}

TEST_F(Memmap, PrefixThroughASymlinkOrWithATrailingSlashIsReplacedWhereItLives) {
  td::TensorDict a({{"x", torch::ones({2})}, {"y", torch::ones({2})}}, {2});
  a.memmap(P());
  fs::create_directory_symlink(prefix, root / "link");
  td::TensorDict({{"x", torch::full({2}, 2.0)}}, {2}).memmap((root / "link").string());
  EXPECT_TRUE(fs::is_symlink(root / "link"));
  EXPECT_EQ(td::load_memmap(P()).keys(), (std::vector<td::NestedKey>{"x"}));
  td::TensorDict({{"z", torch::full({2}, 3.0)}}, {2}).memmap(P() + "/");
  EXPECT_EQ(td::load_memmap((root / "link").string()).keys(), (std::vector<td::NestedKey>{"z"}));
  // Nothing else beside or inside (snapshot_dir would resolve the link).
  auto names = [](const fs::path& dir) {
    std::set<std::string> out;
    for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
    return out;
  };
  EXPECT_EQ(names(root), (std::set<std::string>{"link", "p"}));
  EXPECT_EQ(names(prefix), (std::set<std::string>{"meta.json", "z.memmap"}));
}

TEST_F(Memmap, MemmapAndMemmapLikeKeepInsertionOrder) {
  td::TensorDict t({{"a", torch::zeros({2})}}, {2});
  t.set({"n", "z"}, torch::zeros({2}));
  t.set({"n", "inner", "q"}, torch::zeros({2}));
  t.set({"n", "b"}, torch::zeros({2}));
  t.set_non_tensor("s", "x");
  t.set("c", torch::zeros({2}));
  const std::vector<td::NestedKey> order{
      "a", "n", {"n", "z"}, {"n", "inner"}, {"n", "inner", "q"}, {"n", "b"}, "s", "c"};
  ASSERT_EQ(t.keys(true), order);
  EXPECT_EQ(t.memmap(P()).keys(true), order);
  EXPECT_EQ(td::load_memmap(P()).keys(true), order);
  EXPECT_EQ(t.memmap_like((root / "like").string()).keys(true), order);
}

TEST_F(Memmap, SymlinkedLeafInAnEarlierSaveIsNotWrittenThrough) {
  td::TensorDict({{"x", torch::zeros({4})}}, {4}).memmap(P());
  fs::path outside = root / "outside.bin";
  write_text(outside, "precious");
  fs::remove(prefix / "x.memmap");
  fs::create_symlink(outside, prefix / "x.memmap");
  td::TensorDict t({{"x", torch::ones({4})}}, {4});
  t.memmap(P());
  // The new directory has its own file; the link's target is untouched.
  EXPECT_EQ(read_text(outside), "precious");
  EXPECT_FALSE(fs::is_symlink(prefix / "x.memmap"));
  EXPECT_TRUE(at::equal(td::load_memmap(P()).get("x"), torch::ones({4})));
}

TEST_F(Memmap, SymlinkedLeafTargetIsRefusedByMemoryMappedTensor) {
  fs::path outside = root / "outside.bin";
  write_text(outside, "precious");
  fs::create_symlink(outside, root / "x.memmap");
  TD_EXPECT_THROW_MSG(
      td::MemoryMappedTensor::from_tensor(torch::ones({4}), (root / "x.memmap").string()),
      td::StorageError, "symbolic link");
  EXPECT_EQ(read_text(outside), "precious");
}

// ---- shared memory ---------------------------------------------------------------------

TEST_F(Memmap, ShareMemoryLocksAndLivesInDevShm) {
  td::TensorDict t(
      {{"x", torch::arange(4.0)}, {"sub", td::TensorDict({{"y", torch::ones({4})}}, {4})}}, {4});
  t.share_memory_();
  EXPECT_TRUE(t.is_shared());
  EXPECT_FALSE(t.is_memmap());
  EXPECT_TRUE(t.is_locked());
  EXPECT_TRUE(t.get_tensordict("sub").is_shared());
  const std::string name = t.shared_name();
  ASSERT_EQ(name.rfind("/dev/shm/tensordict-", 0), 0u) << name;
  shared_names.push_back(name);
  EXPECT_TRUE(fs::exists(fs::path(name) / "meta.json"));
  EXPECT_EQ(td::MemoryMappedTensor::filename(t.get("x")), name + "/x.memmap");
  EXPECT_TRUE(at::equal(t.get("x"), torch::arange(4.0f)));
  EXPECT_NO_THROW(t.share_memory_());  // already shared: no-op
  EXPECT_EQ(t.shared_name(), name);
  auto other = td::attach_shared(name);
  EXPECT_TRUE(other.is_shared());
  EXPECT_TRUE(other.is_locked());
  other.set_("x", torch::full({4}, 3.0));
  EXPECT_TRUE(at::equal(t.get("x"), torch::full({4}, 3.0f)));
  td::unlink_shared(name);
  EXPECT_FALSE(fs::exists(name));
  EXPECT_EQ(td::TensorDict().shared_name(), "");
}

TEST_F(Memmap, SharedMemoryAcrossFork) {
  // No intra-op threads may be needed in the child: fork() copies only the
  // calling thread.
  struct RestoreThreads {
    int n = torch::get_num_threads();
    ~RestoreThreads() { torch::set_num_threads(n); }
  } restore_threads;
  torch::set_num_threads(1);
  td::TensorDict t(
      {{"x", torch::zeros({4, 3})}, {"sub", td::TensorDict({{"y", torch::zeros({4})}}, {4})}}, {4});
  t.share_memory_();
  const std::string name = t.shared_name();
  shared_names.push_back(name);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int code = 0;
    try {
      auto child = td::attach_shared(name);
      child.index_put_(
          {Slice(1, 3)},
          td::TensorDict({{"x", torch::full({2, 3}, 7.0)},
                          {"sub", td::TensorDict({{"y", torch::full({2}, 5.0)}}, {2})}},
                         {2}));
    } catch (...) {
      code = 3;
    }
    ::_exit(code);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_TRUE(at::equal(
      t.get("x"),
      torch::tensor({0.f, 0.f, 0.f, 7.f, 7.f, 7.f, 7.f, 7.f, 7.f, 0.f, 0.f, 0.f}).view({4, 3})));
  EXPECT_TRUE(at::equal(t.get({"sub", "y"}), torch::tensor({0.f, 5.f, 5.f, 0.f})));
  td::unlink_shared(name);
  EXPECT_FALSE(fs::exists(name));
}

TEST_F(Memmap, UnlinkSharedRefusesOtherNames) {
  fs::create_directories(prefix);
  for (const std::string& bad :
       {P(), std::string("/dev/shm"), std::string("/dev/shm/other"),
        std::string("/tmp/tensordict-1"), std::string("/dev/shm/tensordict-1/../../tmp"),
        std::string("/dev/shm/tensordict-1/sub"), std::string("")}) {
    SCOPED_TRACE(bad);
    EXPECT_THROW(td::unlink_shared(bad), td::ValueError);
  }
  EXPECT_TRUE(fs::exists(prefix));
}

namespace {
// Runs `fn` with stderr (fd 2) on a pseudo-terminal and returns what was
// drawn there: the progress bars' real path, which draws only on a terminal.
std::string stderr_on_terminal(const std::function<void()>& fn) {
  const int master = ::posix_openpt(O_RDWR | O_NOCTTY);
  EXPECT_GE(master, 0);
  EXPECT_EQ(::grantpt(master), 0);
  EXPECT_EQ(::unlockpt(master), 0);
  const int slave = ::open(::ptsname(master), O_RDWR | O_NOCTTY);
  EXPECT_GE(slave, 0);
  std::cerr.flush();
  const int saved = ::dup(2);
  ::dup2(slave, 2);
  std::exception_ptr error;
  try {
    fn();
  } catch (...) {
    error = std::current_exception();
  }
  std::cerr.flush();
  ::dup2(saved, 2);
  ::close(saved);
  // The terminal hands written bytes to the master side asynchronously: read
  // until nothing more comes for half a second.
  std::string out;
  char buf[4096];
  for (pollfd p{master, POLLIN, 0}; ::poll(&p, 1, 500) > 0;) {
    const ssize_t n = ::read(master, buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, n);
  }
  ::close(slave);
  ::close(master);
  if (error) std::rethrow_exception(error);
  return out;
}

// 40 leaves over two levels (and one empty leaf, which has no file).
td::TensorDict many_leaves() {
  td::TensorDict data(Shape{3});
  for (int i = 0; i < 20; ++i) {
    data.set("a" + std::to_string(i), torch::full({3, 2}, static_cast<double>(i)));
    data.set({"n", "b" + std::to_string(i)}, torch::full({3}, i, torch::kLong));
  }
  data.set("empty", torch::empty({3, 0}));
  return data;
}
}  // namespace

TEST_F(Memmap, ProgressBarOnATerminalCountsEveryLeafFile) {
  td::MemmapOptions save;
  save.pbar = true;
  save.num_threads = 2;  // advanced from several threads
  std::string drawn = stderr_on_terminal([&] { many_leaves().memmap(P(), save); });
  EXPECT_NE(drawn.find("memmap ["), std::string::npos) << drawn;
  EXPECT_NE(drawn.find("] 40/40 (100%)"), std::string::npos) << drawn;
  EXPECT_EQ(drawn.find("41/"), std::string::npos) << drawn;
  EXPECT_EQ(drawn.back(), '\n');  // the final line is ended

  drawn = stderr_on_terminal([&] { many_leaves().memmap_like(root.string() + "/like", save); });
  EXPECT_NE(drawn.find("memmap_like ["), std::string::npos) << drawn;
  EXPECT_NE(drawn.find("] 40/40 (100%)"), std::string::npos) << drawn;

  td::LoadOptions load;
  load.pbar = true;
  td::TensorDictBase loaded;
  drawn = stderr_on_terminal([&] { loaded = td::load_memmap(P(), load); });
  EXPECT_NE(drawn.find("load_memmap ["), std::string::npos) << drawn;
  EXPECT_NE(drawn.find("] 40/40 (100%)"), std::string::npos) << drawn;
  EXPECT_TRUE(loaded.equal(many_leaves()));

  // Off by default, even on a terminal.
  EXPECT_EQ(stderr_on_terminal([&] { many_leaves().memmap(P()); }), "");
  EXPECT_EQ(stderr_on_terminal([&] { td::load_memmap(P()); }), "");
}

TEST_F(Memmap, ProgressBarDrawsNothingWhenStderrIsNotATerminal) {
  td::MemmapOptions save;
  save.pbar = true;
  td::LoadOptions load;
  load.pbar = true;
  ::testing::internal::CaptureStderr();  // a file: not a terminal
  many_leaves().memmap(P(), save);
  td::TensorDictBase loaded = td::load_memmap(P(), load);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_TRUE(loaded.equal(many_leaves()));
}
