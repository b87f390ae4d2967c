// kvtile/paged/paged_record.hpp: what a record of the paged cache is, on the
// host: the paged kernels' flag bits, the codec they encode pages with, and the
// host model of their per-token rotation (device/paged/paged_common.cuh has the
// device side and the contract). Host code (tests, the host codec ops of
// kvtile_ops) builds byte-identical pages from these.
#pragma once

#include <cstdint>

#include "../codec/element.hpp"
#include "../codec/encode_rules.hpp"
#include "../codec/tile_codec.hpp"
#include "../config.hpp"
#include "../numeric/half.hpp"
#include "../rotation/identity.hpp"
#include "../status.hpp"

KVTILE_NAMESPACE_BEGIN
namespace device {

enum paged_flag : std::int32_t {
  paged_flag_non_finite = 1,    // NaN/Inf input replaced by 0
  paged_flag_saturated = 2,     // a rotated value exceeded fp16 range and was saturated to +-65504
  paged_flag_encode_failed = 4, // a tile's encode returned out_of_range (cannot happen with fp16 tails)
  paged_flag_bad_page = 8,      // page_table entry outside [0, num_pages): tile skipped
  paged_flag_bad_length = 16,   // seq_lens / cu_seqlens inconsistent: sequence skipped
};

// The status a paged writer's flags (of one tile, or OR-ed over a batch)
// stand for, the rule every layer reports them by: a saturated rotated value
// (the record is not the input's) is status::out_of_range, as the codec's own
// out-of-range input is, and so is a tile whose encode failed; a replaced
// NaN/Inf is the warning status::non_finite_input; a bad page or length
// (the device writers skipped that tile or sequence) is status::invalid_argument.
constexpr status paged_flags_status(unsigned flags) noexcept {
  if (flags & (paged_flag_bad_page | paged_flag_bad_length)) return status::invalid_argument;
  if (flags & (paged_flag_saturated | paged_flag_encode_failed)) return status::out_of_range;
  if (flags & paged_flag_non_finite) return status::non_finite_input;
  return status::success;
}

// Codec used for paged records: same config, normalizer, rounding and packing,
// identity rotation (the input is already rotated).
template <class Codec>
using paged_record_codec = tile_codec<typename Codec::config, identity, typename Codec::normalizer,
                                      typename Codec::rounding, typename Codec::packer>;

// The paged writers' rule for one token, sanitize -> rotate -> saturate, one
// function per element step; the host model below and the device writers
// (device/paged/paged_common.cuh) call these.
// Before the rotation: NaN/Inf become 0 (paged_flag_non_finite).
KVTILE_HOST_DEVICE float paged_sanitize(float x, unsigned& flags) {
  bool replaced = false;
  x = ::kvtile::detail::replace_non_finite(x, replaced);
  if (replaced) flags |= paged_flag_non_finite;
  return x;
}
// After the rotation, to fp16: a NaN (only from a bf16 token whose rotation
// overflowed fp32) becomes 0 and |x| > 65504 saturates to +-65504, both
// paged_flag_saturated.
KVTILE_HOST_DEVICE half_t paged_saturate_to_half(float x, unsigned& flags) {
  if (::kvtile::detail::is_nan(x)) {
    flags |= paged_flag_saturated;
    x = 0.0f;
  } else if (!((x < 0 ? -x : x) <= half_t::max_finite)) {
    flags |= paged_flag_saturated;
  }
  return ::kvtile::detail::element_from_float<half_t>(x);
}

// Host reference of rotate_to_half for one token (the tests' cache model).
template <class Rotation, int D, class T>
inline unsigned host_rotate_to_half(const T* src, half_t* dst) {
  float v[D];
  unsigned f = 0;
  for (int d = 0; d < D; ++d) v[d] = paged_sanitize(::kvtile::detail::element_to_float(src[d]), f);
  Rotation::template forward<D>(v);
  for (int d = 0; d < D; ++d) dst[d] = paged_saturate_to_half(v[d], f);
  return f;
}

}  // namespace device
KVTILE_NAMESPACE_END
