#pragma once
// The slot map of a Redis Cluster: which master serves each of the 16384
// hash slots, read with CLUSTER SLOTS from any node that answers, the slot
// of a key and the key a command routes by, and the redirections (MOVED,
// ASK) a node answers for a slot it does not serve.

#include "storage/redis/link.h"
#include "storage/redis/reply.h"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tensordict::detail::redis {

/// The cluster hash slot of a key (CRC16/XMODEM of the key, or of the part
/// between the first '{' and the next '}' when that part is not empty).
int key_slot(std::string_view key) noexcept;

/// The key a command routes by: the first key argument; nullopt for keyless
/// commands (CONFIG, INFO, PING...).
std::optional<std::string_view> routing_key(const std::vector<std::string_view>& args);

/// A redirection reply: "MOVED <slot> <host:port>" or "ASK <slot> <host:port>"
/// (an address without host is on `from_host`); nullopt for any other reply.
struct Redirect {
  bool ask = false;
  int slot = 0;
  std::string address;
};
std::optional<Redirect> redirect_of(const ReplyView& r, const std::string& from_host);

/// An error reply saying that nothing was executed and the server (or
/// cluster) will serve the command shortly: TRYAGAIN, CLUSTERDOWN, LOADING.
bool retryable(const ReplyView& r);

class SlotMap {
 public:
  static constexpr int kSlots = 16384;

  /// `seeds` ("host:port") are asked when no known node answers.
  explicit SlotMap(std::vector<std::string> seeds) : seeds_(std::move(seeds)) {}

  const std::vector<std::string>& seeds() const noexcept { return seeds_; }
  bool known() const noexcept { return known_; }
  /// The map must be read again before the next use.
  void forget() noexcept { known_ = false; }
  /// Reads the map (CLUSTER SLOTS) from the nodes known in `links`, then
  /// the seeds; the first that answers gives it. A reply that is not a
  /// valid map is a FormatError; a node that is no cluster node a
  /// StorageError; no node answering a ConnectionError naming `where`.
  void refresh(LinkPool& links, std::int64_t& round_trips, const std::string& where);
  /// The master of `slot` (a slot no node serves reads the map again);
  /// any master for slot -1 (a keyless command).
  Link& owner(int slot, LinkPool& links, std::int64_t& round_trips, const std::string& where);
  /// A MOVED reply: `slot` is now served by `link`.
  void moved(int slot, Link* link) noexcept {
    if (slot >= 0 && slot < kSlots) slots_[static_cast<std::size_t>(slot)] = link;
  }
  /// The address of every master, in slot order.
  std::vector<std::string> masters() const;

 private:
  std::vector<std::string> seeds_;
  std::array<Link*, kSlots> slots_{};
  bool known_ = false;
};

}  // namespace tensordict::detail::redis
