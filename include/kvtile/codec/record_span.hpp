// kvtile/codec/record_span.hpp: a record buffer with its length.
//
// A record carries no length of its own: decoding a buffer shorter than the
// codec's record_bytes through the pointer API reads past its end. Code that
// receives records from outside (files, sockets, C and Python callers) passes
// a record_span instead; the codec's span overloads (tile_codec::decode,
// decode_keys, decode_values, validate) return status::truncated_record when
// the buffer is short, before reading it.
//
//   status s = Codec::decode(kvtile::record_span{buf.data(), buf.size()}, k, D, v, D);
//   status s = kvtile::check_records(kvtile::record_span{p, bytes}, n, Codec::record_bytes);  // n records
#pragma once

#include <cstddef>
#include <cstdint>

#include "../config.hpp"
#include "../status.hpp"

KVTILE_NAMESPACE_BEGIN

struct record_span {
  const void* data = nullptr;
  std::size_t size = 0;  // bytes readable at data
};

// Whether span holds `count` consecutive records of record_bytes each:
// null_pointer (data null and count > 0), invalid_argument (count < 0, or
// count * record_bytes not representable), truncated_record (too short),
// else success. Bytes past the last record are allowed.
inline status check_records(record_span span, std::int64_t count, std::size_t record_bytes) noexcept {
  if (count < 0) return status::invalid_argument;
  if (count == 0) return status::success;
  if (!span.data) return status::null_pointer;
  const auto n = static_cast<std::uint64_t>(count);
  if (record_bytes != 0 && n > static_cast<std::uint64_t>(SIZE_MAX) / record_bytes) return status::invalid_argument;
  return span.size < n * record_bytes ? status::truncated_record : status::success;
}

KVTILE_NAMESPACE_END
