#pragma once
/// @file memmap.h
/// Kept for code written before the storage headers moved: the memory-mapped
/// and shared-memory storages are now tensordict/storage/memmap.h and
/// tensordict/storage/shared.h.
#include <tensordict/storage/memmap.h>
#include <tensordict/storage/shared.h>
