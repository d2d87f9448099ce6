// Storage errors leaving the core: the operation and the full key path added.
#include "core/internal.h"

#include <fmt/format.h>

#include <exception>

namespace tensordict::detail {

void rethrow_storage_error(const NestedKey& path, const char* operation) {
  const std::string where = path.empty() ? std::string("the root") : path.repr();
  auto annotated = [&](const StorageError& e) {
    return fmt::format("{} {}: {}", operation, where, e.what());
  };
  try {
    throw;
  } catch (const StorageError& e) {
    if (!e.key_path().empty()) throw;  // an inner level already named it
    if (dynamic_cast<const TimeoutError*>(&e))
      std::throw_with_nested(TimeoutError(annotated(e), where));
    if (dynamic_cast<const ConflictError*>(&e))
      std::throw_with_nested(ConflictError(annotated(e), where));
    if (dynamic_cast<const ConnectionError*>(&e))
      std::throw_with_nested(ConnectionError(annotated(e), where));
    std::throw_with_nested(StorageError(annotated(e), where));
  }
}

}  // namespace tensordict::detail
