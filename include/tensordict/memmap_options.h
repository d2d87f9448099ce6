#pragma once
/// @file memmap_options.h
/// Kept for code written before the storage headers moved: see
/// tensordict/storage/memmap_options.h.
#include <tensordict/storage/memmap_options.h>
