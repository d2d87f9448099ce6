// Message buffers kept between one-buffer transfers (buffers.h).

#include "distributed/buffers.h"

#include <tensordict/distributed.h>
#include <tensordict/errors.h>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <string>

namespace tensordict::detail::distributed {

namespace {

int64_t page_size() {
  static const auto page = static_cast<int64_t>(::sysconf(_SC_PAGESIZE));
  return page;
}

int64_t round_up(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

}  // namespace

at::Tensor guarded_bytes(int64_t nbytes) {
  const int64_t page = page_size();
  const int64_t head = round_up(nbytes, page);
  int64_t reserve = kReceiveReserve;
  void* base = MAP_FAILED;
  int64_t total = 0;
  for (;;) {  // less address space where the system gives less
    total = head + reserve;
    base = ::mmap(nullptr, static_cast<std::size_t>(total), PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base != MAP_FAILED || reserve <= page) break;
    reserve = std::max(page, reserve / 2);
  }
  if (base == MAP_FAILED)
    throw StorageError("cannot map " + std::to_string(total) + " bytes for a message buffer of " +
                       std::to_string(nbytes));
  // No huge page where the buffer ends: one would make the pages behind it
  // resident too.
  constexpr int64_t kHuge = int64_t{2} << 20;
  auto* b = static_cast<uint8_t*>(base);
  // (Offsets from `b`, not an address cast back to a pointer.)
  const auto past_boundary = static_cast<int64_t>(reinterpret_cast<uintptr_t>(b + nbytes) % kHuge);
  uint8_t* from = b + std::max<int64_t>(0, nbytes - past_boundary);
  const int64_t span = std::min<int64_t>(2 * kHuge, (b + total) - from);
  ::madvise(from, static_cast<std::size_t>(span), MADV_NOHUGEPAGE);
  const auto map_bytes = static_cast<std::size_t>(total);
  at::Tensor full = at::from_blob(
      base, {total}, [base, map_bytes](void*) { ::munmap(base, map_bytes); },
      at::TensorOptions().dtype(at::kByte));
  return full.narrow(0, 0, nbytes);
}

at::Tensor receivable(const at::Tensor& t) {
  const auto storage_bytes = static_cast<int64_t>(t.storage().nbytes());
  const int64_t offset = t.storage_offset();
  if (storage_bytes - offset <= t.numel()) return t;
  return at::empty({0}, at::kByte).set_(t.storage(), offset, {storage_bytes - offset}, {1});
}

bool overran(const at::Tensor& t) {
  if (!t.defined()) return false;
  const auto* storage_start = static_cast<const uint8_t*>(t.storage().data());
  const uint8_t* storage_end = storage_start + t.storage().nbytes();
  const uint8_t* end = static_cast<const uint8_t*>(t.data_ptr()) + t.numel();
  if (end >= storage_end) return false;  // not guarded: nothing behind it
  // The rest of the buffer's last page was zero and is never written but by
  // a longer message; the next page is not resident unless one wrote it.
  const int64_t page = page_size();
  const auto past_page = static_cast<int64_t>(reinterpret_cast<uintptr_t>(end) % page);
  const uint8_t* page_end = end + (past_page == 0 ? 0 : page - past_page);
  for (const uint8_t* p = end; p < page_end && p < storage_end; ++p)
    if (*p != 0) return true;
  if (page_end >= storage_end) return false;
  unsigned char resident = 0;
  if (::mincore(const_cast<uint8_t*>(page_end), static_cast<std::size_t>(page), &resident) != 0)
    return false;
  return (resident & 1) != 0;
}

BufferPool& pool() {
  static BufferPool* p = new BufferPool();  // never destroyed: isend threads may outlive main
  return *p;
}

}  // namespace tensordict::detail::distributed

namespace tensordict {

void release_transfer_buffers() { detail::distributed::pool().clear(); }

int64_t transfer_buffer_bytes() { return detail::distributed::pool().bytes(); }

}  // namespace tensordict
