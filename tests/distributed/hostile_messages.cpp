// Corrupt and hostile messages: rank 0 speaks the wire protocol by hand
// (docs/distributed.md, "Protocol") with raw ProcessGroup sends, starting from
// genuine messages it captured and changing one field at a time; rank 1
// receives with the library. Every case is a tensordict error naming the
// transfer, never an abort, a hang or a huge allocation; rank 1's tensordict
// stays as it was; and rank 0 sends exactly the messages the receiver takes,
// so that the group stays in step and the genuine transfers that close each
// scenario succeed.

#include "harness.h"
#include "helpers.h"
#include "wire.h"

#include <tensordict/distributed.h>
#include <tensordict/tensor_dict.h>

#include <ATen/ATen.h>

#include <cstring>
#include <string>
#include <vector>

namespace td = tensordict;
using nlohmann::json;
using tdtest::expect_equal;
using namespace tdtest::wire;

namespace {

td::TensorDict make(int seed) {
  auto v = [&](std::vector<int64_t> shape, at::ScalarType dtype) {
    return (at::arange(c10::multiply_integers(shape), at::kDouble) + seed).reshape(shape).to(dtype);
  };
  td::TensorDict t({{"a", v({3, 2}, at::kFloat)}, {"b", v({3}, at::kLong)}}, {3});
  t.set({"nested", "c"}, v({3, 4}, at::kDouble));
  t.set_non_tensor("name", json("run-" + std::to_string(seed)));
  t.set_non_tensor_stack({"nested", "tags"}, json::array({"x", "y", std::to_string(seed)}));
  return t;
}

// An eager transfer as rank 0 captured it: the first message (cut to its
// length), the JSON, and the leaves of a per-leaf transfer.
struct Captured {
  at::Tensor first;
  at::Tensor json;
  std::vector<at::Tensor> leaves;

  at::Tensor first_copy() const { return first.clone(); }
};

Captured capture_eager(tdtest::Ctx& ctx) {
  Captured c;
  at::Tensor posted = raw_recv(ctx, kEagerFirstMessageBytes, kEagerTag);
  const int64_t* h = words(posted);
  const bool flat = h[kHMode] == kModeConsolidated;
  const int64_t data_at = 64 + padded16(h[kHDescBytes]);
  c.first = posted.narrow(0, 0, data_at + (flat ? h[kHFlatBytes] : 8 * h[kHLeaves])).clone();
  if (h[kHExtraBytes] > 0) c.json = raw_recv(ctx, h[kHExtraBytes], kEagerTag);
  if (!flat) {
    for (int64_t i = 0; i < h[kHLeaves]; ++i) {
      int64_t n = 0;
      std::memcpy(&n, c.first.data_ptr<uint8_t>() + data_at + 8 * i, 8);
      if (n > 0) c.leaves.push_back(raw_recv(ctx, n, kEagerTag));
    }
  }
  return c;
}

// Rank 1's receive that must fail with E whose message holds `needle`,
// leaving its tensordict as it was.
template <class E>
void expect_refused(td::TensorDict& t, tdtest::Ctx& ctx, const td::TransferOptions& opts,
                    const std::string& needle) {
  const td::TensorDictBase before = t.clone();
  std::string what = TD_EXPECT_THROW(td::recv(t, *ctx.pg, 0, opts), E);
  if (what.find("recv from rank 0") == std::string::npos || what.find(needle) == std::string::npos)
    throw std::runtime_error("unexpected error: " + what + " (expected: " + needle + ")");
  expect_equal(t, before);
}

}  // namespace

TD_SCENARIO(hostile_eager_messages) {
  // StructureCheck::Receiver: rank 1 first sends rank 0 one transfer of each
  // mode, which rank 0 captures and plays back changed.
  td::TransferOptions eager;
  eager.check = td::StructureCheck::Receiver;
  td::TransferOptions eager_per_leaf = eager;
  eager_per_leaf.mode = td::TransferMode::PerLeaf;
  if (ctx.rank == 1) {
    td::send(make(300), *ctx.pg, 0, eager);
    td::send(make(301), *ctx.pg, 0, eager_per_leaf);
    td::TensorDict t = make(0);
    expect_refused<td::FormatError>(t, ctx, eager, "bad magic number");
    expect_refused<td::FormatError>(t, ctx, eager, "unknown message kind 99");
    expect_refused<td::FormatError>(t, ctx, eager, "does not fit its message");
    expect_refused<td::FormatError>(t, ctx, eager, "does not fit its message");
    expect_refused<td::FormatError>(t, ctx, eager, "announces a message of 1099511627776 bytes");
    expect_refused<td::FormatError>(t, ctx, eager, "non-tensor values received are not valid");
    expect_refused<td::FormatError>(t, ctx, eager, "entry 0 is not 'name'");
    expect_refused<td::FormatError>(t, ctx, eager, "('nested', 'tags')");
    expect_refused<td::FormatError>(t, ctx, eager, "structure is truncated");
    expect_refused<td::FormatError>(t, ctx, eager, "structure is not valid (entry kind)");
    expect_refused<td::FormatError>(t, ctx, eager, "structure is not valid (dtype 100)");
    expect_refused<td::FormatError>(t, ctx, eager, "leaf 0 has -5 bytes");
    // Per leaf, JSON not valid: the leaves are taken, the group stays in step.
    expect_refused<td::FormatError>(t, ctx, eager, "non-tensor values received are not valid");
    // The genuine messages played back, then transfers of both kinds.
    td::recv(t, *ctx.pg, 0, eager);
    expect_equal(t, make(300));
    td::recv(t, *ctx.pg, 0, eager);
    expect_equal(t, make(301));
    td::recv(t, *ctx.pg, 0, eager);
    expect_equal(t, make(302));
    td::recv(t, *ctx.pg, 0);
    expect_equal(t, make(303));
    return;
  }
  const Captured flat = capture_eager(ctx);
  const Captured per_leaf = capture_eager(ctx);
  TD_CHECK(flat.json.defined() && per_leaf.leaves.size() == 3);
  auto send_first = [&](const at::Tensor& first) { raw_send(ctx, first, kEagerTag); };
  auto changed = [&](const Captured& c, int field, int64_t value) {
    at::Tensor first = c.first_copy();
    words(first)[field] = value;
    return first;
  };
  auto json_of = [](const Captured& c) {
    return std::string(reinterpret_cast<const char*>(c.json.data_ptr()), c.json.numel());
  };

  // The receiver throws on the first message alone.
  send_first(changed(flat, kHMagic, words(flat.first)[kHMagic] ^ 1));
  send_first(changed(flat, kHKind, 99));
  send_first(changed(flat, kHDescBytes, int64_t{1} << 40));
  send_first(changed(flat, kHFlatBytes, -1));
  send_first(changed(flat, kHExtraBytes, int64_t{1} << 40));
  // The same structure with non-tensor JSON that is not valid: invalid JSON,
  // another key, a stack of 2 values for a batch of 3.
  std::string text = json_of(flat);
  text[0] = '{';
  send_first(flat.first);
  raw_send(ctx, bytes_of(text), kEagerTag);
  text = json_of(flat);
  text.replace(text.find("\"name\""), 6, "\"nbme\"");
  send_first(flat.first);
  raw_send(ctx, bytes_of(text), kEagerTag);
  text = json::array({json::array({json::array({"name"}), false, "x"}),
                      json::array({json::array({"nested", "tags"}), true, json::array({1, 2})})})
             .dump();
  send_first(changed(flat, kHExtraBytes, static_cast<int64_t>(text.size())));
  raw_send(ctx, bytes_of(text), kEagerTag);
  // Another structure (the hash differs) whose entries are cut short: the
  // receiver takes the JSON, then cannot name the difference.
  at::Tensor first = changed(flat, kHHash, words(flat.first)[kHHash] ^ 1);
  words(first)[kHDescBytes] -= 3;
  send_first(first);
  raw_send(ctx, flat.json, kEagerTag);
  // Another structure whose root entry (its key parts at byte 64, its kind at
  // 68, its dtype at 69) has a kind that does not exist, then a tensor's
  // kind with a dtype that does not exist.
  first = changed(flat, kHHash, words(flat.first)[kHHash] ^ 1);
  first.data_ptr<uint8_t>()[64 + 4] = 9;
  send_first(first);
  raw_send(ctx, flat.json, kEagerTag);
  first = changed(flat, kHHash, words(flat.first)[kHHash] ^ 1);
  first.data_ptr<uint8_t>()[64 + 4] = 0;
  first.data_ptr<uint8_t>()[64 + 5] = 100;
  send_first(first);
  raw_send(ctx, flat.json, kEagerTag);
  // Per leaf, another structure with a negative leaf size.
  first = changed(per_leaf, kHHash, words(per_leaf.first)[kHHash] ^ 1);
  const int64_t data_at = 64 + padded16(words(first)[kHDescBytes]);
  const int64_t minus_five = -5;
  std::memcpy(first.data_ptr<uint8_t>() + data_at, &minus_five, 8);
  send_first(first);
  raw_send(ctx, per_leaf.json, kEagerTag);
  // Per leaf, the same structure, JSON not valid: then the leaves.
  text = json_of(per_leaf);
  text[0] = '{';
  send_first(per_leaf.first);
  raw_send(ctx, bytes_of(text), kEagerTag);
  for (const at::Tensor& leaf : per_leaf.leaves) raw_send(ctx, leaf, kEagerTag);
  // Played back as captured.
  send_first(flat.first);
  raw_send(ctx, flat.json, kEagerTag);
  send_first(per_leaf.first);
  raw_send(ctx, per_leaf.json, kEagerTag);
  for (const at::Tensor& leaf : per_leaf.leaves) raw_send(ctx, leaf, kEagerTag);
  td::send(make(302), *ctx.pg, 1, eager);
  td::send(make(303), *ctx.pg, 1);
}

TD_SCENARIO(hostile_checked_messages) {
  // StructureCheck::BothSides: rank 0 reads rank 1's expectation and answers
  // with a forged header in a message of the size rank 1 posted (the
  // header's magic number taken from a genuine eager transfer). Then
  // from_remote_init against forged init_remote messages.
  if (ctx.rank == 1) {
    td::TransferOptions eager;
    eager.check = td::StructureCheck::Receiver;
    td::send(make(310), *ctx.pg, 0, eager);
    const td::TransferOptions checked;
    td::TensorDict t = make(0);
    expect_refused<td::FormatError>(t, ctx, checked, "bad magic number");
    expect_refused<td::FormatError>(t, ctx, checked, "unknown message kind 99");
    expect_refused<td::FormatError>(t, ctx, checked, "the data message has");
    expect_refused<td::FormatError>(t, ctx, checked, "announces a message of -1 bytes");
    expect_refused<td::FormatError>(t, ctx, checked, "non-tensor values received are not valid");
    auto init_fails = [&](const std::string& needle) {
      std::string what = TD_EXPECT_THROW(td::from_remote_init(*ctx.pg, 0), td::Error);
      if (what.find("from_remote_init from rank 0") == std::string::npos ||
          what.find(needle) == std::string::npos)
        throw std::runtime_error("unexpected error: " + what + " (expected: " + needle + ")");
    };
    init_fails("cannot allocate the 1125899906842624 bytes");
    init_fails("the structure message is not valid");
    init_fails("does not fit its buffer");
    td::recv(t, *ctx.pg, 0);
    expect_equal(t, make(311));
    return;
  }
  const Captured genuine = capture_eager(ctx);
  const int64_t magic = words(genuine.first)[kHMagic];
  const std::string json_text(reinterpret_cast<const char*>(genuine.json.data_ptr()),
                              genuine.json.numel());
  // One forged answer to recv(): a header (and, when its kind is ok, the
  // receiver's flat size of data behind it) plus the JSON messages given.
  auto answer = [&](int64_t kind, int64_t extra, int64_t flat_delta,
                    const std::vector<std::string>& then) {
    at::Tensor e = raw_recv(ctx, 64, kCheckedTag);
    const int64_t* x = words(e);
    TD_CHECK(x[kEMode] == kModeConsolidated);
    at::Tensor msg = at::zeros({64 + x[kEFlatBytes]}, at::kByte);
    int64_t* h = words(msg);
    h[kHMagic] = kind == -1 ? magic ^ 1 : magic;
    h[kHKind] = kind == -1 ? kSendOk : kind;
    h[kHExtraBytes] = extra;
    h[kHFlatBytes] = x[kEFlatBytes] + flat_delta;
    h[kHMode] = kModeConsolidated;
    raw_send(ctx, msg, kCheckedTag);
    for (const std::string& s : then) raw_send(ctx, bytes_of(s), kCheckedTag);
  };
  answer(-1, 0, 0, {});
  answer(99, 0, 0, {});
  answer(kSendOk, 0, 16, {});
  answer(kSendOk, -1, 0, {});
  std::string bad = json_text;
  bad.replace(bad.size() - 1, 1, ",");
  answer(kSendOk, static_cast<int64_t>(bad.size()), 0, {bad});
  // from_remote_init: a buffer no machine holds, a structure that is not
  // JSON, a leaf outside its buffer.
  auto init = [&](int64_t flat_bytes, const std::string& structure, int64_t format) {
    at::Tensor e = raw_recv(ctx, 64, kCheckedTag);
    TD_CHECK(words(e)[kEKind] == 2);
    at::Tensor header = at::zeros({64}, at::kByte);
    int64_t* h = words(header);
    h[kHMagic] = magic;
    h[kHKind] = kInitHeader;
    h[kHExtraBytes] = static_cast<int64_t>(structure.size());
    h[kHFlatBytes] = flat_bytes;
    h[kHMode] = format;
    raw_send(ctx, header, kCheckedTag);
    if (!structure.empty()) raw_send(ctx, bytes_of(structure), kCheckedTag);
    if (flat_bytes > 0 && flat_bytes < (int64_t{1} << 30))
      raw_send(ctx, at::zeros({flat_bytes}, at::kByte), kCheckedTag);
  };
  init(int64_t{1} << 50, "", 0);
  init(8, "{not json", 1);
  const json layout = {
      {"layout",
       json::array(
           {json::array({json::array(), "root batch [2]", {{"batch", {2}}}}),
            json::array({json::array({"x"}),
                         "Tensor",
                         {{"dtype", "torch.float32"}, {"shape", {2}}, {"offset", 1000}}})})},
      {"non_tensors", nullptr}};
  init(8, layout.dump(), 1);
  td::send(make(311), *ctx.pg, 1);
}

TD_SCENARIO(hostile_received_json) {
  // JSON a peer sends, nested 200,000 deep or not UTF-8, in every message
  // that carries JSON: the non-tensor values of a transfer, the structure
  // sent after a mismatch, init_remote's structure. Each is a FormatError
  // naming the transfer (never a stack overflow or a raw nlohmann error), and
  // the receiving tensordict stays as it was.
  td::TransferOptions eager;
  eager.check = td::StructureCheck::Receiver;
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  if (ctx.rank == 1) {
    td::send(make(320), *ctx.pg, 0, eager);
    td::TensorDict t = make(0);
    expect_refused<td::FormatError>(t, ctx, eager, "nested deeper than 512 levels");
    expect_refused<td::FormatError>(t, ctx, eager, "non-tensor values received are not valid");
    expect_refused<td::FormatError>(t, ctx, {}, "nested deeper than 512 levels");
    expect_refused<td::FormatError>(t, ctx, {}, "the structure received from rank 0 is not valid");
    for (const char* needle : {"nested deeper than 512 levels", "structure message is not valid"}) {
      std::string what = TD_EXPECT_THROW(td::from_remote_init(*ctx.pg, 0), td::FormatError);
      if (what.find("from_remote_init from rank 0") == std::string::npos ||
          what.find(needle) == std::string::npos)
        throw std::runtime_error("unexpected error: " + what + " (expected: " + needle + ")");
    }
    td::recv(t, *ctx.pg, 0);
    expect_equal(t, make(321));
    return;
  }
  const Captured flat = capture_eager(ctx);
  auto with_json = [&](const std::string& text) {
    at::Tensor first = flat.first_copy();
    words(first)[kHExtraBytes] = static_cast<int64_t>(text.size());
    raw_send(ctx, first, kEagerTag);
    raw_send(ctx, bytes_of(text), kEagerTag);
  };
  const std::string stack = R"([["nested","tags"],true,["x","y","z"]])";
  with_json(R"([[["name"],false,)" + deep + "]," + stack + "]");
  with_json(std::string(R"([[["name"],false,"caf)") + "\xff\xfe" + "\"]," + stack + "]");
  // recv() checked on both sides: the same structure with deep JSON, then a
  // mismatch whose structure (sent after it) is deep, then not UTF-8.
  const int64_t magic = words(flat.first)[kHMagic];
  auto header = [&](int64_t kind, int64_t extra_bytes, int64_t flat_bytes) {
    at::Tensor h = at::zeros({64 + flat_bytes}, at::kByte);
    words(h)[kHMagic] = magic;
    words(h)[kHKind] = kind;
    words(h)[kHExtraBytes] = extra_bytes;
    words(h)[kHFlatBytes] = flat_bytes;
    words(h)[kHMode] = kModeConsolidated;
    return h;
  };
  {
    at::Tensor e = raw_recv(ctx, 64, kCheckedTag);
    const std::string text = R"([[["name"],false,)" + deep + "]," + stack + "]";
    raw_send(ctx, header(kSendOk, static_cast<int64_t>(text.size()), words(e)[kEFlatBytes]),
             kCheckedTag);
    raw_send(ctx, bytes_of(text), kCheckedTag);
  }
  {
    raw_recv(ctx, 64, kCheckedTag);
    raw_send(ctx, header(kSendMismatch, 0, 0), kCheckedTag);
    // The receiver's description (length first), then ours.
    const int64_t n = words(raw_recv(ctx, 8, kCheckedTag))[0];
    raw_recv(ctx, n, kCheckedTag);
    raw_send(ctx, at::full({1}, static_cast<int64_t>(deep.size()), at::kLong), kCheckedTag);
    raw_send(ctx, bytes_of(deep), kCheckedTag);
  }
  // from_remote_init: a layout structure whose non-tensor values are deep,
  // then a structure that is not UTF-8.
  for (const std::string& structure :
       {std::string(R"({"layout":[[[],"root batch [2]",{"batch":[2]}]],"non_tensors":)") + deep +
            "}",
        std::string("{\"layout\":[[[\"\xc3\x28\"]]]}")}) {
    TD_CHECK(words(raw_recv(ctx, 64, kCheckedTag))[kEKind] == 2);
    at::Tensor h = header(kInitHeader, static_cast<int64_t>(structure.size()), 0);
    words(h)[kHMode] = 1;  // the layout format
    raw_send(ctx, h, kCheckedTag);
    raw_send(ctx, bytes_of(structure), kCheckedTag);
  }
  td::send(make(321), *ctx.pg, 1);
}
