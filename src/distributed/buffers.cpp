// Message buffers kept between one-buffer transfers (buffers.h).

#include "distributed/buffers.h"

#include <tensordict/distributed.h>

namespace tensordict::detail::distributed {

BufferPool& pool() {
  static BufferPool* p = new BufferPool();  // never destroyed: isend threads may outlive main
  return *p;
}

}  // namespace tensordict::detail::distributed

namespace tensordict {

void release_transfer_buffers() { detail::distributed::pool().clear(); }

int64_t transfer_buffer_bytes() { return detail::distributed::pool().bytes(); }

}  // namespace tensordict
