// The listening receive (listening.h).

#include "distributed/listening.h"

#include <torch/version.h>

#include <map>
#include <mutex>
#include <tuple>

namespace tensordict::detail::distributed {

namespace {

struct Listening {
  c10::weak_intrusive_ptr<c10d::ProcessGroup> group;  // the entry goes with the group
#if TORCH_VERSION_MAJOR >= 2
  // LibTorch 2.x frees a group's backends with its last strong reference
  // (ProcessGroup::release_resources), where 1.13's weak reference kept the
  // Gloo group itself alive: the backend that posted `work` stays until the
  // entry goes, `work` first (members go in reverse order).
  c10::intrusive_ptr<c10d::Backend> backend;
#endif
  c10::intrusive_ptr<c10d::Work> work;
  at::Tensor buffer;  // kListenBytes
};

// The listening receives of this process, by (group, peer, tag). A receive
// posted in a group that lives must stay posted (Gloo stalls the connection
// when a message arrives for a receive whose buffer is gone), so an entry
// leaves only when a transfer takes it or once its group is destroyed. Its
// weak reference keeps the group's memory, so no group made later has the
// address of a destroyed one while its entry is here.
class Listeners {
 public:
  std::optional<Listening> take(const c10d::ProcessGroup& pg, int peer, int tag) {
    std::lock_guard<std::mutex> lock(mutex_);
    drop_expired_locked();
    auto it = posted_.find({&pg, peer, tag});
    if (it == posted_.end()) return std::nullopt;
    Listening out = std::move(it->second);
    posted_.erase(it);
    return out;
  }
  void put(const c10d::ProcessGroup& pg, int peer, int tag, Listening listening) {
    std::lock_guard<std::mutex> lock(mutex_);
    drop_expired_locked();
    posted_.insert_or_assign(Key{&pg, peer, tag}, std::move(listening));
  }
  // The receives of destroyed groups go, with the Gloo contexts they hold.
  void drop_expired() {
    std::lock_guard<std::mutex> lock(mutex_);
    drop_expired_locked();
  }

 private:
  using Key = std::tuple<const c10d::ProcessGroup*, int, int>;
  void drop_expired_locked() {
    std::erase_if(posted_, [](const auto& entry) { return entry.second.group.expired(); });
  }
  std::mutex mutex_;
  std::map<Key, Listening> posted_;
};

Listeners* g_listeners = nullptr;  // never destroyed: live groups keep their receives

Listeners& listeners() {
  static Listeners* l = g_listeners = new Listeners();
  return *l;
}

// At exit, the receives of groups destroyed already go before the libraries
// they use, so that their Gloo threads end.
struct DropListenersAtExit {
  ~DropListenersAtExit() {
    if (g_listeners) g_listeners->drop_expired();
  }
} drop_listeners_at_exit;

// A weak reference to `pg` when an intrusive_ptr owns it (as c10d's groups are
// made); a group that none owns (on the stack) gets no listening receive.
std::optional<c10::weak_intrusive_ptr<c10d::ProcessGroup>> weak_ref(c10d::ProcessGroup& pg) {
  if (c10::raw::intrusive_ptr::use_count(&pg) == 0) return std::nullopt;
  return c10::weak_intrusive_ptr<c10d::ProcessGroup>(
      c10::intrusive_ptr<c10d::ProcessGroup>::unsafe_reclaim_from_nonowning(&pg));
}

}  // namespace

void listen(Channel& ch, int peer, at::Tensor buffer) {
  auto group = weak_ref(ch.pg());
  if (!group) return;
  if (!buffer.defined() || buffer.numel() != kListenBytes) buffer = guarded_bytes(kListenBytes);
#if TORCH_VERSION_MAJOR >= 2
  c10::intrusive_ptr<c10d::Backend> backend;
  try {
    backend = ch.pg().getBackend(buffer.device().type());
  } catch (const c10::Error&) {
    return;  // no backend for the buffer's device: no listening receive
  }
#endif
  auto work = ch.recv(buffer, peer);
  listeners().put(
      ch.pg(), peer, ch.options().tag, Listening {
        std::move(*group),
#if TORCH_VERSION_MAJOR >= 2
            std::move(backend),
#endif
            std::move(work), std::move(buffer)
      });
}

FirstReceive::FirstReceive(Channel& ch, int peer, int64_t nbytes, bool pooled) {
  if (auto l = listeners().take(ch.pg(), peer, ch.options().tag)) {
    listened_ = std::move(l->buffer);
    work_ = std::move(l->work);
    return;
  }
  posted_.emplace(nbytes, pooled);
  work_ = ch.recv(posted_->tensor(), peer);
}

}  // namespace tensordict::detail::distributed
