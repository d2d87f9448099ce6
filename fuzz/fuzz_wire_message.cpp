// What a distributed receive reads from a peer, through the functions the
// receive paths use, in-process (no process group): the first byte of an
// input picks the reader, the rest is the received message.
//   0: non-tensor values (JSON) of a send / broadcast / all_gather, read
//      against a fixed receiving structure, then applied to a copy of it;
//   1: a structure description (JSON) a peer sends after a mismatch;
//   2: init_remote's layout-format structure (JSON) over a 256-byte buffer;
//   3: init_remote's consolidated-format metadata (JSON) over that buffer;
//   4: an eager transfer's binary structure (StructureCheck::Receiver).
// Wire::Python carries no metadata (each message is a leaf's bytes), so it
// has nothing to parse here.
#include "fuzz_common.h"

#include "distributed/layout.h"
#include "distributed/point_to_point.h"
#include "distributed/protocol.h"

#include <torch/torch.h>

namespace {

namespace td = tensordict;
namespace dd = tensordict::detail::distributed;

// The receiving side of readers 0 and 1: tensors, a nested level, a
// NonTensorData and a NonTensorStack.
td::TensorDict receiver() {
  td::TensorDict t(std::vector<int64_t>{3});
  t.set("a", torch::arange(6, torch::kFloat).reshape({3, 2}));
  t.set({"nested", "c"}, torch::zeros({3, 4}, torch::kDouble));
  t.set_non_tensor("name", nlohmann::json("run"));
  t.set_non_tensor_stack({"nested", "tags"}, nlohmann::json::array({"x", "y", "z"}));
  return t;
}

const std::string kWhat = "recv from rank 0";

void write_seed(const char* dir, int n, char reader, const std::string& body) {
  const std::string bytes = std::string(1, reader) + body;
  td_fuzz::write_file(td_fuzz::fs::path(dir) / ("seed" + std::to_string(n)), bytes.data(),
                      bytes.size());
}

}  // namespace

void td_fuzz_write_seeds(const char* dir) {
  const td::TensorDict t = receiver();
  const dd::Layout layout = dd::describe(t);
  write_seed(dir, 0, 0, dd::non_tensor_payload(kWhat, t, layout));
  write_seed(dir, 1, 1, layout.text());
  const std::string values = dd::non_tensor_payload(kWhat, t, layout);
  write_seed(dir, 2, 2,
             nlohmann::json{{"layout", layout.description()},
                            {"non_tensors", nlohmann::json::parse(values)}}
                 .dump());
  td::TensorDict plain(std::vector<int64_t>{2});
  plain.set("x", torch::ones({2, 3}, torch::kDouble));
  plain.set_non_tensor("note", nlohmann::json("hello"));
  write_seed(dir, 3, 3, plain.consolidate().consolidated_metadata().dump());
  write_seed(dir, 4, 4, dd::encode_entries(layout));
}

extern "C" int LLVMFuzzerInitialize(int*, char***) { return td_fuzz::initialize(); }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  static const td::TensorDict t = receiver();
  static const dd::Layout layout = dd::describe(t);
  try {
    switch (data[0] % 5) {
      case 0: {
        const auto values = dd::read_non_tensors(kWhat, t, layout, body);
        dd::apply_non_tensors(t.clone(), values);
        break;
      }
      case 1:
        dd::throw_mismatch(kWhat, layout.text(), "rank 0", body);
      case 2:
      case 3: {
        const at::Tensor storage = torch::zeros({256}, torch::kByte);
        const int64_t format = data[0] % 5 == 2 ? dd::kInitLayout : dd::kInitConsolidated;
        td::TensorDictBase got = dd::build_received(kWhat, format, body, storage);
        (void)got.repr();
        break;
      }
      case 4:
        (void)dd::decode_entries(kWhat, reinterpret_cast<const uint8_t*>(body.data()),
                                 static_cast<int64_t>(body.size()));
        break;
    }
  } catch (const td::Error&) {
  }
  return 0;
}
