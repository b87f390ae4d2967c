// tools/kvtile-eval/src/device_codec_none.cpp: device_codec.hpp for builds
// without CUDA (KVTILE_EVAL_HAVE_CUDA = 0) and for the tool's tests: the
// stand-in of cuda/device_codec*.cu (one or the other is linked, never both).
#include "../device_codec.hpp"

#if KVTILE_EVAL_HAVE_CUDA
#error "src/device_codec_none.cpp is the build without CUDA (KVTILE_EVAL_HAVE_CUDA=0); CUDA builds compile cuda/*.cu"
#endif

namespace kvtile_eval {

// Built without CUDA: no device, nothing supported (a real fallback: the host
// path runs and `--device cuda` says so).
struct device_codec_session::impl {};
bool device_available(std::string& why) {
  why = "kvtile-eval was built without CUDA";
  return false;
}
bool device_supports(const kvtile::codec_params&) { return false; }
device_codec_session::device_codec_session() = default;
device_codec_session::~device_codec_session() = default;
bool device_codec_session::upload(const float*, const float*, int, int, int, std::string& err) {
  err = "kvtile-eval was built without CUDA";
  return false;
}
bool device_codec_session::roundtrip(const kvtile::codec_params&, float*, float*, std::vector<int>&,
                                           std::vector<unsigned char>*, std::string& err) {
  err = "kvtile-eval was built without CUDA";
  return false;
}

}  // namespace kvtile_eval
