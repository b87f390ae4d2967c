// tools/kvtile-eval/src/host_codec.cpp: quantize_layer_method (layer_codec.hpp)
// calls the translation unit of p's head_dim (src/host_codec_d*.cpp).
#include "host_codec.hpp"

namespace kvtile_eval {
namespace detail {

kvtile::status quantize_layer_method(const method_spec& m, const kvtile::codec_params& p, bool run,
                                     const dataset& ds, int l, sinkhorn_memo* memo, int threads, layer_buffers& b,
                                     std::string& err, std::vector<unsigned char>* records, host_codec_result& out) {
  // As kvtile::dispatch: 64, 128, and any other head_dim to the 256 file, whose
  // dispatch_method then returns the status (unsupported_head_dim, ...) without calling a codec.
  switch (p.head_dim) {
    case 64: return quantize_layer_method_d64(m, p, run, ds, l, memo, threads, b, err, records, out);
    case 128: return quantize_layer_method_d128(m, p, run, ds, l, memo, threads, b, err, records, out);
    default: return quantize_layer_method_d256(m, p, run, ds, l, memo, threads, b, err, records, out);
  }
}

}  // namespace detail
}  // namespace kvtile_eval
