#pragma once
/// @file tensordict.h
/// Umbrella header of the core library (in-memory tensordicts, lazy stacks,
/// memmap and shared memory, from_schema, the typed wrappers: everything that
/// needs only LibTorch). HDF5 and Redis storages have their own
/// headers under tensordict/storage/.

#include <tensordict/dtype.h>
#include <tensordict/errors.h>
#include <tensordict/lazy_stack.h>
#include <tensordict/nested_key.h>
#include <tensordict/node.h>
#include <tensordict/non_tensor.h>
#include <tensordict/row_selection.h>
#include <tensordict/schema.h>
#include <tensordict/stack.h>
#include <tensordict/state_dict.h>
#include <tensordict/storage/memmap.h>
#include <tensordict/storage/memory.h>
#include <tensordict/storage/shared.h>
#include <tensordict/tensor_class.h>
#include <tensordict/tensor_dict.h>
#include <tensordict/tensor_dict_base.h>
#include <tensordict/typed_fields.h>
#include <tensordict/typed_tensor_dict.h>
#include <tensordict/version.h>
