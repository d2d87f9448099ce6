// The replay-buffer example's synthetic environment, whose transitions can be
// checked after a round trip through any storage, and its report lines;
// shared by the single-process run (main.cpp) and the distributed one
// (distributed.h).
#pragma once

#include "replay_buffer.h"

#include <tensordict/tensor_dict.h>

#include <chrono>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <string>

namespace replay {

using Clock = std::chrono::steady_clock;

// Transition number `id` has obs pixels id % 251, next/obs (id + 1) % 251,
// reward id, action id / 1000 (every component), done every 50th step.
inline td::TensorDict make_batch(int64_t first_id, int64_t n) {
  at::Tensor ids = at::arange(first_id, first_id + n, at::kLong);
  auto frames = [&](const at::Tensor& pixel) {
    return pixel.remainder(251)
        .to(at::kByte)
        .view({n, 1, 1, 1})
        .expand({n, 84, 84, 3})
        .contiguous();
  };
  return td::TensorDict(
      {{"obs", frames(ids)},
       {"action", (ids.to(at::kFloat) / 1000).unsqueeze(1).expand({n, 4}).contiguous()},
       {"reward", ids.to(at::kFloat)},
       {"done", ids.remainder(50).eq(49)},
       {"next", td::TensorDict({{"obs", frames(ids + 1)}}, {n})}},
      {n});
}

inline td::TensorDict make_transition(int64_t id) {
  return td::TensorDict(
      {{"obs", at::full({84, 84, 3}, id % 251, at::kByte)},
       {"action", at::full({4}, static_cast<float>(id) / 1000)},
       {"reward", at::scalar_tensor(static_cast<float>(id))},
       {"done", at::scalar_tensor((id % 50) == 49, at::kBool)},
       {"next", td::TensorDict({{"obs", at::full({84, 84, 3}, (id + 1) % 251, at::kByte)}}, {})}},
      {});
}

// Every row of `batch` is one whole transition of the environment (no row
// mixes two transitions), whatever its id.
inline bool whole_transitions(const Transition& batch) {
  at::Tensor ids = batch.reward().to(at::kLong);
  const int64_t n = ids.size(0);
  // Every pixel of a frame holds the same value: compare its min and max.
  auto uniform_pixels = [&](const at::Tensor& frames, const at::Tensor& expect) {
    at::Tensor flat = frames.reshape({n, -1});
    return flat.amin(1).to(at::kLong).eq(expect).all().item<bool>() &&
           flat.amax(1).to(at::kLong).eq(expect).all().item<bool>();
  };
  return uniform_pixels(batch.obs(), ids.remainder(251)) &&
         uniform_pixels(batch.next().obs(), (ids + 1).remainder(251)) &&
         batch.done().eq(ids.remainder(50).eq(49)).all().item<bool>() &&
         at::allclose(batch.action(), (ids.to(at::kFloat) / 1000).unsqueeze(1).expand({n, 4}));
}

inline std::string rate(double count, double seconds) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(0);
  if (seconds <= 0) return "-";
  const double r = count / seconds;
  if (r >= 1e6)
    out << std::setprecision(2) << r / 1e6 << "M";
  else if (r >= 1e3)
    out << std::setprecision(1) << r / 1e3 << "k";
  else
    out << r;
  return out.str();
}

inline void report(const std::string& what, int64_t count, const std::string& unit,
                   double seconds) {
  std::cout << "  " << std::left << std::setw(22) << what << std::right << std::setw(8) << count
            << " " << std::left << std::setw(12) << unit << std::right << std::fixed
            << std::setprecision(2) << std::setw(9) << (count ? 1e6 * seconds / count : 0.0)
            << " us each  " << std::setw(8) << rate(static_cast<double>(count), seconds) << " "
            << unit << "/s\n";
}

inline double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace replay
