#!/usr/bin/env bash
# tests/build_checks.sh: quick compile-only checks of the public headers (CI runs it).
#
#  1. every include/kvtile/**/*.hpp compiles alone (and included twice) with g++
#     and clang++, -std=c++17, no CUDA anywhere on the include path;
#  2. translation units instantiating the codec, paged and attention kernels
#     compile to compute_80 PTX that ptxas assembles for sm_80 (skipped, with a
#     message, when nvcc is missing; each .cuh alone under nvcc is the CMake
#     build's header check);
#  3. strict warnings as errors, g++ and clang++: a translation unit that
#     instantiates the host API (encode/decode/validate for several presets and
#     element types, dispatch over every combination, paged validators, numeric
#     conversions) with -Wall -Wextra -Wpedantic -Wconversion -Wshadow
#     -Wold-style-cast -Wcast-qual -Wundef -Wnon-virtual-dtor -Werror (clang's
#     -Wconversion includes -Wsign-conversion; -Wdouble-promotion is left out:
#     validate() widens float fields to double on purpose);
#  4. -fno-exceptions -fno-rtti: the umbrella header plus examples/quickstart.cpp
#     compile, link and run;
#  5. (2b) the decode-attention kernels compile for every listed CUDA
#     architecture, with registers and spills reported and spills bounded
#     (tests/attention_archs.py).
# Usage: tests/build_checks.sh   (env: JOBS, default 2; CXX_GNU, CXX_CLANG, NVCC)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
jobs=${JOBS:-2}
gxx=${CXX_GNU:-g++}
clangxx=${CXX_CLANG:-clang++}
nvcc=${NVCC:-$(command -v nvcc || { [[ -x /usr/local/cuda/bin/nvcc ]] && echo /usr/local/cuda/bin/nvcc; } || true)}
work=$(mktemp -d "${TMPDIR:-/tmp}/kvtile-build-checks.XXXXXX")
trap 'rm -rf "$work"' EXIT
start=$SECONDS
fail=0
say() { printf 'build_checks: %s\n' "$*"; }

have() { command -v "$1" >/dev/null 2>&1; }

# ---- 1. each .hpp alone, host compilers, no CUDA include path ------------------
mapfile -t hpp < <(cd include && find kvtile -name '*.hpp' | sort)
mapfile -t cuh < <(cd include && find kvtile -name '*.cuh' | sort)
for h in "${hpp[@]}"; do
  id=${h//[\/.]/_}
  printf '#include <%s>\n#include <%s>\n' "$h" "$h" >"$work/$id.cpp"
done
# -nostdinc++ is not used: the C++ standard library is allowed, CUDA is not.
# CPATH / CPLUS_INCLUDE_PATH are cleared so a CUDA directory cannot leak in.
for cxx in "$gxx" "$clangxx"; do
  if ! have "$cxx"; then say "SKIP header-alone with $cxx (not installed)"; continue; fi
  if ! printf '%s\n' "${hpp[@]}" | sed 's|[/.]|_|g' | \
       env -u CPATH -u CPLUS_INCLUDE_PATH xargs -P "$jobs" -I{} \
         "$cxx" -std=c++17 -fsyntax-only -Wall -Wextra -Werror -Iinclude "$work/{}.cpp"; then
    say "FAIL: a header does not compile alone with $cxx"; fail=1
  else
    say "ok: ${#hpp[@]} .hpp headers compile alone with $cxx"
  fi
  # No .hpp may pull in a CUDA header (it must build without the toolkit installed).
  if grep -lE '#\s*include\s*[<"](cuda|cuda_runtime|cuda_fp16|cuda_bf16|cuda_fp8|cub/|cuda/|nv/)' \
       $(printf 'include/%s\n' "${hpp[@]}") 2>/dev/null; then
    say "FAIL: the .hpp headers above include CUDA headers"; fail=1
  fi
done

# ---- 2. sm_80 forms: compute_80 PTX assembles for sm_80 ---------------------------
# Each .cuh alone under nvcc is the build's header check (tests/CMakeLists.txt,
# target kvtile_header_check_cuda). Here: translation units that instantiate
# the codec, paged and attention kernels are compiled to compute_80 PTX and
# assembled with ptxas -arch=sm_80, the code the driver JIT-compiles on Ampere
# and Ada GPUs (docs/reliability.md). Skipped, with a message, without nvcc.
if [[ -z $nvcc ]]; then
  say "SKIP sm_80 PTX checks: nvcc not found"
else
  ptxas=$(dirname "$nvcc")/ptxas
  sm80_units=(tests/device/launch_setup.cu ${KVTILE_SM80_UNITS:-})
  sm80_fail=0
  for u in "${sm80_units[@]}"; do
    id=${u//[\/.]/_}
    if ! "$nvcc" -std=c++17 -O3 --expt-relaxed-constexpr -Iinclude -I.deps -Iops/include -Iops/src \
           -gencode=arch=compute_80,code=compute_80 -ptx "$u" -o "$work/$id.ptx" >"$work/$id.log" 2>&1 \
       || ! "$ptxas" -arch=sm_80 "$work/$id.ptx" -o "$work/$id.cubin" >>"$work/$id.log" 2>&1; then
      head -20 "$work/$id.log"; say "FAIL: $u: compute_80 PTX does not assemble for sm_80"; sm80_fail=1
    fi
  done
  if [[ $sm80_fail == 0 ]]; then say "ok: compute_80 PTX of ${sm80_units[*]} assembles for sm_80"; else fail=1; fi
fi

# ---- 2b. decode attention for every listed architecture -----------------------------
# tests/attention_archs.py: tests/attention_archs.cu compiled as SASS for each
# real target of KVTILE_DEFAULT_CUDA_ARCHITECTURES (sm_80 .. sm_120), ptxas -v
# per kernel (registers, spills; more spill stores than
# tests/data/attention_spills.txt allows fails), each policy's shared memory.
if [[ -z $nvcc ]]; then
  say "SKIP decode attention per architecture: nvcc not found"
elif ! python3 tests/attention_archs.py --nvcc "$nvcc" --jobs "$jobs"; then
  say "FAIL: decode attention per architecture (tests/attention_archs.py)"; fail=1
else
  say "ok: decode attention compiles for every listed architecture within its spill allowance"
fi

# ---- 3. strict warnings as errors ---------------------------------------------------
cat >"$work/strict.cpp" <<'CPP'
// Instantiates the host API so template bodies are checked under strict warnings.
#include <kvtile/kvtile.hpp>
#include <kvtile/paged/paged_cache.hpp>

#include <cstdint>
#include <vector>

namespace {
template <class Codec, class T>
int exercise() {
  constexpr int D = Codec::D, G = Codec::G;
  std::vector<T> k(static_cast<std::size_t>(D) * G), v(k.size());
  std::vector<std::uint8_t> rec(Codec::record_bytes);
  typename Codec::workspace* ws = nullptr;
  int bad = 0;
  bad += !kvtile::ok(Codec::encode(k.data(), D, v.data(), D, rec.data(), ws));
  bad += !kvtile::ok(Codec::encode_keys(k.data(), D, rec.data()));
  bad += !kvtile::ok(Codec::encode_values(v.data(), D, rec.data()));
  bad += Codec::validate(rec.data()) != kvtile::status::success;
  bad += Codec::decode(rec.data(), k.data(), D, v.data(), D, kvtile::frame::rotated) != kvtile::status::success;
  bad += Codec::decode_keys(rec.data(), k.data(), D) != kvtile::status::success;
  bad += Codec::decode_values(rec.data(), v.data(), D) != kvtile::status::success;
  const typename Codec::view view(rec.data());
  bad += view.key_code(0, 0) > 255u;
  return bad;
}
}  // namespace

int main() {
  using namespace kvtile;
  int bad = 0;
  bad += exercise<presets::k4v2_g128<128>, half_t>();
  bad += exercise<presets::k4v4_g64<64, fp16_scales>, bfloat16_t>();
  bad += exercise<presets::k8v8_g128<256>, float>();
  bad += exercise<presets::k2v2_g128<64>, float>();
  bad += exercise<presets::kivi<128, 64, 4, 4, fp16_scales>, half_t>();
  bad += exercise<presets::rotate_rtn<256>, bfloat16_t>();
  // Every dispatchable combination: validate and the record size.
  for (int d : {64, 128, 256})
    for (int g : {64, 128})
      for (int kb : {2, 4, 8})
        for (int vb : {2, 4, 8})
          for (packing pk : {packing::fp8_scales, packing::fp16_scales})
            for (method m : {method::kvarn, method::kivi, method::rotate_rtn}) {
              const codec_params p{d, g, kb, vb, pk, m};
              (void)dispatch(p, [&](auto tag) {
                using C = typename decltype(tag)::type;
                std::vector<std::uint8_t> r(C::record_bytes);
                bad += C::validate(r.data()) == status::null_pointer;
              });
            }
  paged_cache_view pv;
  bad += validate_structure(pv, 0, 128, 128) == status::success;
  bad += validate_tables(pv, nullptr, nullptr) == status::success;
  sequence_pack_layout sl;
  bad += sequence_pack_layout_of(pv, 0, 0, sl) == status::success;
  std::vector<std::uint8_t> packed(64);
  bad += pack_sequence(pv, 0, 0, nullptr, packed.data(), packed.size()) == status::success;
  bad += unpack_sequence(packed.data(), packed.size(), pv, 0, nullptr) == status::success;
  bad += half_t(1.5f).to_float() != 1.5f;
  bad += bfloat16_t(1.5f).to_float() != 1.5f;
  bad += float_e4m3_t(1.5f).to_float() != 1.5f;
  bad += half_round_up(0.1f).to_float() < half_round_down(0.1f).to_float();
  bad += e4m3_round_up(0.1f).to_float() < e4m3_round_down(0.1f).to_float();
  return bad > 1000;
}
CPP
strict=(-std=c++17 -fsyntax-only -Iinclude -Wall -Wextra -Wpedantic -Wconversion -Wshadow
        -Wold-style-cast -Wcast-qual -Wundef -Wnon-virtual-dtor -Werror)
pids=()
for cxx in "$gxx" "$clangxx"; do
  if ! have "$cxx"; then say "SKIP strict warnings with $cxx (not installed)"; continue; fi
  ( "$cxx" "${strict[@]}" "$work/strict.cpp" >"$work/strict.$(basename "$cxx").log" 2>&1 ) &
  pids+=("$!:$cxx")
done

# ---- 4. -fno-exceptions -fno-rtti ---------------------------------------------------
noexc_ok=1
if [[ -f examples/quickstart.cpp ]]; then
  if "$gxx" -std=c++17 -O1 -fno-exceptions -fno-rtti -Wall -Wextra -Werror -Iinclude \
       examples/quickstart.cpp -o "$work/quickstart_noexc" >"$work/noexc.log" 2>&1 \
     && "$work/quickstart_noexc" >"$work/noexc.run" 2>&1; then
    say "ok: umbrella header + examples/quickstart.cpp build and run with -fno-exceptions -fno-rtti ($gxx)"
  else
    cat "$work/noexc.log" "$work/noexc.run" 2>/dev/null | tail -30
    say "FAIL: -fno-exceptions build/run of examples/quickstart.cpp"; noexc_ok=0; fail=1
  fi
else
  printf '#include <kvtile/kvtile.hpp>\nint main() { return 0; }\n' >"$work/noexc.cpp"
  "$gxx" -std=c++17 -fno-exceptions -fno-rtti -Iinclude "$work/noexc.cpp" -o "$work/noexc" \
    && say "ok: umbrella header with -fno-exceptions -fno-rtti (no examples/quickstart.cpp)" \
    || { say "FAIL: umbrella header with -fno-exceptions"; fail=1; }
fi

for pc in "${pids[@]}"; do
  pid=${pc%%:*}; cxx=${pc#*:}
  if wait "$pid"; then
    say "ok: strict warnings (${strict[*]:3}) with $cxx"
  else
    head -40 "$work/strict.$(basename "$cxx").log"
    say "FAIL: strict warnings with $cxx"; fail=1
  fi
done

say "done in $((SECONDS - start)) s ($([[ $fail == 0 ]] && echo passed || echo FAILED))"
exit $fail
