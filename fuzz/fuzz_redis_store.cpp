// The Redis storage on hostile stored metadata (issue #32): the input is a
// list of keys to store on a real redis-server (started once, on a Unix
// socket in a temporary directory, killed at exit), then the store
// "tensordict:{fz}:" is opened with from_store (a plain, sharded or
// lazy-stack store, as the keys say), read whole, read and written by rows.
// Every input must work or throw a tensordict::Error.
//
// Input: records, each a tag byte (tag % 3: 0 SET key value, 1 HSET key
// field value, 2 SADD key member) then its strings, each a 2-byte
// little-endian length and its bytes; keys are prefixed with "tensordict:".
// The seeds are stores the library writes itself, dumped in this form.
#include "fuzz_common.h"
#include "support/redis_server.h"

#include <tensordict/storage/redis.h>
#include <tensordict/storage/redis_lazy_stack.h>

#include <torch/torch.h>

#include <memory>
#include <string_view>
#include <vector>

namespace {

namespace td = tensordict;

td_test::RedisServer& server() {
  static auto s = std::make_unique<td_test::RedisServer>();
  return *s;
}

// A hiredis connection of the fuzzer's own, to write the keys.
redisContext* raw() {
  static redisContext* c = [] {
    timeval tv{5, 0};
    return redisConnectUnixWithTimeout(server().socket().c_str(), tv);
  }();
  return c;
}

void command(const std::vector<std::string_view>& args) {
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (auto a : args) argv.push_back(a.data()), lens.push_back(a.size());
  auto* r = static_cast<redisReply*>(
      redisCommandArgv(raw(), static_cast<int>(argv.size()), argv.data(), lens.data()));
  if (r == nullptr) std::abort();  // the fuzzer's own server went away
  freeReplyObject(r);
}

td::storage::Redis options() {
  td::storage::Redis r;
  r.unix_socket = server().socket();
  r.td_id = "fz";
  r.timeout = 5;
  return r;
}

struct Reader {
  const uint8_t* p;
  const uint8_t* end;
  bool more() const { return p < end; }
  uint8_t byte() { return p < end ? *p++ : 0; }
  std::string_view str() {
    std::size_t n = byte();
    n |= static_cast<std::size_t>(byte()) << 8;
    n = std::min<std::size_t>(n, static_cast<std::size_t>(end - p));
    std::string_view s(reinterpret_cast<const char*>(p), n);
    p += n;
    return s;
  }
};

void put(std::string& out, std::string_view s) {
  out.push_back(static_cast<char>(s.size() & 0xff));
  out.push_back(static_cast<char>((s.size() >> 8) & 0xff));
  out.append(s);
}

// Every key of the server as records (the seeds).
std::string dump() {
  std::string out;
  auto* keys = static_cast<redisReply*>(redisCommand(raw(), "KEYS tensordict:*"));
  for (std::size_t i = 0; i < keys->elements; ++i) {
    const std::string key(keys->element[i]->str, keys->element[i]->len);
    const std::string rel = key.substr(std::strlen("tensordict:"));
    auto* type = static_cast<redisReply*>(redisCommand(raw(), "TYPE %b", key.data(), key.size()));
    const std::string t(type->str, type->len);
    freeReplyObject(type);
    if (t == "string") {
      auto* v = static_cast<redisReply*>(redisCommand(raw(), "GET %b", key.data(), key.size()));
      out.push_back(0);
      put(out, rel);
      put(out, std::string_view(v->str, v->len));
      freeReplyObject(v);
    } else {
      const bool hash = t == "hash";
      auto* v = static_cast<redisReply*>(
          redisCommand(raw(), hash ? "HGETALL %b" : "SMEMBERS %b", key.data(), key.size()));
      for (std::size_t j = 0; j < v->elements; j += hash ? 2 : 1) {
        out.push_back(hash ? 1 : 2);
        put(out, rel);
        put(out, std::string_view(v->element[j]->str, v->element[j]->len));
        if (hash) put(out, std::string_view(v->element[j + 1]->str, v->element[j + 1]->len));
      }
      freeReplyObject(v);
    }
  }
  freeReplyObject(keys);
  return out;
}

// A lazy stack with more elements than this is not read whole (its
// elements are tensordicts in memory: the fuzzer's memory is not the point).
constexpr int64_t kMaxElementsRead = 4096;

void exercise(td::TensorDictBase store) {
  const auto batch = store.batch_size().vec();
  int64_t elements = 1;
  for (auto d : batch) elements = d > kMaxElementsRead ? kMaxElementsRead + 1 : elements * d;
  if (td::redis::is_lazy_stack_store(store)) {
    if (td::redis::count(store) > kMaxElementsRead) return;
    auto elements = td::redis::to_lazy_stack(store);  // heterogeneous elements too
    if (td::redis::count(store) > 0) td::redis::set_element(store, 0, elements.tensordicts()[0]);
  }
  (void)store.keys(true, true);
  if (elements > (int64_t{1} << 20)) return;
  td::TensorDict local = store.to_tensordict();
  if (batch.empty() || batch[0] == 0) return;
  auto row = store.index({0});
  store.index_put_({0}, row);
  store.index_put_({torch::indexing::Slice(0, 1)}, local.index({torch::indexing::Slice(0, 1)}));
}

}  // namespace

void td_fuzz_write_seeds(const char* dir) {
  td::TensorDict data = td_fuzz::sample();
  data.set("labels", td::NonTensorStack({"x", "y", "z"}));
  int n = 0;
  auto save = [&] {
    const std::string bytes = dump();
    td_fuzz::write_file(td_fuzz::fs::path(dir) / ("seed" + std::to_string(n++)), bytes.data(),
                        bytes.size());
    command({"FLUSHALL"});
  };
  command({"FLUSHALL"});
  td::redis::from_tensordict(data, options());
  save();
  auto sharded = options();
  sharded.sharded = true;
  sharded.block_rows = 2;
  td::redis::from_tensordict(data, sharded);
  save();
  std::vector<td::TensorDictBase> members;
  for (int64_t e = 0; e < 3; ++e)
    members.push_back(td::TensorDict(
        {{"x", torch::full({2, 1 + e}, static_cast<float>(e))}, {"y", torch::arange(2)}}, {2}));
  td::redis::from_lazy_stack(td::lazy_stack(members), options());
  save();
  std::vector<td::TensorDictBase> same;
  for (int64_t e = 0; e < 3; ++e)
    same.push_back(td::TensorDict({{"x", torch::full({2, 2}, static_cast<float>(e))}}, {2}));
  td::redis::from_lazy_stack(td::lazy_stack(same, 1), options());
  save();
}

extern "C" int LLVMFuzzerInitialize(int*, char***) { return td_fuzz::initialize(); }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  command({"FLUSHALL"});
  Reader in{data, data + size};
  while (in.more()) {
    const int tag = in.byte() % 3;
    const std::string key = "tensordict:" + std::string(in.str());
    if (tag == 0) {
      command({"SET", key, in.str()});
    } else if (tag == 1) {
      const auto field = in.str();
      command({"HSET", key, field, in.str()});
    } else {
      command({"SADD", key, in.str()});
    }
  }
  try {
    exercise(td::redis::from_store(options()));
  } catch (const td::Error& e) {
    if (std::getenv("TD_FUZZ_VERBOSE") != nullptr) std::fprintf(stderr, "%s\n", e.what());
  }
  return 0;
}
