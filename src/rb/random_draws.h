#pragma once
// Uniform draws taken straight from a CPU generator (LibTorch's mt19937,
// under its lock), the way ATen's randint and rand kernels take them, without
// an operator call: for the 256 draws of a sample the call (dispatch, tensor
// iterator, output tensor) cost more than the draws.

#include <tensordict/errors.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>

#include <cstdint>
#include <limits>
#include <mutex>
#include <string>
#include <utility>

namespace tensordict::rb::detail {

class CpuDraws {
 public:
  /// Locks `generator` (LibTorch's default CPU generator when null) until
  /// destroyed. TypeError for a generator of another device.
  explicit CpuDraws(at::Generator* generator)
      : generator_(generator != nullptr && generator->defined()
                       ? *generator
                       : at::detail::getDefaultCPUGenerator()),
        lock_(generator_.mutex()) {
    if (generator_.device().type() != at::kCPU)
      throw TypeError("replay buffer sampling: expected a CPU generator, got one on " +
                      generator_.device().str());
    impl_ = generator_.get<at::CPUGeneratorImpl>();
  }

  /// n integers uniform in [0, range) (range > 0).
  void integers(int64_t range, int64_t* out, int64_t n) {
    for (int64_t k = 0; k < n; ++k) out[k] = below(range);
  }

  /// Shuffles data[0, n) in place (Fisher-Yates): every order equally likely.
  void shuffle(int64_t* data, int64_t n) {
    for (int64_t i = 0; i + 1 < n; ++i) std::swap(data[i], data[i + below(n - i)]);
  }

  /// One integer uniform in [0, range) (range > 0), without bias. Below 2^32
  /// Lemire's method: a 32-bit draw times range, the high half; a division
  /// only for the rare draw that must be rejected (at::randint's modulo is a
  /// 64-bit division per draw, and slightly biased).
  int64_t below(int64_t range) {
    const auto r = static_cast<uint64_t>(range);
    if (r > std::numeric_limits<uint32_t>::max()) {
      const uint64_t limit = std::numeric_limits<uint64_t>::max() -
                             std::numeric_limits<uint64_t>::max() % r;  // a multiple of r
      uint64_t x = impl_->random64();
      while (x >= limit) x = impl_->random64();
      return static_cast<int64_t>(x % r);
    }
    const auto r32 = static_cast<uint32_t>(r);
    uint64_t m = uint64_t{impl_->random()} * r32;
    auto low = static_cast<uint32_t>(m);
    if (low < r32) {
      const uint32_t threshold = static_cast<uint32_t>(-r32) % r32;
      while (low < threshold) {
        m = uint64_t{impl_->random()} * r32;
        low = static_cast<uint32_t>(m);
      }
    }
    return static_cast<int64_t>(m >> 32);
  }

  /// n doubles uniform in [0, 1), 53 random bits each, as at::rand.
  void unit_doubles(double* out, int64_t n) {
    constexpr double kUnit = 1.0 / static_cast<double>(uint64_t{1} << 53);
    for (int64_t k = 0; k < n; ++k)
      out[k] = static_cast<double>(impl_->random64() & ((uint64_t{1} << 53) - 1)) * kUnit;
  }

 private:
  at::Generator generator_;
  std::lock_guard<std::mutex> lock_;
  at::CPUGeneratorImpl* impl_ = nullptr;
};

}  // namespace tensordict::rb::detail
