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
  at::Tensor t = at::empty({size}, at::kByte);
  recv_now(t, src);
  return tensor_string(t);
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
