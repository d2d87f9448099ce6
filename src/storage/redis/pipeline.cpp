#include "storage/redis/pipeline.h"

#include <tensordict/errors.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <thread>
#include <utility>

namespace tensordict::detail::redis {

std::vector<Group> Pipeline::round(const std::vector<Group>& groups) {
  const auto& commands = batch_.commands();
  moved_ = false;
  waiting_.clear();
  std::vector<Link*> links;
  for (const auto& g : groups)
    if (std::find(links.begin(), links.end(), g.link) == links.end()) links.push_back(g.link);
  try {
    for (Link* l : links) l->ensure(round_trips_);
    for (const auto& g : groups) {
      const bool multi = g.tx && g.cmds.size() > 1;
      if (multi) {
        if (g.asking) g.link->append({"ASKING"}, what_);
        g.link->append({"MULTI"}, what_);
      }
      for (std::size_t i : g.cmds) {
        if (g.asking && !multi) g.link->append({"ASKING"}, what_);
        g.link->append(commands[i], what_);
      }
      if (multi) g.link->append({"EXEC"}, what_);
    }
    for (Link* l : links) l->flush(what_);
    round_trips_ += static_cast<std::int64_t>(links.size());
  } catch (const Error&) {
    reset_();
    throw;
  }
  std::vector<Group> next;
  // Redirected commands, grouped like the first time.
  auto again = [&](const Group& g, std::size_t cmd, Link* target, bool asking) {
    for (auto& n : next)
      if (n.link == target && n.asking == asking && n.tx == g.tx && n.slot == g.slot) {
        n.cmds.push_back(cmd);
        return;
      }
    next.push_back(Group{target, g.tx, asking, g.slot, {cmd}});
  };
  // Where a refused command goes next (a redirection, or the same node again
  // for TRYAGAIN / CLUSTERDOWN); nullopt for any other reply.
  auto destination = [&](const Group& g,
                         const ReplyView& r) -> std::optional<std::pair<Link*, bool>> {
    if (auto to = redirect_of(r, g.link->host())) {
      if (!to->ask) moved_ = true;
      return std::make_pair(&follow_(*to), to->ask);
    }
    if (retryable(r)) {
      if (waiting_.empty()) waiting_ = r.error_text();
      return std::make_pair(g.link, g.asking);
    }
    return std::nullopt;
  };
  try {
    for (const auto& g : groups) {
      const std::string& node = g.link->address();
      if (!(g.tx && g.cmds.size() > 1)) {
        for (std::size_t i : g.cmds) {
          if (g.asking) g.link->read(what_);  // ASKING's OK
          Reply r = g.link->read(what_);
          if (r.is_error()) {  // tested first: most replies are not
            if (auto to = destination(g, r)) {
              again(g, i, to->first, to->second);
              continue;
            }
            errors_.push_back("Redis server " + node + ": " + what_ + ": " +
                              std::string(r.error_text()));
          }
          replies_[i] = std::move(r);
        }
        continue;
      }
      if (g.asking) g.link->read(what_);
      Reply multi = g.link->read(what_);
      std::vector<Reply> queued;
      for (std::size_t k = 0; k < g.cmds.size(); ++k) queued.push_back(g.link->read(what_));
      Reply exec = g.link->read(what_);
      // A redirected command aborts the transaction: re-send it whole.
      std::optional<std::pair<Link*, bool>> to;
      for (std::size_t k = 0; k < queued.size() && !to; ++k) to = destination(g, queued[k]);
      if (to) {
        for (std::size_t i : g.cmds) again(g, i, to->first, to->second);
        continue;
      }
      std::string queue_error;
      if (multi.is_error()) queue_error = multi.error_text();
      for (const auto& q : queued)
        if (queue_error.empty() && q.is_error()) queue_error = q.error_text();
      if (!queue_error.empty()) {
        errors_.push_back("Redis server " + node + ": " + what_ + ": " + queue_error +
                          " (transaction not executed: nothing written)");
        continue;
      }
      if (!exec.is_array() || exec.array(what_).size() != g.cmds.size()) {
        errors_.push_back("Redis server " + node + ": " + what_ + ": transaction failed: " +
                          (exec.is_error() ? std::string(exec.error_text()) : "no reply"));
        continue;
      }
      std::vector<Reply> results = exec.take_elements(what_);
      for (std::size_t k = 0; k < results.size(); ++k) {
        Reply& r = results[k];
        if (r.is_error())
          errors_.push_back("Redis server " + node + ": " + what_ + ": " +
                            std::string(r.error_text()));
        replies_[g.cmds[k]] = std::move(r);
      }
    }
  } catch (const Error&) {
    reset_();
    throw;
  }
  return next;
}

void Pipeline::run(std::vector<Group> groups, const std::function<void()>& after_moved,
                   double patience, const std::string& where) {
  // Redirections are followed at once (16 in a row at most); commands the
  // server cannot serve yet are re-sent with a growing pause, until the
  // patience runs out.
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(1000 * patience));
  int redirects = 0, waits = 0;
  std::string waiting;
  while (!groups.empty()) {
    if (!waiting.empty()) {
      if (std::chrono::steady_clock::now() > deadline)
        throw ConnectionError("Redis " + where + ": " + what_ + ": not ready: " + waiting);
      std::this_thread::sleep_for(
          std::chrono::milliseconds(std::min(100, 5 << std::min(waits, 5))));
      ++waits;
    } else if (redirects++ > 16) {
      throw StorageError("Redis " + where + ": " + what_ +
                         ": still redirected after 16 rounds (the cluster keeps moving slots)");
    }
    groups = round(groups);
    if (moved_) after_moved();  // the map changed: learn all of it
    waiting = waiting_;
  }
}

}  // namespace tensordict::detail::redis
