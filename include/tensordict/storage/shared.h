#pragma once
/// @file storage/shared.h
/// Shared memory: TensorDictBase::share_memory_() moves a tensordict's leaves
/// into POSIX shared memory (files under /dev/shm, in the memmap layout);
/// another process attaches to it by name.

#include <tensordict/storage/memmap.h>
#include <tensordict/tensor_dict_base.h>

#include <string>

namespace tensordict {

/// Attaches to a tensordict another process placed in shared memory with
/// share_memory_(): writes through either handle are seen by both processes.
TensorDictBase attach_shared(const std::string& name);
/// Removes the shared-memory files of `name` (the creator's job when done).
/// Processes already attached keep their mappings until they drop them.
void unlink_shared(const std::string& name);

}  // namespace tensordict
