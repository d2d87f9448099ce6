#pragma once
// Messages of one operation over a process group, with c10d/Gloo failures
// turned into tensordict errors (TimeoutError, ConnectionError, StorageError)
// naming the operation.

#include "distributed/buffers.h"

#include <tensordict/distributed.h>
#include <tensordict/errors.h>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tensordict::detail::distributed {

// One operation's messages: every message on options.tag, every c10d/Gloo
// failure rethrown as a tensordict error whose message starts with `what`.
class Channel {
  // c10d/Gloo errors out of `f` as tensordict errors (defined first: its
  // return type is deduced).
  template <class F>
  decltype(auto) guarded(F&& f) {
    try {
      return f();
    } catch (const Error&) {
      throw;
    } catch (const c10::Error& e) {
      translate(e.what_without_backtrace());
    } catch (const std::exception& e) {
      translate(e.what());
    }
  }

 public:
  Channel(c10d::ProcessGroup& pg, const TransferOptions& options, std::string what)
      : pg_(pg), options_(options), what_(std::move(what)) {}

  c10::intrusive_ptr<c10d::Work> send(const at::Tensor& t, int dst) {
    std::vector<at::Tensor> v{t};
    return guarded([&] { return pg_.send(v, dst, options_.tag); });
  }
  // Into a guarded buffer (or a slice of one, buffers.h), posted with the
  // room behind it: a longer message lands there, and check_fit() tells.
  c10::intrusive_ptr<c10d::Work> recv(const at::Tensor& t, int src) {
    std::vector<at::Tensor> v{receivable(t)};
    return guarded([&] { return pg_.recv(v, src, options_.tag); });
  }
  // FormatError naming `src` when the message received into `t` (guarded,
  // waited for) was longer than `t`: not a message of this transfer.
  void check_fit(const at::Tensor& t, int src, const char* which) const;
  // On a tag of their own (Python's wire: one tag per leaf).
  c10::intrusive_ptr<c10d::Work> send_on(int tag, const at::Tensor& t, int dst) {
    std::vector<at::Tensor> v{t};
    return guarded([&] { return pg_.send(v, dst, tag); });
  }
  c10::intrusive_ptr<c10d::Work> recv_on(int tag, const at::Tensor& t, int src) {
    std::vector<at::Tensor> v{t};
    return guarded([&] { return pg_.recv(v, src, tag); });
  }
  void wait(const c10::intrusive_ptr<c10d::Work>& work) {
    guarded([&] {
      if (options_.timeout.count() > 0)
        work->wait(options_.timeout);
      else
        work->wait();
      return 0;
    });
  }
  void wait_all(std::vector<c10::intrusive_ptr<c10d::Work>>& works) {
    for (auto& w : works) wait(w);
    works.clear();
  }
  // The same, the last first: when the connection closes, Gloo fails at once
  // the receives still waiting for their message, but not the one it is
  // reading into (that one waits for its timeout), so a peer that dies before
  // the last message is noticed now. (A Work is waited for once: Gloo's
  // receive counts completions, and a second wait waits for another.)
  void wait_all_last_first(std::vector<c10::intrusive_ptr<c10d::Work>>& works) {
    if (works.empty()) return;
    wait(works.back());
    works.pop_back();
    wait_all(works);
  }
  using Deadline = std::chrono::steady_clock::time_point;
  // The deadline of messages waited for within one timeout in all
  // (TransferOptions::timeout; none when it is zero, the group's then
  // applying to each message).
  std::optional<Deadline> deadline() const {
    if (options_.timeout.count() <= 0) return std::nullopt;
    return std::chrono::steady_clock::now() + options_.timeout;
  }
  // Waits for all by `deadline`: a peer that takes one message per timeout
  // does not stretch a batch of many.
  void wait_all(std::vector<c10::intrusive_ptr<c10d::Work>>& works,
                const std::optional<Deadline>& deadline);
  void send_now(const at::Tensor& t, int dst) { wait(send(t, dst)); }
  void recv_now(const at::Tensor& t, int src) { wait(recv(t, src)); }

  // `size` bytes the peer announced (checked: at most kMaxJsonBytes).
  std::string recv_string(int64_t size, int src);
  // A collective op, waited for.
  template <class F>
  void collective(F&& post) {
    wait(guarded(std::forward<F>(post)));
  }

  const std::string& what() const { return what_; }
  c10d::ProcessGroup& pg() { return pg_; }
  const TransferOptions& options() const { return options_; }

 private:
  [[noreturn]] void translate(const std::string& error) const;

  c10d::ProcessGroup& pg_;
  TransferOptions options_;
  std::string what_;
};

// ValueError unless `peer` is another rank of `pg`.
void check_peer(c10d::ProcessGroup& pg, int peer, const char* op, const char* role);

}  // namespace tensordict::detail::distributed
