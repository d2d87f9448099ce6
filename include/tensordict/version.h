#pragma once
/// @file version.h
/// Library version.

#define TENSORDICT_VERSION_MAJOR 0
#define TENSORDICT_VERSION_MINOR 1
#define TENSORDICT_VERSION_PATCH 0
#define TENSORDICT_VERSION_STRING "0.1.0"

namespace tensordict {
/// "major.minor.patch" of the library this program was compiled against.
inline constexpr const char* version() noexcept { return TENSORDICT_VERSION_STRING; }
}  // namespace tensordict
