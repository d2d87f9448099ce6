// A private redis-server for one test: started on 127.0.0.1 with a port
// chosen free by the kernel and a Unix socket in its own temporary
// directory, no persistence unless asked, waited for with PING, and killed
// when the object goes. It never touches a server it did not start, and
// several test processes (ctest -j) each get their own.
#pragma once

#include <tensordict/storage/redis.h>

#include <hiredis/hiredis.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace td_test {

class RedisServer {
 public:
  struct Options {
    std::string password;
    bool persistent = false;  // AOF with fsync always, so a SIGKILL loses no acknowledged write
    std::vector<std::string> extra;  // more redis-server arguments
  };
  RedisServer() : RedisServer(Options{}) {}
  explicit RedisServer(Options options) : options_(std::move(options)) {
    char tmpl[] = "/tmp/td-redis-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir_ = tmpl;
    for (int attempt = 0; attempt < 10; ++attempt) {
      port_ = free_port();
      if (start()) return;
    }
    throw std::runtime_error("could not start redis-server");
  }
  ~RedisServer() {
    stop();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  int port() const { return port_; }
  const std::string& socket() const { return socket_; }
  const std::string& dir() const { return dir_; }

  /// Kills the server (SIGKILL: no shutdown, as a crash).
  void kill() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }
  /// Starts it again on the same port and directory.
  void restart() {
    kill();
    if (!start()) throw std::runtime_error("could not restart redis-server");
  }

  /// One command on a fresh connection; the reply as text (arrays joined by
  /// '\n', integers in decimal, nil as "(nil)").
  std::string command(const std::vector<std::string>& args) const {
    redisContext* c = connect();
    if (c == nullptr) throw std::runtime_error("no connection to the test redis-server");
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    for (const auto& a : args) argv.push_back(a.data()), lens.push_back(a.size());
    auto* r = static_cast<redisReply*>(
        redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data()));
    if (r == nullptr) {
      redisFree(c);
      throw std::runtime_error("command failed");
    }
    std::string out = render(r);
    freeReplyObject(r);
    redisFree(c);
    return out;
  }
  /// INFO commandstats as {command: calls}, without CONFIG.
  std::map<std::string, long> command_calls() const {
    std::map<std::string, long> out;
    std::string info = command({"INFO", "commandstats"});
    std::size_t pos = 0;
    while ((pos = info.find("cmdstat_", pos)) != std::string::npos) {
      const auto colon = info.find(':', pos);
      const auto calls = info.find("calls=", colon);
      const std::string name = info.substr(pos + 8, colon - pos - 8);
      // The counter reset itself is not the test's traffic.
      if (name.rfind("config", 0) != 0) out[name] = std::stol(info.substr(calls + 6));
      pos = colon;
    }
    return out;
  }
  /// CONFIG RESETSTAT (the counters of command_calls() and INFO stats).
  void reset_stats() const { command({"CONFIG", "RESETSTAT"}); }
  long stat(const std::string& name) const {
    std::string info = command({"INFO", "stats"});
    const auto pos = info.find(name + ":");
    return pos == std::string::npos ? -1 : std::stol(info.substr(pos + name.size() + 1));
  }

  /// A TCP port on 127.0.0.1 that the kernel says is free now.
  static int free_port() {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    socklen_t len = sizeof addr;
    getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    const int port = ntohs(addr.sin_port);
    ::close(fd);
    return port;
  }

 private:
  static std::string render(const redisReply* r) {
    switch (r->type) {
      case REDIS_REPLY_INTEGER:
        return std::to_string(r->integer);
      case REDIS_REPLY_NIL:
        return "(nil)";
      case REDIS_REPLY_ARRAY: {
        std::string s;
        for (size_t i = 0; i < r->elements; ++i) s += (i ? "\n" : "") + render(r->element[i]);
        return s;
      }
      default:
        return std::string(r->str, r->len);
    }
  }
  redisContext* connect() const {
    timeval tv{1, 0};
    redisContext* c = redisConnectUnixWithTimeout(socket_.c_str(), tv);
    if (c == nullptr || c->err) {
      if (c) redisFree(c);
      return nullptr;
    }
    if (!options_.password.empty()) {
      auto* r = static_cast<redisReply*>(redisCommand(c, "AUTH %s", options_.password.c_str()));
      if (r) freeReplyObject(r);
    }
    return c;
  }
  bool start() {
    socket_ = dir_ + "/redis.sock";
    std::vector<std::string> args{"redis-server",
                                  "--port",
                                  std::to_string(port_),
                                  "--bind",
                                  "127.0.0.1",
                                  "--unixsocket",
                                  socket_,
                                  "--unixsocketperm",
                                  "700",
                                  "--dir",
                                  dir_,
                                  "--save",
                                  "",
                                  "--daemonize",
                                  "no",
                                  "--logfile",
                                  dir_ + "/redis.log"};
    if (options_.persistent) {
      args.insert(args.end(), {"--appendonly", "yes", "--appendfsync", "always"});
    } else {
      args.insert(args.end(), {"--appendonly", "no"});
    }
    if (!options_.password.empty()) args.insert(args.end(), {"--requirepass", options_.password});
    args.insert(args.end(), options_.extra.begin(), options_.extra.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_ = fork();
    if (pid_ < 0) return false;
    if (pid_ == 0) {
      // The server dies with the process that started it, even when that one
      // is killed (a test timeout), so no server is left behind.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      execvp("redis-server", argv.data());
      _exit(127);
    }
    for (int i = 0; i < 500; ++i) {  // up to 5 s
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {  // exited: port taken
        pid_ = -1;
        return false;
      }
      if (redisContext* c = connect()) {
        auto* r = static_cast<redisReply*>(redisCommand(c, "PING"));
        const bool ok = r != nullptr && r->type == REDIS_REPLY_STATUS;
        if (r) freeReplyObject(r);
        redisFree(c);
        if (ok) return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    kill();
    return false;
  }
  void stop() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }

  Options options_;
  std::string dir_;
  std::string socket_;
  int port_ = 0;
  pid_t pid_ = -1;
};

/// Storage options for a store on `server`'s Unix socket.
inline tensordict::storage::Redis on(const RedisServer& server, std::string td_id = {}) {
  tensordict::storage::Redis r;
  r.unix_socket = server.socket();
  r.td_id = std::move(td_id);
  return r;
}

}  // namespace td_test
