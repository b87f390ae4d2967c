// kvtile/version.hpp: library and record-format versions.
#pragma once

#include "config.hpp"

#define KVTILE_VERSION_MAJOR 0
#define KVTILE_VERSION_MINOR 2
#define KVTILE_VERSION_PATCH 0
#define KVTILE_VERSION (KVTILE_VERSION_MAJOR * 10000 + KVTILE_VERSION_MINOR * 100 + KVTILE_VERSION_PATCH)

// Version of the record layouts described in docs/format.md. Bumped whenever a
// byte of any record changes meaning.
#define KVTILE_FORMAT_VERSION 1

KVTILE_NAMESPACE_BEGIN
inline constexpr int version_major = KVTILE_VERSION_MAJOR;
inline constexpr int version_minor = KVTILE_VERSION_MINOR;
inline constexpr int version_patch = KVTILE_VERSION_PATCH;
inline constexpr int format_version = KVTILE_FORMAT_VERSION;
KVTILE_NAMESPACE_END
