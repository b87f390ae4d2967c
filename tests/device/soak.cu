// tests/device/soak.cu: paged-cache soak test (docs/soak.md).
//
// Thousands of sequences of random lengths live in a fixed number of slots of
// one paged_cache_view. Each step every live sequence either appends one token
// (launch_append), receives a prefill chunk of random size (launch_prefill,
// chunks start anywhere in a tile), or idles. Sequences are multi-turn (prompt,
// decode, prompt, decode, ...), finish, and free their pages; a host page
// allocator with a free list hands pages out in random order, so pages are
// recycled by later sequences. At every checkpoint:
//   * every live page record (and every record of a sequence that finished
//     since the last checkpoint) equals, byte for byte, a host model of the
//     same history: tokens rotated to fp16 one by one (host_rotate_to_half)
//     and each completed tile encoded with the HOST codec
//     (paged_record_codec<Codec>::encode), or copied to the sink;
//   * the live fp16 tail rows, the sinks and the per-sequence flags equal the model;
//   * decode attention (kvtile::attention::paged_decode) over the whole view
//     matches an fp64 reference on the dequantized model cache for a sample of
//     sequences (relative error per row <= 1e-3, lse within 1e-3); empty slots
//     give output 0 and lse -inf;
//   * then the pages of finished sequences go back to the free list, some live
//     pages move to other free pages (device copy + page-table update) and some
//     slots swap sequences (tails, sinks, flags, page-table rows, lengths).
// Only public APIs are used. Exit 0 pass, 1 fail, 77 no device.
// Options: --small (compute-sanitizer sizes), --seed N, --seqs N (config 1),
// --live N (config 1), --max-len N, --ckpt N, --attn-sample N, --only 1|2.
// ctest-sanitize: run --small
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <kvtile/device/attention/paged_decode.cuh>
#include <kvtile/device/device.cuh>
#include <kvtile/kvtile.hpp>
#include <kvtile/presets.hpp>

#include "device_test.cuh"

namespace {

using kvtest::attend;
using kvtest::fwht_d;
using kvtest::parallel_for;
using kvtest::rel_err;
using kvtile::bfloat16_t;
using kvtile::half_t;

long g_passed = 0, g_failed = 0;

void check(bool ok, const std::string& what) {
  if (ok) {
    ++g_passed;
    return;
  }
  ++g_failed;
  if (g_failed <= 40) std::printf("FAILED: %s\n", what.c_str());
}

#define SOAK_CUDA(expr)                                                                                   \
  do {                                                                                                    \
    cudaError_t e_ = (expr);                                                                              \
    if (e_ != cudaSuccess) {                                                                              \
      std::printf("FAILED: %s: %s (%s:%d)\n", #expr, cudaGetErrorString(e_), __FILE__, __LINE__);        \
      std::printf("%ld passed, %ld failed\n", g_passed, g_failed + 1);                                    \
      std::exit(1);                                                                                       \
    }                                                                                                     \
  } while (0)

template <class T>
struct dbuf {
  T* p = nullptr;
  std::size_t n = 0;
  explicit dbuf(std::size_t count) : n(count) { SOAK_CUDA(cudaMalloc(&p, std::max<std::size_t>(count, 1) * sizeof(T))); }
  ~dbuf() { cudaFree(p); }
  dbuf(const dbuf&) = delete;
  dbuf& operator=(const dbuf&) = delete;
  void up(const std::vector<T>& h, std::size_t count) {
    if (count) SOAK_CUDA(cudaMemcpy(p, h.data(), count * sizeof(T), cudaMemcpyHostToDevice));
  }
  void up(const std::vector<T>& h) { up(h, h.size()); }
  void down(std::vector<T>& h) const {
    h.resize(n);
    SOAK_CUDA(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
  }
};

// Runs f(i) for i in [0, n) on up to all hardware threads.
std::uint64_t splitmix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Fast N(0,1) samples: a table of 65536 normals indexed by 16 random bits.
const std::vector<float>& normal_table() {
  static const std::vector<float> t = [] {
    std::vector<float> v(65536);
    std::mt19937_64 r(12345);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (auto& x : v) x = nd(r);
    return v;
  }();
  return t;
}

struct fast_normal {
  std::uint64_t s, bits = 0;
  int left = 0;
  explicit fast_normal(std::uint64_t seed) : s(seed) {}
  float operator()() {
    if (left == 0) {
      s = splitmix(s);
      bits = s;
      left = 4;
    }
    const float x = normal_table()[bits & 0xffff];
    bits >>= 16;
    --left;
    return x;
  }
};

struct params {
  const char* name = "";
  int total_seqs = 2000;
  int live = 256;        // slots of the view
  int max_len = 2048;    // tokens per sequence (<= max_pages_per_seq * G)
  int kv_heads = 2;
  int group = 4;         // query heads per KV head
  bool sink = false;
  int ckpt_every = 40;   // steps between checkpoints
  int attn_sample = 24;  // sequences checked against the fp64 reference per checkpoint
  double attn_tol = 1e-3;
  int migrate_per_ckpt = 48;
  int swap_per_ckpt = 16;
  int max_decode = 80;        // decode tokens per turn: 1..max_decode
  int pure_decode_max = 0;    // length of the 1 in 10 sequences that only decode (0: 2 G + 40)
  std::uint64_t seed = 1;
};

struct counters {
  long steps = 0, tokens_appended = 0, tokens_prefilled = 0, prefill_chunks = 0, seqs_started = 0, seqs_finished = 0;
  long pages_allocated = 0, pages_recycled = 0, pages_migrated = 0, slot_swaps = 0, records_compared = 0;
  long tail_rows_compared = 0, sinks_compared = 0, attn_rows = 0, empty_rows = 0, checkpoints = 0, launches = 0;
  long host_encodes = 0;
  double max_rel = 0, max_lse = 0;
};

// One sequence: its plan (phases: > 0 prefill tokens, < 0 decode tokens) and
// its per-(head, K/V) channel statistics (as attention_common.cuh's data: per
// channel scale and offset, a few outlier channels).
struct sequence {
  int uid = 0;
  int length = 0;  // final length
  std::vector<int> phases;
  std::size_t phase = 0;
  int phase_left = 0;
  int pages_needed = 0;
  std::vector<float> scale, offset;  // [H][2][D]
};

template <class Codec, class T>
class soak {
  using PC = kvtile::device::paged_record_codec<Codec>;
  static constexpr int D = Codec::D, G = Codec::G;
  static constexpr std::size_t RB = Codec::record_bytes;
  static constexpr std::size_t TILE = static_cast<std::size_t>(G) * D;

  params P;
  counters C;
  std::mt19937_64 rng;
  int S, H, maxp, npages;
  // Host model (same layout as the device).
  std::vector<std::uint8_t> pages;
  std::vector<std::int32_t> table, lens, step_lens, flags;
  std::vector<half_t> tk, tv, sk, sv;
  std::vector<int> slot_seq;  // index into seqs, -1: empty
  std::vector<sequence> seqs;
  std::vector<int> free_pages, pending_free;
  std::vector<char> page_ever_used;
  long reserved = 0;  // pages promised to live sequences, not yet allocated
  struct job {
    int page, slot;
    std::vector<half_t> k, v;  // [H][G][D] rotated fp16 tile
  };
  std::vector<job> jobs;
  std::vector<std::string> launch_errors;
  // Device.
  dbuf<std::uint8_t> d_pages;
  dbuf<std::int32_t> d_table, d_lens, d_step_lens, d_flags, d_cu;
  dbuf<half_t> d_tk, d_tv, d_sk, d_sv;
  kvtile::paged_cache_view view{}, step_view{};

  std::size_t off(int s, int h) const { return (static_cast<std::size_t>(s) * H + h) * TILE; }
  std::int32_t& tab(int s, int t) { return table[static_cast<std::size_t>(s) * maxp + t]; }
  std::uint8_t* rec(int page, int h) { return pages.data() + (static_cast<std::size_t>(page) * H + h) * RB; }
  int first_paged_tile() const { return P.sink ? 1 : 0; }

 public:
  explicit soak(const params& p)
      : P(p),
        rng(p.seed),
        S(p.live),
        H(p.kv_heads),
        maxp((p.max_len + G - 1) / G),
        npages(std::max((p.max_len + G - 1) / G * 2, p.live * ((p.max_len + G - 1) / G) / 2)),
        pages(static_cast<std::size_t>(npages) * H * RB, 0xA5),
        table(static_cast<std::size_t>(S) * maxp, -1),
        lens(S, 0),
        step_lens(S, 0),
        flags(S, 0),
        tk(static_cast<std::size_t>(S) * H * TILE, half_t::from_bits(0x7e00)),  // NaN: never read
        tv(tk),
        sk(tk),
        sv(tk),
        slot_seq(S, -1),
        page_ever_used(npages, 0),
        d_pages(pages.size()),
        d_table(table.size()),
        d_lens(S),
        d_step_lens(S),
        d_flags(S),
        d_cu(S + 1),
        d_tk(tk.size()),
        d_tv(tk.size()),
        d_sk(tk.size()),
        d_sv(tk.size()) {
    for (int i = 0; i < npages; ++i) free_pages.push_back(i);
    d_pages.up(pages);
    d_table.up(table);
    d_lens.up(lens);
    d_step_lens.up(step_lens);
    d_flags.up(flags);
    d_tk.up(tk);
    d_tv.up(tv);
    d_sk.up(sk);
    d_sv.up(sv);
    view.pages = d_pages.p;
    view.page_table = d_table.p;
    view.seq_lens = d_lens.p;
    view.tail_k = d_tk.p;
    view.tail_v = d_tv.p;
    view.sink_k = P.sink ? d_sk.p : nullptr;
    view.sink_v = P.sink ? d_sv.p : nullptr;
    view.num_seqs = S;
    view.kv_heads = H;
    view.head_dim = D;
    view.tile_tokens = G;
    view.max_pages_per_seq = maxp;
    view.num_pages = npages;
    view.record_bytes = static_cast<std::int64_t>(RB);
    step_view = view;
    step_view.seq_lens = d_step_lens.p;
  }

  sequence make_sequence(int uid) {
    sequence q;
    q.uid = uid;
    std::uniform_real_distribution<double> ud(0.0, 1.0);
    const double u = ud(rng);
    int L = 1 + static_cast<int>((P.max_len - 1) * u * u);
    const bool pure_decode = rng() % 10 == 0;
    if (pure_decode) L = 1 + static_cast<int>(rng() % std::min(P.max_len, P.pure_decode_max > 0 ? P.pure_decode_max : 2 * G + 40));
    q.length = L;
    if (pure_decode) {
      q.phases.push_back(-L);
    } else {
      const int turns = 1 + static_cast<int>(rng() % 3);
      int remaining = L;
      for (int t = 0; t < turns && remaining > 0; ++t) {
        const int dec = std::min(remaining, 1 + static_cast<int>(rng() % P.max_decode));
        const int room = remaining - dec;
        int prompt = t == turns - 1 ? room : static_cast<int>(rng() % (room + 1));
        if (t == 0 && rng() % 8 == 0) prompt = 0;  // a conversation that starts with decode
        if (t == turns - 1) prompt = room;
        if (prompt > 0) q.phases.push_back(prompt);
        q.phases.push_back(-dec);
        remaining -= prompt + dec;
      }
    }
    q.phase = 0;
    q.phase_left = std::abs(q.phases[0]);
    q.pages_needed = std::max(0, L / G - first_paged_tile());
    q.scale.resize(static_cast<std::size_t>(H) * 2 * D);
    q.offset.resize(q.scale.size());
    std::normal_distribution<double> nd(0.0, 1.0);
    for (int h = 0; h < H; ++h)
      for (int kv = 0; kv < 2; ++kv) {
        float* sc = &q.scale[(static_cast<std::size_t>(h) * 2 + kv) * D];
        float* of = &q.offset[(static_cast<std::size_t>(h) * 2 + kv) * D];
        for (int d = 0; d < D; ++d) {
          sc[d] = static_cast<float>(std::exp(0.5 * nd(rng)));
          of[d] = static_cast<float>(0.3 * nd(rng));
        }
        for (int i = 0; i < 2; ++i) sc[rng() % D] *= kv == 0 ? 8.0f : 2.0f;
      }
    return q;
  }

  // Token at position pos of sequence q: k, v [H][D] in the original frame.
  // Deterministic in (seed, uid, pos); about one token in 4000 has a NaN or Inf.
  void gen_token(const sequence& q, int pos, T* k, T* v) const {
    fast_normal nr(splitmix(P.seed * 0x100000001b3ull ^ (static_cast<std::uint64_t>(q.uid) << 24) ^ pos));
    for (int h = 0; h < H; ++h)
      for (int kv = 0; kv < 2; ++kv) {
        const float* sc = &q.scale[(static_cast<std::size_t>(h) * 2 + kv) * D];
        const float* of = &q.offset[(static_cast<std::size_t>(h) * 2 + kv) * D];
        T* dst = (kv == 0 ? k : v) + static_cast<std::size_t>(h) * D;
        for (int d = 0; d < D; ++d) dst[d] = T(of[d] + sc[d] * nr());
      }
    const std::uint64_t r = splitmix(nr.s + 7);
    if (r % 4000 == 0) {
      T* row = ((r >> 20) & 1 ? k : v) + ((r >> 21) % H) * D;
      row[(r >> 32) % D] = T((r >> 40) & 1 ? NAN : INFINITY);
    }
  }

  // The model's append of one token to slot s (one by one, as in paged_cache.cu).
  void model_append(int s, const T* k, const T* v, std::vector<job>& out) {
    const int pos = lens[s];
    for (int h = 0; h < H; ++h) {
      flags[s] |= kvtile::device::host_rotate_to_half<typename Codec::rotation, D>(k + h * D, &tk[off(s, h) + (pos % G) * D]);
      flags[s] |= kvtile::device::host_rotate_to_half<typename Codec::rotation, D>(v + h * D, &tv[off(s, h) + (pos % G) * D]);
    }
    lens[s] = pos + 1;
    if ((pos + 1) % G != 0) return;
    const int tile = pos / G;
    if (P.sink && tile == 0) {
      for (int h = 0; h < H; ++h) {
        std::copy(tk.begin() + off(s, h), tk.begin() + off(s, h) + TILE, sk.begin() + off(s, h));
        std::copy(tv.begin() + off(s, h), tv.begin() + off(s, h) + TILE, sv.begin() + off(s, h));
      }
      return;
    }
    job j;
    j.page = tab(s, tile);
    j.slot = s;
    j.k.resize(H * TILE);
    j.v.resize(H * TILE);
    for (int h = 0; h < H; ++h) {
      std::copy(tk.begin() + off(s, h), tk.begin() + off(s, h) + TILE, j.k.begin() + h * TILE);
      std::copy(tv.begin() + off(s, h), tv.begin() + off(s, h) + TILE, j.v.begin() + h * TILE);
    }
    out.push_back(std::move(j));
  }

  int alloc_page(bool count = true) {
    const std::size_t i = rng() % free_pages.size();
    const int p = free_pages[i];
    free_pages[i] = free_pages.back();
    free_pages.pop_back();
    C.pages_allocated += count;
    if (page_ever_used[p] && count) ++C.pages_recycled;
    page_ever_used[p] = 1;
    return p;
  }

  void flush_jobs() {
    std::atomic<long> bad{0};
    parallel_for(static_cast<int>(jobs.size()), [&](int i) {
      thread_local std::unique_ptr<typename PC::workspace> ws;
      if (!ws) ws.reset(new typename PC::workspace);
      const job& j = jobs[i];
      for (int h = 0; h < H; ++h) {
        const kvtile::status st = PC::encode(&j.k[h * TILE], D, &j.v[h * TILE], D, rec(j.page, h), ws.get());
        if (st != kvtile::status::success) ++bad;
      }
    });
    C.host_encodes += static_cast<long>(jobs.size()) * H;
    check(bad.load() == 0, std::string(P.name) + ": host encodes of the model's tiles return success");
    jobs.clear();
  }

  // Swaps the contents of slots a and b (either may be empty) on host and device.
  void swap_slots(int a, int b) {
    std::swap(slot_seq[a], slot_seq[b]);
    std::swap(lens[a], lens[b]);
    std::swap(flags[a], flags[b]);
    for (int t = 0; t < maxp; ++t) std::swap(tab(a, t), tab(b, t));
    const std::size_t n = static_cast<std::size_t>(H) * TILE;
    std::swap_ranges(tk.begin() + off(a, 0), tk.begin() + off(a, 0) + n, tk.begin() + off(b, 0));
    std::swap_ranges(tv.begin() + off(a, 0), tv.begin() + off(a, 0) + n, tv.begin() + off(b, 0));
    std::swap_ranges(sk.begin() + off(a, 0), sk.begin() + off(a, 0) + n, sk.begin() + off(b, 0));
    std::swap_ranges(sv.begin() + off(a, 0), sv.begin() + off(a, 0) + n, sv.begin() + off(b, 0));
    for (half_t* base : {d_tk.p, d_tv.p, d_sk.p, d_sv.p}) {
      half_t* tmp = nullptr;
      SOAK_CUDA(cudaMalloc(&tmp, n * sizeof(half_t)));
      SOAK_CUDA(cudaMemcpy(tmp, base + off(a, 0), n * sizeof(half_t), cudaMemcpyDeviceToDevice));
      SOAK_CUDA(cudaMemcpy(base + off(a, 0), base + off(b, 0), n * sizeof(half_t), cudaMemcpyDeviceToDevice));
      SOAK_CUDA(cudaMemcpy(base + off(b, 0), tmp, n * sizeof(half_t), cudaMemcpyDeviceToDevice));
      SOAK_CUDA(cudaFree(tmp));
    }
    std::int32_t fa = 0, fb = 0;
    SOAK_CUDA(cudaMemcpy(&fa, d_flags.p + a, 4, cudaMemcpyDeviceToHost));
    SOAK_CUDA(cudaMemcpy(&fb, d_flags.p + b, 4, cudaMemcpyDeviceToHost));
    SOAK_CUDA(cudaMemcpy(d_flags.p + a, &fb, 4, cudaMemcpyHostToDevice));
    SOAK_CUDA(cudaMemcpy(d_flags.p + b, &fa, 4, cudaMemcpyHostToDevice));
    ++C.slot_swaps;
  }

  // Moves page table[s][t] to a random free page (device copy of its records).
  void migrate(int s, int t) {
    const int from = tab(s, t);
    const int to = alloc_page(false);  // counted as a migration, not an allocation
    std::memcpy(rec(to, 0), rec(from, 0), static_cast<std::size_t>(H) * RB);
    SOAK_CUDA(cudaMemcpy(d_pages.p + static_cast<std::size_t>(to) * H * RB, d_pages.p + static_cast<std::size_t>(from) * H * RB,
                         static_cast<std::size_t>(H) * RB, cudaMemcpyDeviceToDevice));
    tab(s, t) = to;
    free_pages.push_back(from);
    ++C.pages_migrated;
  }

  void checkpoint(bool final_ckpt) {
    ++C.checkpoints;
    SOAK_CUDA(cudaDeviceSynchronize());
    SOAK_CUDA(cudaGetLastError());
    flush_jobs();
    const std::string at = std::string(P.name) + " checkpoint " + std::to_string(C.checkpoints) + " (step " +
                           std::to_string(C.steps) + ")";
    // Records: every live page and every page of a sequence finished since the last checkpoint.
    std::vector<std::uint8_t> gp;
    d_pages.down(gp);
    std::vector<int> verify = pending_free;
    for (int s = 0; s < S; ++s)
      for (int t = first_paged_tile(); t < lens[s] / G; ++t) verify.push_back(tab(s, t));
    long bad_rec = 0;
    std::string first_bad;
    for (int p : verify)
      for (int h = 0; h < H; ++h) {
        const std::size_t o = (static_cast<std::size_t>(p) * H + h) * RB;
        if (std::memcmp(gp.data() + o, pages.data() + o, RB) != 0) {
          if (!bad_rec++) first_bad = "page " + std::to_string(p) + " head " + std::to_string(h);
        }
        ++C.records_compared;
      }
    check(bad_rec == 0, at + ": " + std::to_string(verify.size() * H) + " page records equal the host model (" +
                            std::to_string(bad_rec) + " differ, first: " + first_bad + ")");
    // Free pages keep their last contents too: nothing writes outside the page tables.
    check(gp == pages, at + ": the whole page pool (free pages included) equals the model");
    // Tails (live rows only), sinks, flags.
    std::vector<half_t> gk, gv;
    d_tk.down(gk);
    d_tv.down(gv);
    long bad_tail = 0;
    for (int s = 0; s < S; ++s)
      for (int h = 0; h < H; ++h) {
        const std::size_t n = static_cast<std::size_t>(lens[s] % G) * D;
        bad_tail += std::memcmp(&gk[off(s, h)], &tk[off(s, h)], n * 2) != 0;
        bad_tail += std::memcmp(&gv[off(s, h)], &tv[off(s, h)], n * 2) != 0;
        C.tail_rows_compared += lens[s] % G;
      }
    check(bad_tail == 0, at + ": fp16 tails equal the model (" + std::to_string(bad_tail) + " (seq, head, K/V) differ)");
    if (P.sink) {
      d_sk.down(gk);
      d_sv.down(gv);
      long bad_sink = 0;
      for (int s = 0; s < S; ++s)
        if (lens[s] >= G)
          for (int h = 0; h < H; ++h) {
            bad_sink += std::memcmp(&gk[off(s, h)], &sk[off(s, h)], TILE * 2) != 0;
            bad_sink += std::memcmp(&gv[off(s, h)], &sv[off(s, h)], TILE * 2) != 0;
            ++C.sinks_compared;
          }
      check(bad_sink == 0, at + ": sinks equal the model (" + std::to_string(bad_sink) + " differ)");
    }
    std::vector<std::int32_t> gf;
    d_flags.down(gf);
    long bad_flags = 0;
    for (int s = 0; s < S; ++s) bad_flags += slot_seq[s] >= 0 && gf[s] != flags[s];
    check(bad_flags == 0, at + ": per-sequence flags equal the model (" + std::to_string(bad_flags) + " differ)");

    attention_check(at);

    // Release the finished sequences' pages; then move pages and slots around.
    for (int p : pending_free) free_pages.push_back(p);
    pending_free.clear();
    if (!final_ckpt) {
      std::vector<std::pair<int, int>> cand;
      for (int s = 0; s < S; ++s)
        for (int t = first_paged_tile(); t < lens[s] / G; ++t) cand.emplace_back(s, t);
      std::shuffle(cand.begin(), cand.end(), rng);
      for (int i = 0; i < P.migrate_per_ckpt && i < static_cast<int>(cand.size()) && !free_pages.empty(); ++i)
        migrate(cand[i].first, cand[i].second);
      for (int i = 0; i < P.swap_per_ckpt; ++i) {
        const int a = static_cast<int>(rng() % S), b = static_cast<int>(rng() % S);
        if (a != b) swap_slots(a, b);
      }
      d_table.up(table);
      d_lens.up(lens);
    }
  }

  void attention_check(const std::string& at) {
    const int Hq = H * P.group;
    d_table.up(table);
    d_lens.up(lens);
    std::vector<half_t> q(static_cast<std::size_t>(S) * Hq * D);
    {
      std::normal_distribution<float> nd(0.0f, 1.0f);
      for (auto& x : q) x = half_t(nd(rng));
    }
    dbuf<half_t> dq(q.size()), dout(q.size());
    dbuf<float> dlse(static_cast<std::size_t>(S) * Hq);
    dq.up(q);
    SOAK_CUDA(cudaMemset(dout.p, 0xFF, q.size() * sizeof(half_t)));  // NaN poison
    kvtile::attention::decode_args<half_t> a;
    a.q = dq.p;
    a.out = dout.p;
    a.lse = dlse.p;
    a.q_heads = Hq;
    a.softmax_scale = 1.0f / std::sqrt(static_cast<float>(D));
    a.workspace_bytes = kvtile::attention::workspace_bytes<Codec>(view, Hq);
    dbuf<std::uint8_t> ws(a.workspace_bytes);
    a.workspace = ws.p;
    const kvtile::status st = kvtile::attention::paged_decode<Codec>(view, a);
    check(st == kvtile::status::success, at + ": paged_decode returns success (" + kvtile::to_string(st) + ")");
    if (st != kvtile::status::success) return;
    SOAK_CUDA(cudaDeviceSynchronize());
    SOAK_CUDA(cudaGetLastError());
    std::vector<half_t> out;
    std::vector<float> lse;
    dout.down(out);
    dlse.down(lse);
    // Empty slots: output 0, lse -inf.
    long bad_empty = 0;
    std::vector<int> live;
    for (int s = 0; s < S; ++s) {
      if (lens[s] > 0) {
        live.push_back(s);
        continue;
      }
      for (int h = 0; h < Hq; ++h) {
        const std::size_t row = static_cast<std::size_t>(s) * Hq + h;
        for (int d = 0; d < D; ++d) bad_empty += out[row * D + d].to_float() != 0.0f;
        bad_empty += !(std::isinf(lse[row]) && lse[row] < 0);
        ++C.empty_rows;
      }
    }
    check(bad_empty == 0, at + ": empty slots give output 0 and lse -inf");
    std::shuffle(live.begin(), live.end(), rng);
    if (static_cast<int>(live.size()) > P.attn_sample) live.resize(P.attn_sample);
    const int units = static_cast<int>(live.size()) * H;
    std::vector<double> rel(units, 0.0), lerr(units, 0.0);
    std::vector<char> finite(units, 1);
    parallel_for(units, [&](int u) {
      const int s = live[u / H], h = u % H, L = lens[s], n_full = L / G;
      std::vector<double> K(static_cast<std::size_t>(L) * D), V(K.size());
      std::vector<float> fk(TILE), fv(TILE);
      for (int i = 0; i < n_full; ++i) {
        if (P.sink && i == 0) {
          for (std::size_t e = 0; e < TILE; ++e) {
            fk[e] = sk[off(s, h) + e].to_float();
            fv[e] = sv[off(s, h) + e].to_float();
          }
        } else {
          const std::uint8_t* r = pages.data() + (static_cast<std::size_t>(table[static_cast<std::size_t>(s) * maxp + i]) * H + h) * RB;
          // A record the host model cannot decode fails the unit (reported with the non-finite ones).
          if (PC::decode_keys(r, fk.data(), D, kvtile::frame::rotated) != kvtile::status::success ||
              PC::decode_values(r, fv.data(), D, kvtile::frame::rotated) != kvtile::status::success)
            finite[u] = 0;
        }
        for (std::size_t e = 0; e < TILE; ++e) {
          K[i * TILE + e] = fk[e];
          V[i * TILE + e] = fv[e];
        }
      }
      for (std::size_t e = 0; e < static_cast<std::size_t>(L % G) * D; ++e) {
        K[n_full * TILE + e] = tk[off(s, h) + e].to_float();
        V[n_full * TILE + e] = tv[off(s, h) + e].to_float();
      }
      std::vector<double> qr(D), o(D), got(D);
      for (int g = 0; g < P.group; ++g) {
        const std::size_t row = static_cast<std::size_t>(s) * Hq + h * P.group + g;
        for (int d = 0; d < D; ++d) qr[d] = q[row * D + d].to_float();
        fwht_d(qr.data(), D);
        const double l = attend(qr.data(), K, V, L, D, 1.0 / std::sqrt(static_cast<double>(D)), o.data());
        fwht_d(o.data(), D);  // back to the original frame
        for (int d = 0; d < D; ++d) {
          got[d] = out[row * D + d].to_float();
          finite[u] &= std::isfinite(got[d]) ? 1 : 0;
        }
        rel[u] = std::max(rel[u], rel_err(got.data(), o.data(), D));
        lerr[u] = std::max(lerr[u], std::fabs(static_cast<double>(lse[row]) - l));
      }
    });
    double mr = 0, ml = 0;
    bool fin = true;
    for (int u = 0; u < units; ++u) {
      mr = std::max(mr, rel[u]);
      ml = std::max(ml, lerr[u]);
      fin = fin && finite[u];
    }
    C.attn_rows += static_cast<long>(units) * P.group;
    C.max_rel = std::max(C.max_rel, mr);
    C.max_lse = std::max(C.max_lse, ml);
    char buf[200];
    std::snprintf(buf, sizeof buf, ": attention on %d sampled sequences x %d query heads: max rel err %.2e (tol %.1e), lse err %.1e",
                  static_cast<int>(live.size()), Hq, mr, P.attn_tol, ml);
    check(fin && mr <= P.attn_tol && ml <= 1e-3, at + buf);
  }

  void step() {
    ++C.steps;
    // 1. Admit new sequences into empty slots while the pool can promise their pages.
    std::vector<int> empty;
    for (int s = 0; s < S; ++s)
      if (slot_seq[s] < 0) empty.push_back(s);
    std::shuffle(empty.begin(), empty.end(), rng);
    for (int s : empty) {
      if (static_cast<int>(seqs.size()) >= P.total_seqs) break;
      if (next_seq.uid == 0) next_seq = make_sequence(static_cast<int>(seqs.size()) + 1);
      if (static_cast<long>(free_pages.size()) - reserved < next_seq.pages_needed) break;
      reserved += next_seq.pages_needed;
      seqs.push_back(std::move(next_seq));
      next_seq = sequence{};
      slot_seq[s] = static_cast<int>(seqs.size()) - 1;
      lens[s] = 0;
      flags[s] = 0;
      SOAK_CUDA(cudaMemset(d_flags.p + s, 0, 4));
      ++C.seqs_started;
    }
    // 2. Actions: n tokens by prefill (chunk) or 1 by append, or idle.
    std::vector<int> chunk(S, 0);
    std::vector<char> by_append(S, 0);
    for (int s = 0; s < S; ++s) {
      if (slot_seq[s] < 0 || rng() % 20 == 0) continue;
      sequence& q = seqs[slot_seq[s]];
      if (q.phases[q.phase] < 0) {
        by_append[s] = 1;
        chunk[s] = 1;
      } else {
        const int kind = static_cast<int>(rng() % 3);
        const int cap = kind == 0 ? 16 : (kind == 1 ? G : 4 * G + 40);
        chunk[s] = std::min(q.phase_left, 1 + static_cast<int>(rng() % cap));
      }
      // Pages for the tiles this step completes.
      for (int t = lens[s] / G; t < (lens[s] + chunk[s]) / G; ++t)
        if (t >= first_paged_tile()) {
          tab(s, t) = alloc_page();
          --reserved;
        }
    }
    // 3. Tokens (parallel over slots) and the model.
    std::vector<std::int32_t> cu(S + 1, 0);
    for (int s = 0; s < S; ++s) cu[s + 1] = cu[s] + (by_append[s] ? 0 : chunk[s]);
    const std::size_t tok = static_cast<std::size_t>(H) * D;
    std::vector<T> pk(std::max<std::size_t>(1, cu[S] * tok)), pv(pk.size());
    std::vector<T> ak(S * tok, T(0.0f)), av(ak.size(), T(0.0f));
    std::vector<std::vector<job>> slot_jobs(S);
    parallel_for(S, [&](int s) {
      if (!chunk[s]) return;
      const sequence& q = seqs[slot_seq[s]];
      for (int i = 0; i < chunk[s]; ++i) {
        T* k = by_append[s] ? &ak[s * tok] : &pk[(cu[s] + i) * tok];
        T* v = by_append[s] ? &av[s * tok] : &pv[(cu[s] + i) * tok];
        gen_token(q, lens[s], k, v);
        model_append(s, k, v, slot_jobs[s]);
      }
    });
    for (auto& js : slot_jobs)
      for (auto& j : js) jobs.push_back(std::move(j));
    long n_append = 0;
    int max_chunk = 0;
    for (int s = 0; s < S; ++s) {
      step_lens[s] = by_append[s] ? lens[s] : 0;
      n_append += by_append[s];
      if (!by_append[s] && chunk[s]) {
        ++C.prefill_chunks;
        C.tokens_prefilled += chunk[s];
        max_chunk = std::max(max_chunk, chunk[s]);
      }
    }
    C.tokens_appended += n_append;
    // 4. Host-side validation (public validators), uploads, launches.
    {
      std::vector<std::uint8_t> marks(npages, 0);
      const kvtile::status v1 = kvtile::validate_tables(view, table.data(), lens.data(), marks.data());
      std::int64_t mx = -1;
      const kvtile::status v2 = kvtile::validate_prefill(view, cu.data(), lens.data(), &mx);
      if (v1 != kvtile::status::success || v2 != kvtile::status::success || mx != max_chunk)
        launch_errors.push_back("step " + std::to_string(C.steps) + ": validate_tables/validate_prefill");
    }
    d_table.up(table);
    d_lens.up(lens);
    d_step_lens.up(step_lens);
    if (max_chunk > 0) {
      if (!d_pk || d_pk->n < pk.size()) {  // grow (stream-ordered: cudaFree waits for the device)
        d_pk.reset();
        d_pv.reset();
        d_pk.reset(new dbuf<T>(pk.size() * 3 / 2));
        d_pv.reset(new dbuf<T>(pk.size() * 3 / 2));
      }
      d_pk->up(pk);
      d_pv->up(pv);
      d_cu.up(cu);
      const kvtile::status st =
          kvtile::device::launch_prefill<Codec, T>(view, d_pk->p, d_pv->p, d_cu.p, max_chunk, d_flags.p);
      ++C.launches;
      if (st != kvtile::status::success)
        launch_errors.push_back("step " + std::to_string(C.steps) + ": launch_prefill " + kvtile::to_string(st));
    }
    if (n_append > 0) {
      d_ak_up(ak, av);
      const kvtile::status st = kvtile::device::launch_append<Codec, T>(step_view, d_ak.p, d_av.p, d_flags.p);
      ++C.launches;
      if (st != kvtile::status::success)
        launch_errors.push_back("step " + std::to_string(C.steps) + ": launch_append " + kvtile::to_string(st));
    }
    // 5. Advance plans; finished sequences leave (their pages wait for the next checkpoint).
    for (int s = 0; s < S; ++s) {
      if (!chunk[s]) continue;
      sequence& q = seqs[slot_seq[s]];
      q.phase_left -= chunk[s];
      if (q.phase_left > 0) continue;
      if (++q.phase < q.phases.size()) {
        q.phase_left = std::abs(q.phases[q.phase]);
        continue;
      }
      for (int t = first_paged_tile(); t < lens[s] / G; ++t) {
        pending_free.push_back(tab(s, t));
        tab(s, t) = -1;
      }
      for (int t = 0; t < maxp; ++t) tab(s, t) = -1;
      slot_seq[s] = -1;
      lens[s] = 0;
      ++C.seqs_finished;
      q.scale.clear();
      q.scale.shrink_to_fit();
      q.offset.clear();
      q.offset.shrink_to_fit();
    }
  }

  sequence next_seq;
  std::unique_ptr<dbuf<T>> d_pk, d_pv;
  dbuf<T> d_ak{static_cast<std::size_t>(P.live) * P.kv_heads * D}, d_av{static_cast<std::size_t>(P.live) * P.kv_heads * D};
  void d_ak_up(const std::vector<T>& k, const std::vector<T>& v) {
    d_ak.up(k);
    d_av.up(v);
  }

  counters run() {
    const auto t0 = std::chrono::steady_clock::now();
    while (C.seqs_finished < P.total_seqs) {
      step();
      if (C.steps % P.ckpt_every == 0) checkpoint(false);
      if (C.steps > 1000000) {
        check(false, std::string(P.name) + ": the soak makes progress");
        break;
      }
    }
    checkpoint(true);
    check(launch_errors.empty(), std::string(P.name) + ": " + std::to_string(C.launches) +
                                     " launches and host validations succeed" +
                                     (launch_errors.empty() ? "" : " (first: " + launch_errors[0] + ")"));
    check(free_pages.size() == static_cast<std::size_t>(npages) && reserved == 0,
          std::string(P.name) + ": every page back in the free list at the end");
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf(
        "%s: %.1f s, %ld steps, %ld checkpoints, %d slots, %d pages x %d heads x %zu B\n"
        "  tokens appended %ld, prefill chunks %ld (%ld tokens), sequences started %ld / finished %ld\n"
        "  pages allocated %ld, recycled %ld, migrated %ld, slot swaps %ld, host encodes %ld\n"
        "  records compared %ld, tail rows %ld, sinks %ld, attention checks %ld rows (max rel err %.2e, lse %.1e), "
        "empty rows %ld\n",
        P.name, sec, C.steps, C.checkpoints, S, npages, H, RB, C.tokens_appended, C.prefill_chunks, C.tokens_prefilled,
        C.seqs_started, C.seqs_finished, C.pages_allocated, C.pages_recycled, C.pages_migrated, C.slot_swaps,
        C.host_encodes, C.records_compared, C.tail_rows_compared, C.sinks_compared, C.attn_rows, C.max_rel, C.max_lse,
        C.empty_rows);
    std::fflush(stdout);
    return C;
  }
};

}  // namespace

int main(int argc, char** argv) {
  bool small = false;
  int only = 0;
  params p1, p2;
  p1.name = "k4v2_g128<128> fp8_scales, f16 in, no sink";
  p2.name = "k4v2_g64<128> fp16_scales, bf16 in, sink";
  p2.total_seqs = 600;
  p2.live = 128;
  p2.group = 8;
  p2.sink = true;
  p2.seed = 2;
  p2.attn_sample = 16;
  int seqs = -1, live = -1, max_len = -1, ckpt = -1, sample = -1;
  std::uint64_t seed = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto val = [&](int& dst) {
      if (i + 1 < argc) dst = std::atoi(argv[++i]);
    };
    if (a == "--small") small = true;
    else if (a == "--seqs") val(seqs);
    else if (a == "--live") val(live);
    else if (a == "--max-len") val(max_len);
    else if (a == "--ckpt") val(ckpt);
    else if (a == "--attn-sample") val(sample);
    else if (a == "--only") val(only);
    else if (a == "--seed" && i + 1 < argc) seed = std::strtoull(argv[++i], nullptr, 10);
    else {
      std::printf("usage: %s [--small] [--seed N] [--seqs N] [--live N] [--max-len N] [--ckpt N] [--attn-sample N] [--only 1|2]\n",
                  argv[0]);
      return 2;
    }
  }
  if (int rc = kvtest::require_device()) return rc;
  if (small) {
    p1.total_seqs = 40;
    p1.live = 10;
    p1.max_len = 512;
    p1.ckpt_every = 25;
    p1.attn_sample = 4;
    p1.migrate_per_ckpt = 6;
    p1.swap_per_ckpt = 3;
    p1.max_decode = p2.max_decode = 24;
    p1.pure_decode_max = 128 + 8;  // still completes a tile by append
    p2.pure_decode_max = 64 + 8;
    p2.total_seqs = 24;
    p2.live = 8;
    p2.max_len = 320;
    p2.ckpt_every = 25;
    p2.attn_sample = 3;
    p2.migrate_per_ckpt = 6;
    p2.swap_per_ckpt = 3;
  }
  if (seqs > 0) p1.total_seqs = seqs;
  if (live > 0) p1.live = live;
  if (max_len > 0) p1.max_len = p2.max_len = max_len;
  if (ckpt > 0) p1.ckpt_every = p2.ckpt_every = ckpt;
  if (sample >= 0) p1.attn_sample = p2.attn_sample = sample;
  if (seed) {
    p1.seed = seed;
    p2.seed = seed + 1;
  }
  std::printf("kvtile paged-cache soak%s (seed %llu)\n", small ? " --small" : "", static_cast<unsigned long long>(p1.seed));
  const auto t0 = std::chrono::steady_clock::now();
  counters total;
  auto add = [&](const counters& c) {
    total.tokens_appended += c.tokens_appended;
    total.prefill_chunks += c.prefill_chunks;
    total.seqs_started += c.seqs_started;
    total.seqs_finished += c.seqs_finished;
    total.pages_recycled += c.pages_recycled;
    total.records_compared += c.records_compared;
    total.attn_rows += c.attn_rows;
  };
  using namespace kvtile::presets;
  if (only != 2) {
    auto* s = new soak<k4v2_g128<128>, half_t>(p1);
    add(s->run());
    delete s;
  }
  if (only != 1) {
    auto* s = new soak<k4v2_g64<128, kvtile::fp16_scales>, bfloat16_t>(p2);
    add(s->run());
    delete s;
  }
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("TOTAL %.1f s: tokens appended %ld, prefill chunks %ld, sequences started %ld / finished %ld, "
              "pages recycled %ld, records compared %ld, attention checks %ld rows\n",
              sec, total.tokens_appended, total.prefill_chunks, total.seqs_started, total.seqs_finished,
              total.pages_recycled, total.records_compared, total.attn_rows);
  std::printf("%ld passed, %ld failed\n", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}
