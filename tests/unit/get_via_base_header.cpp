// Calls get() from a translation unit that includes tensor_dict_base.h only,
// not tensor_dict.h, where get()'s in-memory fast path is defined: the call
// must link to the copy the library instantiates (see test_access.cpp).
// Built without the tests' precompiled header, which includes everything.
#include <tensordict/tensor_dict_base.h>

#include <string_view>

at::Tensor get_via_base_header(const tensordict::TensorDictBase& t, std::string_view key) {
  return t.get({key});
}

at::Tensor get_via_base_header(const tensordict::TensorDictBase& t, std::string_view a,
                               std::string_view b) {
  return t.get(tensordict::NestedKey{a, b});
}
