#include "storage/redis/slot_map.h"

#include <tensordict/errors.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>

namespace tensordict::detail::redis {
namespace {

constexpr std::array<uint16_t, 256> crc16_table() {
  std::array<uint16_t, 256> t{};
  for (int i = 0; i < 256; ++i) {
    uint16_t c = static_cast<uint16_t>(i << 8);
    for (int b = 0; b < 8; ++b)
      c = (c & 0x8000) ? static_cast<uint16_t>((c << 1) ^ 0x1021) : c << 1;
    t[i] = c;
  }
  return t;
}
constexpr auto kCrc16 = crc16_table();

}  // namespace

int key_slot(std::string_view key) noexcept {
  const auto open = key.find('{');
  if (open != std::string_view::npos) {
    const auto close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1)
      key = key.substr(open + 1, close - open - 1);
  }
  uint16_t crc = 0;
  for (unsigned char c : key)
    crc = static_cast<uint16_t>((crc << 8) ^ kCrc16[((crc >> 8) ^ c) & 0xff]);
  return crc & 16383;
}

std::optional<std::string_view> routing_key(const std::vector<std::string_view>& args) {
  if (args.size() < 2) return std::nullopt;
  auto is = [&](const char* name) {
    const std::string_view c = args[0];
    if (c.size() != std::strlen(name)) return false;
    for (std::size_t i = 0; i < c.size(); ++i)
      if (std::toupper(static_cast<unsigned char>(c[i])) != name[i]) return false;
    return true;
  };
  if (is("EVAL") || is("EVALSHA") || is("FCALL")) {
    if (args.size() < 4 || args[2] == "0") return std::nullopt;
    return args[3];
  }
  for (const char* keyless : {"CONFIG", "INFO", "PING", "CLUSTER", "SCRIPT", "DBSIZE", "KEYS",
                              "SCAN", "FLUSHDB", "FLUSHALL", "CLIENT", "ECHO", "TIME"})
    if (is(keyless)) return std::nullopt;
  return args[1];
}

std::optional<Redirect> redirect_of(const ReplyView& r, const std::string& from_host) {
  const std::string_view e = r.error_text();
  const bool moved = e.rfind("MOVED ", 0) == 0, ask = e.rfind("ASK ", 0) == 0;
  if (!moved && !ask) return std::nullopt;
  const auto s1 = e.find(' '), s2 = e.find(' ', s1 + 1);
  if (s2 == std::string_view::npos) return std::nullopt;
  Redirect out;
  out.ask = ask;
  out.slot = std::atoi(std::string(e.substr(s1 + 1, s2 - s1 - 1)).c_str());
  out.address = std::string(e.substr(s2 + 1));
  if (!out.address.empty() && out.address[0] == ':') out.address = from_host + out.address;
  return out;
}

bool retryable(const ReplyView& r) {
  const std::string_view e = r.error_text();
  // A slot mid-migration, a cluster settling, a restarted server loading its AOF.
  return e.rfind("TRYAGAIN", 0) == 0 || e.rfind("CLUSTERDOWN", 0) == 0 ||
         e.rfind("LOADING", 0) == 0;
}

void SlotMap::refresh(LinkPool& links, std::int64_t& round_trips, const std::string& where) {
  // Ask the nodes known so far, then the seeds.
  std::vector<std::string> candidates = links.addresses();
  for (const auto& s : seeds_)
    if (!links.has(s)) candidates.push_back(s);
  std::string last;
  for (const auto& address : candidates) {
    Link& l = links.get(address);
    Reply r;
    try {
      l.ensure(round_trips);
      l.append({"CLUSTER", "SLOTS"}, "reading the cluster slot map");
      l.flush("reading the cluster slot map");
      ++round_trips;
      r = l.read("reading the cluster slot map");
    } catch (const ConnectionError& e) {
      last = e.what();
      continue;
    }
    const std::string refusal(r.error_text());
    if (r.is_error() && refusal.find("cluster support disabled") == std::string::npos) {
      // Not ready (LOADING after a restart...): ask another node.
      last = "Redis server " + address + ": CLUSTER SLOTS: " + refusal;
      continue;
    }
    if (r.is_error())
      throw StorageError(
          "Redis server " + address +
          " is not a cluster node (the option cluster is set): CLUSTER SLOTS: " + refusal);
    if (!r.is_array())
      throw FormatError("Redis server " + address + ": CLUSTER SLOTS: not an array");
    // Validated whole before the map changes: a reply from a broken or
    // hostile node (a negative, reversed or out-of-range slot range, fields
    // of other types) is a FormatError, never an index out of the map.
    struct Range {
      long long first, last;
      std::string node;
    };
    std::vector<Range> ranges;
    const std::string what = "Redis server " + address + ": CLUSTER SLOTS";
    const ReplyArray entries = r.array(what);
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const ReplyView e = entries[i];
      const auto bad = [&](const std::string& why) {
        return FormatError(what + ": entry " + std::to_string(i) + ": " + why);
      };
      if (!e.is_array() || e.array(what).size() < 3)
        throw bad("not an array [first slot, last slot, master, ...]");
      const ReplyArray fields = e.array(what);
      const ReplyView master = fields[2];
      if (!fields[0].is_integer() || !fields[1].is_integer())
        throw bad("the slot range is not two integers");
      const long long first = fields[0].integer(what), last_slot = fields[1].integer(what);
      if (first < 0 || last_slot >= kSlots || first > last_slot)
        throw bad("slot range " + std::to_string(first) + ".." + std::to_string(last_slot) +
                  " is not within 0..16383 in order");
      const auto host_port = master.is_array() ? master.array(what) : ReplyArray(nullptr, 0);
      if (host_port.size() < 2 || !host_port[0].is_text() || !host_port[1].is_integer() ||
          host_port[1].integer(what) < 1 || host_port[1].integer(what) > 65535)
        throw bad("the master is not [host, port 1..65535, ...]");
      std::string host(host_port[0].text(what));
      if (host.empty() || host == "?") host = l.host();
      ranges.push_back({first, last_slot, host + ":" + std::to_string(host_port[1].integer(what))});
    }
    // A map without any slot (a cluster whose slots are not assigned yet)
    // serves nothing: the blocks of a sharded store would have no master.
    if (ranges.empty())
      throw StorageError("Redis server " + address +
                         ": CLUSTER SLOTS: no node serves any slot (are the cluster's slots "
                         "assigned?)");
    slots_.fill(nullptr);
    for (const auto& range : ranges) {
      Link* target = &links.get(range.node);
      for (long long s = range.first; s <= range.last; ++s)
        slots_[static_cast<std::size_t>(s)] = target;
    }
    known_ = true;
    return;
  }
  throw ConnectionError("cannot reach any node of the Redis " + where + ": " + last);
}

Link& SlotMap::owner(int slot, LinkPool& links, std::int64_t& round_trips,
                     const std::string& where) {
  if (!known_) refresh(links, round_trips, where);
  if (slot < 0) {  // a keyless command: any master
    for (Link* l : slots_)
      if (l != nullptr) return *l;
    throw StorageError("Redis " + where + ": no node serves any slot");
  }
  Link* l = slots_[static_cast<std::size_t>(slot)];
  if (l == nullptr) {
    refresh(links, round_trips, where);  // the map may have changed
    l = slots_[static_cast<std::size_t>(slot)];
  }
  if (l == nullptr)
    throw StorageError("Redis " + where + ": slot " + std::to_string(slot) +
                       " is not served by any node (CLUSTER SLOTS)");
  return *l;
}

std::vector<std::string> SlotMap::masters() const {
  std::vector<std::string> out;
  for (Link* l : slots_)
    if (l != nullptr && std::find(out.begin(), out.end(), l->address()) == out.end())
      out.push_back(l->address());
  return out;
}

}  // namespace tensordict::detail::redis
