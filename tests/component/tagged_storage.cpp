// A storage component that exists only for the tests: "tagged", an in-memory
// tensordict built by allocate_schema and marked with the non-tensor entry
// "made_by" = "tagged", so a test can tell it came from this factory. Built
// with tensordict_add_storage_component (tests/CMakeLists.txt) and reached by
// the programs only through from_schema(..., "tagged"): nothing here is
// referenced from their main(). With hiredis (TD_TAGGED_WITH_HIREDIS), it has
// a private C dependency as the Redis storage will have, and also stores the
// bytes of redisFormatCommand("PING") under "hiredis_ping".

#include <tensordict/schema.h>
#include <tensordict/tensor_dict.h>

#ifdef TD_TAGGED_WITH_HIREDIS
#include <hiredis/hiredis.h>
#endif

#include <string>
#include <vector>

namespace {

tensordict::TensorDictBase make_tagged(const tensordict::Schema& schema,
                                       const std::vector<int64_t>& batch_size,
                                       const tensordict::StorageOptions& options) {
  tensordict::check_storage_options(options, "tagged", {"fill"});
  const double fill = tensordict::storage_option<double>(options, "tagged", "fill", 0.0);
  tensordict::TensorDict root(batch_size);
  tensordict::allocate_schema(root, schema);
  if (fill != 0.0)
    for (const auto& [key, spec] : schema.entries()) root.get(key).fill_(fill);
  root.set_non_tensor("made_by", "tagged");
#ifdef TD_TAGGED_WITH_HIREDIS
  char* command = nullptr;
  const int length = redisFormatCommand(&command, "PING");
  if (length < 0) throw tensordict::StorageError("tagged: redisFormatCommand failed");
  root.set_non_tensor("hiredis_ping", std::string(command, static_cast<std::size_t>(length)));
  redisFreeCommand(command);
#endif
  return root;
}

}  // namespace

TENSORDICT_REGISTER_STORAGE("tagged", make_tagged);
