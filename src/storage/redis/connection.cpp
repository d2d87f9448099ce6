#include "storage/redis/connection.h"

#include <algorithm>
#include <map>
#include <unordered_map>

namespace tensordict::detail::redis {
namespace {

bool cluster_of(const storage::Redis& options) { return options.cluster || !options.seeds.empty(); }

// The seeds of a cluster, checked ("host:port"); none for a single server.
std::vector<std::string> seeds_of(const storage::Redis& options) {
  if (!cluster_of(options)) return {};
  if (!options.unix_socket.empty())
    throw ValueError(
        "Redis cluster: a cluster is reached over TCP (host:port seeds), not the "
        "Unix socket '" +
        options.unix_socket + "'");
  if (options.db != 0)
    throw ValueError("Redis cluster: a cluster has only database 0, got db " +
                     std::to_string(options.db));
  std::vector<std::string> seeds = options.seeds;
  if (seeds.empty()) seeds.push_back(options.host + ":" + std::to_string(options.port));
  for (const auto& s : seeds) split_address(s);  // validates
  return seeds;
}

}  // namespace

Connection::Connection(storage::Redis options)
    : options_(std::move(options)),
      cluster_(cluster_of(options_)),
      links_(options_, cluster_),
      slots_(seeds_of(options_)) {
  if (cluster_) {
    where_ = "cluster ";
    for (std::size_t i = 0; i < slots_.seeds().size(); ++i)
      where_ += (i ? "," : "") + slots_.seeds()[i];
  } else if (!options_.unix_socket.empty()) {
    where_ = "unix:" + options_.unix_socket;
  } else {
    where_ = options_.host + ":" + std::to_string(options_.port);
  }
}

Connection::~Connection() { close(); }

void Connection::close() noexcept {
  std::lock_guard lock(mu_);
  links_.close_all();
  slots_.forget();
}

std::vector<Group> Connection::groups_of(const Batch& batch, bool transaction) {
  const auto& commands = batch.commands();
  std::vector<Group> groups;
  if (!cluster_) {
    Group g;
    g.link = &links_.get(where_);
    g.tx = transaction;
    g.cmds.resize(commands.size());
    for (std::size_t i = 0; i < commands.size(); ++i) g.cmds[i] = i;
    groups.push_back(std::move(g));
    return groups;
  }
  // One group per slot with a transaction (MULTI/EXEC needs one slot), one
  // per node without; in the order of first appearance.
  std::map<std::pair<Link*, int>, std::size_t> index;
  // Each distinct key (an own()ed view, reused by the commands of a leaf)
  // is hashed once.
  std::unordered_map<const char*, std::pair<std::size_t, int>> hashed;
  for (std::size_t i = 0; i < commands.size(); ++i) {
    auto key = routing_key(commands[i]);
    int slot = -1;
    if (key) {
      auto [it, fresh] = hashed.try_emplace(key->data(), key->size(), 0);
      if (fresh || it->second.first != key->size()) it->second = {key->size(), key_slot(*key)};
      slot = it->second.second;
    }
    Link* l = &owner(slot);
    const std::pair<Link*, int> id{l, transaction ? slot : -2};
    auto [it, fresh] = index.emplace(id, groups.size());
    if (fresh) groups.push_back(Group{l, transaction, false, slot, {}});
    groups[it->second].cmds.push_back(i);
  }
  return groups;
}

Pipeline Connection::pipeline(const Batch& batch, const std::string& what) {
  return Pipeline(
      batch, what, round_trips_,
      [this](const Redirect& to) -> Link& {
        Link& target = links_.get(to.address);
        if (!to.ask) slots_.moved(to.slot, &target);
        return target;
      },
      [this] {
        links_.close_all();
        slots_.forget();
      });
}

std::vector<Reply> Connection::send(const Batch& batch, const std::string& what, bool transaction) {
  if (batch.empty()) return {};
  std::lock_guard lock(mu_);
  Pipeline p = pipeline(batch, what);
  // Commands the server cannot serve yet are re-sent until the connect
  // timeout (5 s when none).
  p.run(
      groups_of(batch, transaction), [this] { slots_.refresh(links_, round_trips_, where_); },
      options_.connect_timeout > 0 ? options_.connect_timeout : 5.0, where_);
  if (!p.errors().empty()) throw StorageError(p.errors().front());
  return std::move(p.replies());
}

Reply Connection::call(std::vector<std::string_view> args, const std::string& what) {
  Batch b;
  b.add(std::move(args));
  return std::move(send(b, what).front());
}

std::vector<std::string> Connection::nodes() {
  std::lock_guard lock(mu_);
  if (!cluster_) return {where_};
  if (!slots_.known()) slots_.refresh(links_, round_trips_, where_);
  return slots_.masters();
}

std::string Connection::node_of(std::string_view key) {
  std::lock_guard lock(mu_);
  if (!cluster_) return where_;
  return owner(key_slot(key)).address();
}

std::vector<Reply> Connection::call_each_node(std::vector<std::string_view> args,
                                              const std::string& what) {
  std::lock_guard lock(mu_);
  std::vector<Reply> out;
  Batch b;
  b.add(std::move(args));
  for (const auto& address : nodes()) {
    Pipeline p = pipeline(b, what);
    (void)p.round({Group{&links_.get(cluster_ ? address : where_), false, false, -1, {0}}});
    out.push_back(std::move(p.replies().front()));  // error replies are returned as such
  }
  return out;
}

}  // namespace tensordict::detail::redis
