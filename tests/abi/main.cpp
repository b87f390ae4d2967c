// tests/abi/main.cpp: two builds of tests/abi/variant.cu with different tuning
// (paged policies) in one process (linked statically as objects, or as two shared
// libraries). Passes when each build keeps its own kvtile code: distinct
// launcher instantiations, each build's own block size, and (with a GPU) both
// dequantize bit-identically to the host decode. Exit 77: no GPU for the run.
#include <cstdio>

extern "C" const void* kvtile_abi_a_launcher();
extern "C" const void* kvtile_abi_b_launcher();
extern "C" int kvtile_abi_a_block_threads();
extern "C" int kvtile_abi_b_block_threads();
extern "C" int kvtile_abi_a_run(unsigned seed);
extern "C" int kvtile_abi_b_run(unsigned seed);

int main() {
  int fails = 0;
  auto check = [&](bool ok, const char* what) {
    std::printf("%s: %s\n", ok ? "ok  " : "FAIL", what);
    fails += ok ? 0 : 1;
  };
  check(kvtile_abi_a_launcher() != kvtile_abi_b_launcher(), "the two builds use different launcher instantiations");
  check(kvtile_abi_a_block_threads() == 128 && kvtile_abi_b_block_threads() == 512,
        "each build keeps its own policy's dequantize_block_threads");
  const int ra = kvtile_abi_a_run(1), rb = kvtile_abi_b_run(2);
  if (ra == 77 && rb == 77) {
    std::printf("%d passed, %d failed (GPU part SKIPPED: no CUDA device)\n", 2 - fails, fails);
    return fails ? 1 : 77;
  }
  check(ra == 0, "build a dequantizes bit-identically to the host decode");
  check(rb == 0, "build b dequantizes bit-identically to the host decode");
  std::printf("%d passed, %d failed\n", 4 - fails, fails);
  return fails ? 1 : 0;
}
