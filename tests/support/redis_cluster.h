// A private 3-master Redis Cluster for one test: three `redis-server
// --cluster-enabled yes` started by RedisServer (each on a free loopback port
// with its own cluster bus port and directory), joined by `redis-cli
// --cluster create ... --cluster-replicas 0 --cluster-yes`, waited for until
// every node reports cluster_state:ok and the same slot map, and stopped with
// the object (the servers also die with the test process). Helpers move a
// slot between masters step by step (IMPORTING/MIGRATING, MIGRATE, SETSLOT
// NODE) and restart a master on its port with its nodes.conf and AOF.
#pragma once

#include "support/redis_server.h"

#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>

namespace td_test {

class RedisCluster {
 public:
  struct Options {
    bool persistent = false;         // AOF, fsync always, on every master
    std::vector<std::string> extra;  // more redis-server arguments for every master
  };
  RedisCluster() : RedisCluster(Options{}) {}
  explicit RedisCluster(Options options) {
    for (int i = 0; i < 3; ++i) {
      // The bus port is chosen here: another test may take it first, then
      // the server exits and another one is tried.
      for (int attempt = 0;; ++attempt) {
        std::vector<std::string> extra{
            "--cluster-enabled",      "yes",
            "--cluster-port",         std::to_string(RedisServer::free_port()),
            "--cluster-config-file",  "nodes.conf",
            "--cluster-node-timeout", "15000"};
        extra.insert(extra.end(), options.extra.begin(), options.extra.end());
        try {
          nodes_.push_back(std::make_unique<RedisServer>(
              RedisServer::Options{.persistent = options.persistent, .extra = extra}));
          break;
        } catch (const std::runtime_error&) {
          if (attempt == 5) throw;
        }
      }
    }
    std::string cmd = "redis-cli --cluster create";
    for (const auto& n : nodes_) cmd += " 127.0.0.1:" + std::to_string(n->port());
    cmd += " --cluster-replicas 0 --cluster-yes > " + nodes_[0]->dir() + "/create.log 2>&1";
    if (std::system(cmd.c_str()) != 0) {
      std::ifstream log(nodes_[0]->dir() + "/create.log");
      std::stringstream ss;
      ss << log.rdbuf();
      throw std::runtime_error("redis-cli --cluster create failed: " + ss.str());
    }
    wait_ok();
    for (const auto& n : nodes_) ids_.push_back(n->command({"CLUSTER", "MYID"}));
  }

  std::size_t size() const { return nodes_.size(); }
  RedisServer& node(std::size_t i) { return *nodes_.at(i); }
  int port(std::size_t i) const { return nodes_.at(i)->port(); }
  std::string address(std::size_t i) const { return "127.0.0.1:" + std::to_string(port(i)); }
  const std::string& id(std::size_t i) const { return ids_.at(i); }

  /// The master that serves `slot` (by its index).
  std::size_t owner(int slot) const {
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
      // CLUSTER COUNTKEYSINSLOT answers everywhere; ask who serves by the map.
      std::istringstream in(nodes_[i]->command({"CLUSTER", "NODES"}));
      for (std::string line; std::getline(in, line);) {
        if (line.find("myself") == std::string::npos) continue;
        std::istringstream f(line);
        std::vector<std::string> fields;
        for (std::string w; f >> w;) fields.push_back(w);
        for (std::size_t k = 8; k < fields.size(); ++k) {
          const std::string& r = fields[k];
          if (r[0] == '[') continue;  // a migrating/importing mark
          const auto dash = r.find('-');
          const int lo = std::stoi(r.substr(0, dash));
          const int hi = dash == std::string::npos ? lo : std::stoi(r.substr(dash + 1));
          if (slot >= lo && slot <= hi) return i;
        }
      }
    }
    throw std::runtime_error("no master serves slot " + std::to_string(slot));
  }

  /// Migration of `slot` from master `from` to master `to`, in the three
  /// steps of redis-cli --cluster reshard.
  void begin_migration(int slot, std::size_t from, std::size_t to) {
    const std::string s = std::to_string(slot);
    check(node(to).command({"CLUSTER", "SETSLOT", s, "IMPORTING", id(from)}));
    check(node(from).command({"CLUSTER", "SETSLOT", s, "MIGRATING", id(to)}));
  }
  /// Moves every key of `slot` from `from` to `to` (MIGRATE ... KEYS).
  void migrate_keys(int slot, std::size_t from, std::size_t to) {
    std::istringstream in(
        node(from).command({"CLUSTER", "GETKEYSINSLOT", std::to_string(slot), "100000"}));
    std::vector<std::string> args{"MIGRATE", "127.0.0.1", std::to_string(port(to)), "", "0",
                                  "10000",   "KEYS"};
    std::size_t n = args.size();
    for (std::string k; std::getline(in, k);)
      if (!k.empty()) args.push_back(k);
    if (args.size() > n) check(node(from).command(args));
  }
  /// Gives `slot` to `to` on every master (the importing node first).
  void end_migration(int slot, std::size_t to) {
    const std::string s = std::to_string(slot);
    check(node(to).command({"CLUSTER", "SETSLOT", s, "NODE", id(to)}));
    for (std::size_t i = 0; i < nodes_.size(); ++i)
      if (i != to) check(node(i).command({"CLUSTER", "SETSLOT", s, "NODE", id(to)}));
  }

  /// Kills master `i` (SIGKILL) and starts it again on the same port with
  /// its directory (nodes.conf, AOF), then waits for the cluster to be ok.
  void restart(std::size_t i) {
    node(i).restart();
    wait_ok();
  }

  /// Waits until every master reports cluster_state:ok and knows all three
  /// masters with slots.
  void wait_ok() {
    for (int attempt = 0; attempt < 600; ++attempt) {  // up to 30 s
      bool ok = true;
      for (const auto& n : nodes_) {
        try {
          if (n->command({"CLUSTER", "INFO"}).find("cluster_state:ok") == std::string::npos ||
              count_lines(n->command({"CLUSTER", "SHARDS"}), "master") < 3)
            ok = false;
        } catch (const std::exception&) {
          ok = false;
        }
      }
      if (ok) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    throw std::runtime_error("the test Redis Cluster did not reach cluster_state:ok");
  }

 private:
  static void check(const std::string& reply) {
    if (reply != "OK" && reply != "NOKEY")
      throw std::runtime_error("Redis Cluster test helper: " + reply);
  }
  static int count_lines(const std::string& s, const std::string& line) {
    std::istringstream in(s);
    int n = 0;
    for (std::string l; std::getline(in, l);) n += l == line;
    return n;
  }

  std::vector<std::unique_ptr<RedisServer>> nodes_;
  std::vector<std::string> ids_;
};

}  // namespace td_test
