// Precompiled header of the tests: the heavy LibTorch and googletest headers.
#pragma once
#include <gtest/gtest.h>
#include <tensordict/tensordict.h>
#include <torch/torch.h>
