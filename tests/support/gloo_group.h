// A c10d process group backed by Gloo on loopback, for the distributed tests
// and benchmark: the one place that knows how a Gloo group is built on each
// LibTorch version (docs/distributed.md, "Building a Gloo group").
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>

namespace td_test {

// Joins `size` processes through `store` (each with its own `rank`) into a
// group whose CPU backend is Gloo on 127.0.0.1, with `timeout` for every
// operation. Always owned by an intrusive_ptr: LibTorch 2.x reclaims the
// group from `this` inside every call.
c10::intrusive_ptr<c10d::ProcessGroup> make_gloo_group(const c10::intrusive_ptr<c10d::Store>& store,
                                                       int rank, int size,
                                                       std::chrono::milliseconds timeout);

}  // namespace td_test
