#pragma once
/// @file fwd.h
/// Forward declarations only. Rule: this header includes nothing else.

namespace tensordict {
class Error;
class NestedKey;
class NonTensorData;
class NonTensorStack;
class Value;
class Node;
class TensorDictBase;
class TensorDict;
}  // namespace tensordict
