// tools/kvtile-eval/src/host_codec_d256.cpp: the host codecs of head_dim 256
// (src/host_codec.hpp; one translation unit per head_dim).
#include "host_codec.hpp"

namespace kvtile_eval {
namespace detail {

KVTILE_EVAL_HOST_CODEC_D(256) { return quantize_layer_method_d<256>(m, p, run, ds, l, memo, threads, b, err, records, out); }

}  // namespace detail
}  // namespace kvtile_eval
