// The consumer's own storage component, "consumer": an in-memory tensordict
// pre-allocated by allocate_schema, every leaf filled with 7 and marked with
// "made_by" = "consumer_storage". main.cpp does not reference this file.
#include <tensordict/schema.h>
#include <tensordict/tensor_dict.h>

namespace {

tensordict::TensorDictBase make_consumer_storage(const tensordict::Schema& schema,
                                                 const std::vector<int64_t>& batch_size,
                                                 const tensordict::StorageOptions& options) {
  tensordict::check_storage_options(options, "consumer", {});
  tensordict::TensorDict root(batch_size);
  tensordict::allocate_schema(root, schema);
  for (const auto& [key, spec] : schema.entries()) root.get(key).fill_(7);
  root.set_non_tensor("made_by", "consumer_storage");
  return root;
}

}  // namespace

TENSORDICT_REGISTER_STORAGE("consumer", make_consumer_storage);
