// tools/kvtile-eval/device_codec.hpp: kvtile-eval's GPU codec path (`--device
// cuda`, `--compare-devices`), as a host-compilable interface (no CUDA headers).
//
// A device_codec_session holds one layer on the GPU: upload() copies its keys
// and values (head-major [heads][tokens][head_dim] fp32, layer_codec.hpp's
// layer_buffers layout) once; roundtrip(p) then encodes and decodes every full
// tile of every head with kvtile::device::block_tile_codec<Codec, 512> in ONE
// launch (one block per (tile, head): encode, then decode to fp32 in the
// original frame) and downloads the decoded keys/values, the statuses and
// optionally the records. Item i = tile * heads + head, as the host path.
//
// Implementation: cuda/device_codec.cu (session, launches) and
// cuda/device_codec_d{64,128,256}.cu (the kernels, one TU per head_dim so a
// parallel build compiles them at once). Only the codecs kvtile-eval measures
// are instantiated (device_supports): every kvarn preset (both packings) and
// the kivi / rotate_rtn baselines at G = 128 with fp8 scales. Anything else
// (and token_rtn, which is no tile codec) runs on the host.
//
// A build without CUDA (KVTILE_EVAL_HAVE_CUDA = 0, and always the tool's tests,
// kvtile_eval_tests) links src/device_codec_none.cpp instead: device_available()
// says "built without CUDA". The library kvtile_eval_core does not depend on
// the choice (tools/CMakeLists.txt adds one of the two to the executable).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include <kvtile/dispatch.hpp>

#ifndef KVTILE_EVAL_HAVE_CUDA
#define KVTILE_EVAL_HAVE_CUDA 0
#endif

namespace kvtile_eval {

// True when this build has CUDA and a GPU is present; else false and `why`.
bool device_available(std::string& why);

// True when this build has a device kernel for p's codec.
bool device_supports(const kvtile::codec_params& p);

class device_codec_session {
 public:
  device_codec_session();
  ~device_codec_session();
  device_codec_session(const device_codec_session&) = delete;
  device_codec_session& operator=(const device_codec_session&) = delete;

  // Copies one layer to the GPU: k, v head-major [heads][tokens][head_dim].
  bool upload(const float* k, const float* v, int heads, int tokens, int head_dim, std::string& err);

  // Encodes + decodes the tokens/G full tiles of every uploaded head with p's
  // codec on the GPU. kh, vh (head-major like the upload) receive the decoded
  // tokens [0, tokens/G*G) of each head; the rest is left untouched.
  // statuses[i] = the kvtile::status of item i (tile * heads + head); records,
  // when non-null, gets items * record_bytes bytes. Returns false (err) on a
  // CUDA error or an unsupported codec, not on a codec status.
  bool roundtrip(const kvtile::codec_params& p, float* kh, float* vh, std::vector<int>& statuses,
                 std::vector<unsigned char>* records, std::string& err);

 private:
  struct impl;
  std::unique_ptr<impl> d_;
};

}  // namespace kvtile_eval
