// A separate process on a shared store, for Redis.TwoWritersAndAReaderLoseAndTearNoRow:
//   redis_worker write0|write1|read <unix socket> <td_id> <rows>
// writerK writes rows i with i % 2 == K (a = i + 1, b = i + 1), half of them
// one by one and half as index-tensor batches; the reader samples rows
// meanwhile and fails on a torn row (leaves or elements that disagree).
#include <tensordict/storage/redis.h>
#include <tensordict/tensordict.h>

#include <torch/torch.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>

namespace td = tensordict;

int main(int argc, char** argv) {
  if (argc != 5) return 2;
  const std::string mode = argv[1];
  td::storage::Redis opts;
  opts.unix_socket = argv[2];
  opts.td_id = argv[3];
  const int64_t n = std::stoll(argv[4]);
  try {
    auto store = td::redis::from_store(opts);
    if (mode == "label0" || mode == "label1") {
      // Per-element non-tensor writes: element i of "label" becomes "row<i>",
      // once each, both writers starting at the same moment (TD_START_MS,
      // milliseconds since the epoch) so that they overlap.
      if (const char* at = std::getenv("TD_START_MS"))
        std::this_thread::sleep_until(
            std::chrono::system_clock::time_point(std::chrono::milliseconds(std::stoll(at))));
      for (int64_t i = mode == "label1"; i < n; i += 2) {
        td::TensorDict row(std::vector<int64_t>{});
        row.set_non_tensor("label", "row" + std::to_string(i));
        store.index_put_({i}, row);
      }
      return 0;
    }
    if (mode == "write0" || mode == "write1") {
      const int64_t parity = mode == "write1";
      std::vector<int64_t> pending;
      for (int64_t i = parity; i < n; i += 2) {
        if (i % 4 < 2) {
          td::TensorDict row(
              {{"a", torch::full({16}, static_cast<float>(i + 1))}, {"b", torch::full({3}, i + 1)}},
              {});
          store.index_put_({i}, row);
          continue;
        }
        pending.push_back(i);
        if (pending.size() == 4) {
          auto idx = torch::tensor(pending);
          auto v = (idx + 1);
          td::TensorDict rows(
              {{"a", v.to(torch::kFloat32).unsqueeze(1).expand({4, 16}).contiguous()},
               {"b", v.unsqueeze(1).expand({4, 3}).contiguous()}},
              {4});
          store.index_put_({idx}, rows);
          pending.clear();
        }
      }
      for (int64_t i : pending)
        store.index_put_({i}, td::TensorDict({{"a", torch::full({16}, static_cast<float>(i + 1))},
                                              {"b", torch::full({3}, i + 1)}},
                                             {}));
      return 0;
    }
    int64_t seen = 0;
    for (int iter = 0; iter < 300; ++iter) {
      auto idx = torch::randint(n, {32}, torch::kLong);
      auto rows = store.index({idx});
      auto a = rows.get("a");
      auto b = rows.get("b");
      for (int64_t j = 0; j < 32; ++j) {
        const float v = a[j][0].item<float>();
        const bool ok = torch::equal(a[j], torch::full({16}, v)) &&
                        torch::equal(b[j], torch::full({3}, int64_t(v))) &&
                        (v == 0 || v == idx[j].item<int64_t>() + 1);
        if (!ok) {
          std::cerr << "torn row " << idx[j].item<int64_t>() << ": " << a[j] << b[j] << "\n";
          return 1;
        }
        seen += v != 0;
      }
    }
    std::cout << "read ok, " << seen << " written rows seen\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << mode << ": " << e.what() << "\n";
    return 1;
  }
}
