// Messages of one operation over a process group (channel.h).

#include "distributed/channel.h"

#include "distributed/layout.h"

#include <algorithm>
#include <cctype>

namespace tensordict::detail::distributed {

namespace {

bool contains_ci(std::string haystack, const char* needle) {
  std::transform(haystack.begin(), haystack.end(), haystack.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return haystack.find(needle) != std::string::npos;
}

}  // namespace

std::string Channel::recv_string(int64_t size, int src) {
  if (size < 0 || size > kMaxJsonBytes)
    throw FormatError(what_ + ": the peer announces a message of " + std::to_string(size) +
                      " bytes, outside [0, " + std::to_string(kMaxJsonBytes) + "]");
  if (size == 0) return {};
  at::Tensor t = guarded_bytes(size);
  recv_now(t, src);
  check_fit(t, src, "a message of JSON");
  return tensor_string(t);
}

void Channel::check_fit(const at::Tensor& t, int src, const char* which) const {
  if (overran(t))
    throw FormatError(what_ + ": rank " + std::to_string(src) + " sent a message longer than " +
                      which + " of " + std::to_string(t.numel()) +
                      " bytes (not a message of this transfer: another program's or protocol's "
                      "on its tag?)");
}

void Channel::wait_all(std::vector<c10::intrusive_ptr<c10d::Work>>& works,
                       const std::optional<Deadline>& deadline) {
  if (!deadline) {
    wait_all(works);
    return;
  }
  for (auto& w : works) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        *deadline - std::chrono::steady_clock::now());
    // At least 1 ms: Gloo takes a zero timeout for its default.
    const auto wait_for = std::max(left, std::chrono::milliseconds(1));
    guarded([&] {
      w->wait(wait_for);
      return 0;
    });
  }
  works.clear();
}

void Channel::translate(const std::string& error) const {
  const std::string msg = what_ + ": " + error;
  if (contains_ci(error, "timed out") || contains_ci(error, "timeout")) throw TimeoutError(msg);
  if (contains_ci(error, "connection") || contains_ci(error, "closed by peer"))
    throw ConnectionError(msg);
  throw StorageError(msg);
}

void check_peer(c10d::ProcessGroup& pg, int peer, const char* op, const char* role) {
  if (peer < 0 || peer >= pg.getSize() || peer == pg.getRank())
    throw ValueError(std::string(op) + ": " + role + " rank " + std::to_string(peer) +
                     " is not another rank of the group (rank " + std::to_string(pg.getRank()) +
                     " of " + std::to_string(pg.getSize()) + ")");
}

}  // namespace tensordict::detail::distributed
