// load_state_dict_file reads archives with the library's own bounded reader
// (issue #19, group 4): crafted, truncated and mutated archives are
// FormatErrors, never a crash inside LibTorch's unpickler; what torch.save
// writes for a dict of tensors (Python's OrderedDict with _metadata and
// torch.Size included) still loads.
#include "reliability/reliability.h"

#include <tensordict/tensordict.h>

#include <torch/torch.h>

namespace td = tensordict;
using namespace td_rel;
using namespace std::string_literals;

namespace {

// A zip of stored records, as torch writes them (CRCs are not checked by the reader).
std::string zip(const std::vector<std::pair<std::string, std::string>>& records) {
  auto le = [](std::string& out, uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out += static_cast<char>((v >> (8 * i)) & 0xFF);
  };
  std::string out, dir;
  for (const auto& [name, data] : records) {
    const auto offset = out.size();
    le(out, 0x04034b50, 4);
    le(out, 20, 2), le(out, 0, 2), le(out, 0, 2), le(out, 0, 4), le(out, 0, 4);
    le(out, data.size(), 4), le(out, data.size(), 4), le(out, name.size(), 2), le(out, 0, 2);
    out += name + data;
    le(dir, 0x02014b50, 4);
    le(dir, 20, 2), le(dir, 20, 2), le(dir, 0, 2), le(dir, 0, 2), le(dir, 0, 4), le(dir, 0, 4);
    le(dir, data.size(), 4), le(dir, data.size(), 4), le(dir, name.size(), 2), le(dir, 0, 2);
    le(dir, 0, 2), le(dir, 0, 2), le(dir, 0, 2), le(dir, 0, 4), le(dir, offset, 4);
    dir += name;
  }
  const auto cd = out.size();
  out += dir;
  le(out, 0x06054b50, 4);
  le(out, 0, 2), le(out, 0, 2), le(out, records.size(), 2), le(out, records.size(), 2);
  le(out, dir.size(), 4), le(out, cd, 4), le(out, 0, 2);
  return out;
}

std::string binunicode(const std::string& s) {
  std::string out = "X";
  for (int i = 0; i < 4; ++i) out += static_cast<char>((s.size() >> (8 * i)) & 0xFF);
  return out + s;
}

// The pickle Python's torch.save writes for td.state_dict() of
// TensorDict({"a": arange(3.)}, [3]): an OrderedDict whose _metadata
// attribute holds torch.Size batch sizes (protocol 2, as pickletools shows it).
std::string python_style_pickle() {
  std::string p = "\x80\x02"s;
  p += "ccollections\nOrderedDict\nq\x00)Rq\x01("s;
  p += binunicode("a");
  p += "ctorch._utils\n_rebuild_tensor_v2\nq\x02(("s + binunicode("storage") +
       "ctorch\nFloatStorage\nq\x03"s + binunicode("0") + binunicode("cpu") +
       "K\x03tq\x04QK\x00K\x03\x85K\x01\x85\x89h\x00)Rq\x05tq\x06Rq\x07"s;
  p += "u}q\x08"s + binunicode("_metadata") + "h\x00)Rq\x09"s + binunicode("") + "}q\x0a("s +
       binunicode("batch_size") + "ctorch\nSize\nq\x0b]q\x0cK\x03"s + "a\x85Rq\x0d"s +
       binunicode("device") + "Nussb."s;
  return p;
}

std::string floats(std::initializer_list<float> v) {
  std::string out;
  for (float f : v) out.append(reinterpret_cast<const char*>(&f), sizeof f);
  return out;
}

// Every outcome but success or a tensordict::FormatError fails the test.
void expect_clean(const std::string& file, const std::string& context) {
  try {
    td::load_state_dict_file(file);
  } catch (const td::FormatError&) {
  } catch (const std::exception& e) {
    ADD_FAILURE() << context << ": " << typeid(e).name() << ": " << e.what();
  }
}

}  // namespace

TEST_F(Reliability, StateDictArchiveInPythonsLayoutLoads) {
  const std::string file = (root / "py.pt").string();
  write_text(file, zip({{"py/data.pkl", python_style_pickle()},
                        {"py/data/0", floats({0, 1, 2})},
                        {"py/version", "3\n"}}));
  auto sd = td::load_state_dict_file(file);
  EXPECT_TRUE(sd.tensor("a").equal(torch::arange(3, torch::kFloat)));
  ASSERT_NE(sd.find_metadata(""), nullptr);
  EXPECT_EQ(sd.find_metadata("")->batch_size, std::vector<int64_t>{3});
  td::TensorDict t(std::vector<int64_t>{3});
  t.set("a", torch::zeros({3}));
  t.load_state_dict(sd);
  EXPECT_TRUE(t.get("a").equal(torch::arange(3, torch::kFloat)));
}

// The values are views of the file's one buffer where a record is aligned
// for its dtype (torch.save aligns every record to 64 bytes), and copies
// where it is not: a crafted archive never gives a misaligned tensor.
TEST_F(Reliability, StateDictValuesViewTheFileWhereAlignedAndAreCopiedWhereNot) {
  const std::string saved = (root / "saved.pt").string();
  td::StateDict out;
  out.insert("a", torch::arange(3, torch::kFloat));
  out.insert("b", torch::arange(5, torch::kDouble));
  td::save_state_dict(out, saved);
  auto back = td::load_state_dict_file(saved);
  EXPECT_TRUE(back.tensor("a").equal(out.tensor("a")));
  EXPECT_TRUE(back.tensor("b").equal(out.tensor("b")));
  EXPECT_TRUE(back.tensor("a").is_alias_of(back.tensor("b")));
  // The float record shifted by 0..3 bytes (a record before it): every
  // shift loads the same values at an aligned address.
  for (int shift = 0; shift < 4; ++shift) {
    const std::string file = (root / ("shifted" + std::to_string(shift) + ".pt")).string();
    write_text(file, zip({{"py/data.pkl", python_style_pickle()},
                          {"py/pad", std::string(static_cast<std::size_t>(shift), 'x')},
                          {"py/data/0", floats({0, 1, 2})}}));
    auto sd = td::load_state_dict_file(file);
    const at::Tensor a = sd.tensor("a");
    EXPECT_TRUE(a.equal(torch::arange(3, torch::kFloat))) << shift;
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a.data_ptr()) % alignof(float), 0u) << shift;
  }
}

// Every truncation and many single-byte mutations of real archives (the
// writer's own, nested and legacy layouts, and the Python-style one).
TEST_F(Reliability, TruncatedOrMutatedStateDictArchivesAreFormatErrors) {
  td::TensorDict t(std::vector<int64_t>{3});
  t.set("a", torch::arange(3, torch::kFloat));
  t.set({"n", "b"}, torch::ones({3, 2}, torch::kLong));
  t.set("s", td::NonTensorData("hi"));
  std::vector<std::string> archives;
  for (const auto& opt : {td::StateDictOptions{}, td::StateDictOptions{.flatten = false},
                          td::StateDictOptions{.flatten = false, .legacy = true}}) {
    const std::string f = (root / "w.pt").string();
    td::save_state_dict(t.state_dict(opt), f);
    archives.push_back(read_text(f));
  }
  archives.push_back(
      zip({{"py/data.pkl", python_style_pickle()}, {"py/data/0", floats({0, 1, 2})}}));
  const std::string file = (root / "m.pt").string();
  int n = 0;
  for (const auto& a : archives) {
    for (std::size_t len = 0; len < a.size(); len += 1 + len / 64) {
      write_text(file, a.substr(0, len));
      expect_clean(file, "archive " + std::to_string(n) + " cut at " + std::to_string(len));
    }
    // (A byte flipped everywhere; other values at every 7th byte: ~10 s in all.)
    for (std::size_t i = 0; i < a.size(); ++i)
      for (unsigned char x : {0xFF, 0x01, 0x80}) {
        if (x != 0xFF && i % 7 != 0) continue;
        std::string m = a;
        m[i] = static_cast<char>(m[i] ^ x);
        write_text(file, m);
        expect_clean(file, "archive " + std::to_string(n) + " byte " + std::to_string(i));
      }
    ++n;
  }
}

TEST_F(Reliability, CraftedPicklesAreFormatErrors) {
  const std::string file = (root / "c.pt").string();
  auto check = [&](const std::string& pickle, const std::string& needle,
                   std::vector<std::pair<std::string, std::string>> extra = {}) {
    extra.insert(extra.begin(), {"c/data.pkl", pickle});
    write_text(file, zip(extra));
    try {
      td::load_state_dict_file(file);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const td::FormatError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  // Nested 100,000 deep (a stack overflow when destroyed or converted).
  check("\x80\x02" + std::string(100000, ']') + std::string(99999, 'a') + ".", "nested deeper");
  // A dict inside itself, a list changed after it was placed elsewhere.
  check("\x80\x02}q\x00"s + binunicode("k") + "h\x00s."s, "inside itself");
  check("\x80\x02]q\x00]q\x01h\x00"s + "ah\x00K\x01"s + "a."s, "changed after");
  // Globals and opcodes outside the subset (os.system, INST, OBJ, ...).
  check(std::string("\x80\x02") + "cos\nsystem\n" + binunicode("true") + "\x85R.", "os.system");
  check(std::string("\x80\x02(i__builtin__\nobject\n."), "opcode");
  // A tensor reaching past its storage; a storage without its record.
  const std::string tensor = "ctorch._utils\n_rebuild_tensor_v2\n((" + binunicode("storage") +
                             "ctorch\nFloatStorage\n" + binunicode("0") + binunicode("cpu") +
                             "K\x02tQK\x00K\x05\x85K\x01\x85\x89"s +
                             "ccollections\nOrderedDict\n)RtR"s;
  check("\x80\x02}(" + binunicode("a") + tensor + "u.", "reaching element 4",
        {{"c/data/0", floats({1, 2})}});
  check("\x80\x02}(" + binunicode("a") + tensor + "u.", "no record");
  check("\x80\x02}(" + binunicode("a") + tensor + "u.", "fewer than", {{"c/data/0", "abc"}});
  // Memo entries never stored, stack underflow, no STOP.
  check("\x80\x02h\x07.", "memo");
  check("\x80\x02s.", "underflow");
  check("\x80\x02}", "truncated");
  // Not zip archives at all.
  write_text(file, std::string("\x80\x02}.", 4));
  EXPECT_THROW(td::load_state_dict_file(file), td::FormatError);
}
