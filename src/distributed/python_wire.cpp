// Wire::Python: Python tensordict's own point-to-point protocol
// (docs/distributed.md, "Python's wire"), so that a C++ rank and a Python rank
// exchange tensordicts with send / recv / isend / irecv.
//
// Python sends no structure: each tensor leaf is one message, in its key
// order (every level's keys sorted as strings, a nested tensordict's leaves
// where its key sorts, a lazy stack member by member, non-tensor values
// skipped), on the tags init_tag, init_tag + 1, ... (or a pseudo-random chain
// seeded by init_tag); consolidated, the whole storage is one message on tag 0.
//
// Gloo aborts the process when a message is larger than the receive it lands
// in, and fills a larger receive silently. So every receive here lands in a
// guarded buffer (GuardedReceive): a private anonymous mapping reserved far
// beyond the leaf, never touched before the receive, placed so that the
// leaf's last byte is the first byte of a page. Afterwards the pages the
// kernel wrote tell the size apart: the last byte's page untouched means a
// shorter message; the next page touched, or a non-zero byte after the leaf
// on the last byte's page, means a longer one. The data is then copied into
// the tensordict, only once every leaf has arrived with its size.

#include "distributed/channel.h"
#include "distributed/layout.h"
#include "distributed/point_to_point.h"

#include <tensordict/distributed.h>
#include <tensordict/dtype.h>
#include <tensordict/errors.h>
#include <tensordict/lazy_stack.h>

#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tensordict::detail::distributed {

// ---- Python's pseudo-random tags ------------------------------------------------
// tensordict.utils._int_generator(seed): numpy.random.default_rng(seed) (a
// SeedSequence hashing the seed into a PCG64 state), 8 bytes of
// Generator.bytes() read as a big-endian integer, modulo 10000.

namespace {

constexpr uint32_t kInitA = 0x43b0d7e5, kMultA = 0x931e8875;
constexpr uint32_t kInitB = 0x8b51f9dd, kMultB = 0x58f38ded;
constexpr uint32_t kMixMultL = 0xca01f9dd, kMixMultR = 0x4973f715;

uint32_t hashmix(uint32_t value, uint32_t& hash_const) {
  value ^= hash_const;
  hash_const *= kMultA;
  value *= hash_const;
  return value ^ (value >> 16);
}

uint32_t mix(uint32_t x, uint32_t y) {
  uint32_t r = kMixMultL * x - kMixMultR * y;
  return r ^ (r >> 16);
}

using u128 = unsigned __int128;

u128 pcg_multiplier() {
  return (u128{2549297995355413924ULL} << 64) + u128{4865540595714422341ULL};
}

}  // namespace

int64_t python_int_generator(uint64_t seed) {
  // SeedSequence(seed): the seed's 32-bit words, least significant first.
  std::vector<uint32_t> entropy;
  do {
    entropy.push_back(static_cast<uint32_t>(seed));
    seed >>= 32;
  } while (seed != 0);
  uint32_t pool[4];
  uint32_t hc = kInitA;
  for (std::size_t i = 0; i < 4; ++i) pool[i] = hashmix(i < entropy.size() ? entropy[i] : 0, hc);
  for (std::size_t src = 0; src < 4; ++src)
    for (std::size_t dst = 0; dst < 4; ++dst)
      if (src != dst) pool[dst] = mix(pool[dst], hashmix(pool[src], hc));
  for (std::size_t src = 4; src < entropy.size(); ++src)
    for (std::size_t dst = 0; dst < 4; ++dst) pool[dst] = mix(pool[dst], hashmix(entropy[src], hc));
  // generate_state(4, uint64): 8 words, paired little-endian.
  uint32_t words[8];
  uint32_t hb = kInitB;
  for (int i = 0; i < 8; ++i) {
    uint32_t v = pool[i % 4] ^ hb;
    hb *= kMultB;
    v *= hb;
    words[i] = v ^ (v >> 16);
  }
  uint64_t s[4];
  for (std::size_t k = 0; k < 4; ++k) s[k] = words[2 * k] | (uint64_t{words[2 * k + 1]} << 32);
  // PCG64 (XSL-RR 128/64) seeded with state s[0]:s[1], stream s[2]:s[3].
  const u128 mult = pcg_multiplier();
  const u128 inc = (((u128{s[2]} << 64) | s[3]) << 1) | 1;
  u128 state = 0;
  state = state * mult + inc;
  state += (u128{s[0]} << 64) | s[1];
  state = state * mult + inc;
  state = state * mult + inc;  // the first output
  const uint64_t xored = static_cast<uint64_t>(state >> 64) ^ static_cast<uint64_t>(state);
  const unsigned rot = static_cast<unsigned>(state >> 122);
  const uint64_t out = (xored >> rot) | (xored << ((64 - rot) & 63));
  // bytes(8): two uint32 draws (the low half first), little-endian; read big-endian.
  return static_cast<int64_t>(__builtin_bswap64(out) % 10000);
}

namespace {

// ---- the leaves in Python's order ---------------------------------------------------

struct PyLeaf {
  TensorDictBase level;   // the tensordict holding the leaf
  std::string key;        // its key there
  NestedKey path;         // from the root (a lazy stack's members share theirs)
  std::string name;       // for messages: "a.b", "stack[1].x"
  at::Tensor tensor;      // the current value
  bool in_place = false;  // `tensor` is the leaf's own memory (written with memcpy)
  int64_t nbytes = 0;
};

void walk(const TensorDictBase& level, const NestedKey& path, const std::string& name,
          std::vector<PyLeaf>& out) {
  const Node& node = level.node();
  if (node.is_lazy_stack()) {
    const auto& members = static_cast<const LazyStackNode&>(node).members();
    for (std::size_t i = 0; i < members.size(); ++i)
      walk(members[i], path, name + "[" + std::to_string(i) + "]", out);
    return;
  }
  std::vector<std::string> keys = node.keys();
  std::sort(keys.begin(), keys.end());  // Python's sorted(): code points, as UTF-8 bytes
  for (const std::string& k : keys) {
    std::optional<Value> held;
    const Value* v = node.holds_values() ? node.peek(k) : nullptr;
    if (v == nullptr) {
      held = node.find(k);
      if (!held) continue;
      v = &*held;
    }
    const NestedKey child = path.empty() ? NestedKey(k) : path.child(k);
    const std::string child_name = name.empty() ? k : name + "." + k;
    if (v->is_tensor()) {
      const at::Tensor& t = v->tensor();
      PyLeaf leaf{level, k, child, child_name, t};
      leaf.in_place =
          node.is_memory_node() && node.holds_values() && t.device().is_cpu() && t.is_contiguous();
      leaf.nbytes = static_cast<int64_t>(t.numel()) * static_cast<int64_t>(t.element_size());
      out.push_back(std::move(leaf));
    } else if (v->is_tensordict()) {
      walk(v->tensordict(), child, child_name, out);
    }
    // Non-tensor values: Python sends nothing for them.
  }
}

std::vector<PyLeaf> python_leaves(const TensorDictBase& td) {
  if (!td.defined()) throw ValueError("distributed transfer of a null tensordict handle");
  std::vector<PyLeaf> out;
  walk(td, NestedKey(), std::string(), out);
  return out;
}

// Before any receive: a leaf whose elements share memory (expanded) cannot
// receive in place.
void check_receivable(const std::string& what, const std::vector<PyLeaf>& leaves) {
  for (const PyLeaf& leaf : leaves)
    if (at::has_internal_overlap(leaf.tensor) == at::MemOverlap::Yes)
      throw ValueError(what + ": the leaf '" + leaf.name + "' (shape " +
                       shape_string(leaf.tensor.sizes()) + ", strides " +
                       shape_string(leaf.tensor.strides()) +
                       ") is expanded: its elements share memory, so it cannot receive in "
                       "place; make it contiguous first (nothing was written)");
}

std::string describe_leaf(const PyLeaf& leaf) {
  return "'" + leaf.name + "' (Tensor(dtype=" + dtype_to_string(leaf.tensor.scalar_type()) +
         ", shape=" + shape_string(leaf.tensor.sizes()) + "), " + std::to_string(leaf.nbytes) +
         " bytes)";
}

}  // namespace

void check_python_tag(const TransferOptions& options, const char* op) {
  if (options.tag < 0)
    throw ValueError(std::string(op) + ": Wire::Python needs a tag (Python's init_tag) >= 0, not " +
                     std::to_string(options.tag));
}

namespace {

// The tags of `n` leaves: Python's _tag starts at init_tag - 1 and moves
// before each leaf.
std::vector<int> leaf_tags(const TransferOptions& options, std::size_t n, const std::string& what) {
  std::vector<int> tags;
  tags.reserve(n);
  int64_t tag = int64_t{options.tag} - 1;
  for (std::size_t i = 0; i < n; ++i) {
    tag = options.pseudo_rand ? python_int_generator(static_cast<uint64_t>(tag + 1)) : tag + 1;
    if (tag > INT_MAX)
      throw ValueError(what + ": the tags of " + std::to_string(n) + " leaves from " +
                       std::to_string(options.tag) + " go beyond the largest c10d tag");
    tags.push_back(static_cast<int>(tag));
  }
  return tags;
}

// ---- the guarded receive ---------------------------------------------------------------

enum class Fit { Exact, Shorter, Longer };

// A receive of a message expected to be `expected` bytes long, which any
// message up to `reserve` bytes longer lands in without harm (see the top of
// this file). The mapping goes with the last tensor that uses it (the group's
// Work holds one until the receive is done).
class GuardedReceive {
 public:
  GuardedReceive(int64_t expected, int64_t reserve, const std::string& what) : expected_(expected) {
    page_ = static_cast<int64_t>(::sysconf(_SC_PAGESIZE));
    const int64_t head = expected >= 1 ? (expected - 1 + page_ - 1) / page_ * page_ : 0;
    reserve = std::max(page_, reserve / page_ * page_);
    void* base = MAP_FAILED;
    int64_t total = 0;
    for (;;) {
      total = head + page_ + reserve;
      base = ::mmap(nullptr, static_cast<std::size_t>(total), PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (base != MAP_FAILED || reserve <= page_) break;
      reserve = std::max(page_, reserve / 2 / page_ * page_);
    }
    if (base == MAP_FAILED)
      throw StorageError(what + ": cannot map " + std::to_string(total) +
                         " bytes of address space for a receive");
    // Pages one by one: a huge page would mark its neighbours touched.
    ::madvise(base, static_cast<std::size_t>(total), MADV_NOHUGEPAGE);
    auto* b = static_cast<uint8_t*>(base);
    last_page_ = b + head;
    start_ = expected >= 1 ? last_page_ - (expected - 1) : last_page_;
    const int64_t len = (b + total) - start_;
    const std::size_t map_bytes = static_cast<std::size_t>(total);
    tensor_ = at::from_blob(
        start_, {len}, [base, map_bytes](void*) { ::munmap(base, map_bytes); },
        at::TensorOptions().dtype(at::kByte));
  }

  const at::Tensor& target() const { return tensor_; }
  const uint8_t* data() const { return start_; }

  // How the message received compares with `expected` (once its receive is done).
  Fit fit() const {
    unsigned char touched[2] = {0, 0};
    if (::mincore(last_page_, static_cast<std::size_t>(2 * page_), touched) != 0)
      return Fit::Exact;  // unknown: not reachable with a mapping of ours
    const bool last = touched[0] & 1, next = touched[1] & 1;
    if (expected_ == 0) return last || next ? Fit::Longer : Fit::Exact;
    if (!last) return Fit::Shorter;
    if (next) return Fit::Longer;
    // The rest of the last byte's page was zero before; a longer message
    // wrote its next bytes there.
    for (const uint8_t* p = start_ + expected_; p < last_page_ + page_; ++p)
      if (*p != 0) return Fit::Longer;
    return Fit::Exact;
  }

 private:
  int64_t expected_;
  int64_t page_ = 4096;
  uint8_t* last_page_ = nullptr;
  uint8_t* start_ = nullptr;
  at::Tensor tensor_;
};

// Address space reserved after each of `count` receives of one transfer: at
// most 256 GiB, and 16 TiB for the whole transfer (x86-64 processes have 128
// TiB), at least 1 MiB.
int64_t reserve_for(std::size_t count) {
  constexpr int64_t kMax = int64_t{1} << 38, kBudget = int64_t{1} << 44, kMin = int64_t{1} << 20;
  return std::clamp(kBudget / static_cast<int64_t>(std::max<std::size_t>(count, 1)), kMin, kMax);
}

const char* fit_word(Fit fit) { return fit == Fit::Shorter ? "shorter" : "longer"; }

// Writes `bytes` (the leaf's size) into the leaf.
void write_leaf(const PyLeaf& leaf, const uint8_t* bytes) {
  if (leaf.nbytes == 0) return;
  if (leaf.in_place) {
    std::memcpy(leaf.tensor.data_ptr(), bytes, static_cast<std::size_t>(leaf.nbytes));
    return;
  }
  at::Tensor t =
      at::empty(leaf.tensor.sizes(), at::TensorOptions().dtype(leaf.tensor.scalar_type()));
  std::memcpy(t.data_ptr(), bytes, static_cast<std::size_t>(leaf.nbytes));
  TensorDictBase level = leaf.level;
  level.set_(NestedKey(leaf.key), t);
}

// Python's consolidated=True: `td`'s consolidated storage as one message on tag 0.
void recv_consolidated(Channel& ch, const TensorDictBase& td, int src) {
  check_receivable(ch.what(), python_leaves(td));
  const TensorDictBase c = td.is_consolidated() ? td : td.consolidate();
  at::Tensor storage = c.consolidated_storage();
  const int64_t n = storage.defined() ? storage.numel() : 0;
  GuardedReceive guard(n, reserve_for(1), ch.what());
  ch.wait(ch.recv_on(0, guard.target(), src));
  const Fit fit = guard.fit();
  if (fit != Fit::Exact)
    throw StructureError(ch.what() + ": the consolidated storage received is " + fit_word(fit) +
                             " than this tensordict's (" + std::to_string(n) +
                             " bytes): the structures differ; nothing was written",
                         NestedKey());
  if (n == 0) return;
  if (c.is_same(td)) {
    std::memcpy(storage.data_ptr(), guard.data(), static_cast<std::size_t>(n));
    return;
  }
  // A consolidated copy gave the layout: write its leaves into `td`'s.
  const std::vector<PyLeaf> mine = python_leaves(td), laid = python_leaves(c);
  for (std::size_t i = 0; i < mine.size() && i < laid.size(); ++i) {
    const auto offset = static_cast<const uint8_t*>(laid[i].tensor.data_ptr()) -
                        static_cast<const uint8_t*>(storage.data_ptr());
    write_leaf(mine[i], guard.data() + offset);
  }
}

}  // namespace

void send_python(const TensorDictBase& td, c10d::ProcessGroup& pg, int dst,
                 const TransferOptions& options) {
  check_peer(pg, dst, "send", "destination");
  check_python_tag(options, "send");
  Channel ch(pg, options, "send to rank " + std::to_string(dst) + " (Python's wire)");
  if (options.mode == TransferMode::Consolidated) {
    const TensorDictBase c = td.is_consolidated() ? td : td.consolidate();
    at::Tensor storage = c.consolidated_storage();
    if (!storage.defined()) storage = at::empty({0}, at::kByte);
    ch.wait(ch.send_on(0, storage.contiguous(), dst));
    return;
  }
  const std::vector<PyLeaf> leaves = python_leaves(td);
  const std::vector<int> tags = leaf_tags(options, leaves.size(), ch.what());
  std::vector<at::Tensor> keep;  // the messages' memory until they are sent
  keep.reserve(leaves.size());
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  for (std::size_t i = 0; i < leaves.size(); ++i) {
    keep.push_back(contiguous_cpu(leaves[i].tensor));
    works.push_back(ch.send_on(tags[i], bytes_of(keep.back()), dst));
  }
  ch.wait_all(works);
}

void recv_python(const TensorDictBase& td, c10d::ProcessGroup& pg, int src,
                 const TransferOptions& options) {
  check_peer(pg, src, "recv", "source");
  check_python_tag(options, "recv");
  Channel ch(pg, options, "recv from rank " + std::to_string(src) + " (Python's wire)");
  if (options.mode == TransferMode::Consolidated) {
    recv_consolidated(ch, td, src);
    return;
  }
  const std::vector<PyLeaf> leaves = python_leaves(td);
  check_receivable(ch.what(), leaves);
  const std::vector<int> tags = leaf_tags(options, leaves.size(), ch.what());
  const int64_t reserve = reserve_for(leaves.size());
  std::vector<GuardedReceive> guards;
  guards.reserve(leaves.size());
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  for (std::size_t i = 0; i < leaves.size(); ++i) {
    guards.emplace_back(leaves[i].nbytes, reserve, ch.what());
    works.push_back(ch.recv_on(tags[i], guards.back().target(), src));
  }
  // Every receive completes (or the wait times out) before anything is
  // judged: a receive left posted would take a later transfer's message. The
  // last first, so that a peer that dies is noticed at once.
  ch.wait_all_last_first(works);
  for (std::size_t i = 0; i < leaves.size(); ++i) {
    const Fit fit = guards[i].fit();
    if (fit != Fit::Exact)
      throw StructureError(ch.what() + ": the message on tag " + std::to_string(tags[i]) +
                               " for the leaf " + describe_leaf(leaves[i]) + " is " +
                               fit_word(fit) +
                               " than the leaf: the structures differ; nothing was written",
                           leaves[i].path);
  }
  for (std::size_t i = 0; i < leaves.size(); ++i) write_leaf(leaves[i], guards[i].data());
}

}  // namespace tensordict::detail::distributed
