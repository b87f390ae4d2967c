// tests/device/paged_cache.cu: the paged kernels (prefill, append, decode to
// fp16) against a host model of the paged cache.
//
// The model appends tokens ONE BY ONE (host_rotate_to_half into the rotated
// fp16 tail; a tile that completes is encoded on the host with
// paged_record_codec<Codec>, or copied to the sink), so it also checks that
// prefill, chunked prefill and append give the same records. Scenario per
// codec: prefill of ragged lengths (0, 1, G-1, G, G+1, ...), G + 10 append
// steps for every sequence (with a few NaN/Inf tokens), then a chunked prefill
// that starts mid-tile. After each phase the whole device state (every page,
// tails, sinks, flags) must equal the model byte for byte; pages sit at a
// random permutation of the page pool, and a second run with another
// permutation must give the same per-(sequence, tile) records. Finally every
// used page is decoded on the device (rotated and original frames) and
// compared bit for bit with the host decode (also with page ids out of range,
// which must be skipped). Half of the append steps replay one captured CUDA
// graph, and so do chunked prefills and page dequantization (new page ids
// per replay). Rotations covered: hadamard, randomized_hadamard, identity (kivi);
// one config has tokens up to the fp16 limit (saturated rotations, decoded
// values clamped to +-65504).
// Exit 0 pass, 1 fail, 77 no device. --quick: small sizes (compute-sanitizer).
// ctest-sanitize: run --quick
#include "gpu_codec_common.cuh"

namespace {

using kvtile::half_t;
using kvtile::device::paged_record_codec;
bool g_quick = false;
long g_fail = 0;

void expect(bool c, const char* what, const char* cfg) {
  if (!c) {
    std::printf("  FAIL [%s]: %s\n", cfg, what);
    ++g_fail;
  }
}

template <class Codec, class T>
struct model {
  using PC = paged_record_codec<Codec>;
  static constexpr int D = Codec::D, G = Codec::G;
  static constexpr std::size_t RB = Codec::record_bytes;
  int S, H, maxp, npages;
  bool sink;
  std::vector<unsigned char> pages;
  std::vector<std::int32_t> table, lens, flags;
  std::vector<half_t> tk, tv, sk, sv;

  model(int s, int h, int mp, bool sink_on, std::uint64_t seed)
      : S(s), H(h), maxp(mp), npages(s * mp + 7), sink(sink_on), pages(static_cast<std::size_t>(npages) * h * RB, 0xAB),
        table(static_cast<std::size_t>(s) * mp), lens(s, 0), flags(s, 0),
        tk(static_cast<std::size_t>(s) * h * G * D, half_t::from_bits(0)), tv(tk), sk(tk), sv(tk) {
    std::vector<std::int32_t> perm(npages);
    for (int i = 0; i < npages; ++i) perm[i] = i;
    std::mt19937_64 rng(seed);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (std::size_t i = 0; i < table.size(); ++i) table[i] = perm[i];
  }
  std::size_t off(int s, int h) const { return (static_cast<std::size_t>(s) * H + h) * G * D; }
  // token k/v: [H][D]
  void append(int s, const T* k, const T* v) {
    const int pos = lens[s];
    for (int h = 0; h < H; ++h) {
      flags[s] |= kvtile::device::host_rotate_to_half<typename Codec::rotation, D>(k + h * D, &tk[off(s, h) + (pos % G) * D]);
      flags[s] |= kvtile::device::host_rotate_to_half<typename Codec::rotation, D>(v + h * D, &tv[off(s, h) + (pos % G) * D]);
    }
    lens[s] = pos + 1;
    if ((pos + 1) % G != 0) return;
    const int tile = pos / G;
    for (int h = 0; h < H; ++h) {
      if (sink && tile == 0) {
        std::copy(tk.begin() + off(s, h), tk.begin() + off(s, h) + G * D, sk.begin() + off(s, h));
        std::copy(tv.begin() + off(s, h), tv.begin() + off(s, h) + G * D, sv.begin() + off(s, h));
        continue;
      }
      const int page = table[static_cast<std::size_t>(s) * maxp + tile];
      const kvtile::status st =
          PC::encode(&tk[off(s, h)], D, &tv[off(s, h)], D, pages.data() + (static_cast<std::size_t>(page) * H + h) * RB);
      if (!kvtile::ok(st)) flags[s] |= kvtile::device::paged_flag_encode_failed;
    }
  }
};

template <class Codec, class T>
struct device_cache {
  static constexpr int D = Codec::D, G = Codec::G;
  kvtest::dbuf<unsigned char> pages;
  kvtest::dbuf<std::int32_t> table, lens, flags;
  kvtest::dbuf<half_t> tk, tv, sk, sv;
  kvtile::paged_cache_view view{};
  explicit device_cache(const model<Codec, T>& m)
      : pages(m.pages.size()), table(m.table.size()), lens(m.S), flags(m.S), tk(m.tk.size()), tv(m.tk.size()),
        sk(m.tk.size()), sv(m.tk.size()) {
    pages.up(m.pages);
    table.up(m.table);
    lens.up(m.lens);
    flags.up(m.flags);
    tk.up(m.tk);
    tv.up(m.tv);
    sk.up(m.sk);
    sv.up(m.sv);
    view.pages = pages.p;
    view.page_table = table.p;
    view.seq_lens = lens.p;
    view.tail_k = tk.p;
    view.tail_v = tv.p;
    view.sink_k = m.sink ? sk.p : nullptr;
    view.sink_v = m.sink ? sv.p : nullptr;
    view.num_seqs = m.S;
    view.kv_heads = m.H;
    view.head_dim = D;
    view.tile_tokens = G;
    view.max_pages_per_seq = m.maxp;
    view.num_pages = m.npages;
    view.record_bytes = static_cast<std::int64_t>(Codec::record_bytes);
  }
  void compare(const model<Codec, T>& m, const char* phase, const char* cfg) {
    KVT_CUDA(cudaDeviceSynchronize());
    char buf[128];
    std::snprintf(buf, sizeof buf, "%s: pages equal the model", phase);
    expect(pages.down() == m.pages, buf, cfg);
    std::snprintf(buf, sizeof buf, "%s: tails equal the model", phase);
    auto eqh = [](const std::vector<half_t>& a, const std::vector<half_t>& b) {
      return std::memcmp(a.data(), b.data(), a.size() * 2) == 0;
    };
    // Only the live slots [0, len % G) of a tail are defined (prefill does not
    // copy the tokens of complete tiles into the tail; the model does).
    {
      std::vector<half_t> gk = tk.down(), gv = tv.down();
      bool same = true;
      for (int s = 0; s < m.S; ++s)
        for (int h = 0; h < m.H; ++h) {
          const std::size_t o = m.off(s, h), n = static_cast<std::size_t>(m.lens[s] % G) * D * 2;
          same &= std::memcmp(&gk[o], &m.tk[o], n) == 0 && std::memcmp(&gv[o], &m.tv[o], n) == 0;
        }
      expect(same, buf, cfg);
    }
    std::snprintf(buf, sizeof buf, "%s: sinks equal the model", phase);
    expect(eqh(sk.down(), m.sk) && eqh(sv.down(), m.sv), buf, cfg);
    std::snprintf(buf, sizeof buf, "%s: flags equal the model", phase);
    expect(flags.down() == m.flags, buf, cfg);
  }
};

// Token magnitude: 1 by default; the "near fp16 max" config uses 4000 (values
// up to the fp16 limit, clamped there, so rotations saturate and decoded
// values reach +-65504).
float g_token_scale = 1.0f;

template <class T>
void gen_tokens(std::mt19937_64& rng, std::vector<T>& out, bool nonfinite) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto& x : out) {
    const float f = nd(rng) * (rng() % 16 == 0 ? 40.0f : 1.0f) * g_token_scale;
    x = T(std::min(std::max(f, -65504.0f), 65504.0f));
  }
  if (nonfinite) {  // a NaN and, in every other call, an Inf of either sign
    out[rng() % out.size()] = T(NAN);
    if (rng() % 2 == 0) out[rng() % out.size()] = T(rng() % 2 ? INFINITY : -INFINITY);
  }
}

// One decode step of a replayed CUDA graph: copies step *counter's tokens and
// lengths from the per-step arrays into the fixed buffers the captured
// launch_append reads, then advances the counter (one block).
template <class T>
__global__ void next_step_kernel(int* counter, const T* all_k, const T* all_v, const std::int32_t* all_lens, T* k, T* v,
                                 std::int32_t* lens, int n, int S) {
  const int step = *counter;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    k[i] = all_k[static_cast<std::size_t>(step) * n + i];
    v[i] = all_v[static_cast<std::size_t>(step) * n + i];
  }
  for (int i = threadIdx.x; i < S; i += blockDim.x) lens[i] = all_lens[static_cast<std::size_t>(step) * S + i];
  __syncthreads();
  if (threadIdx.x == 0) *counter = step + 1;
}

template <class Codec, class T>
std::vector<unsigned char> run_scenario(const char* cfg, int S, int H, bool sink, std::uint64_t seed,
                                        std::uint64_t perm_seed, long& tiles_checked) {
  constexpr int D = Codec::D, G = Codec::G;
  const int maxp = 4 + (g_quick ? 0 : 1);
  model<Codec, T> m(S, H, maxp, sink, perm_seed);
  device_cache<Codec, T> dc(m);
  std::mt19937_64 rng(seed);
  auto prefill = [&](std::vector<int> n, const char* phase) {
    std::vector<std::int32_t> cu(S + 1, 0);
    for (int s = 0; s < S; ++s) cu[s + 1] = cu[s] + n[s];
    std::vector<T> k(static_cast<std::size_t>(cu[S]) * H * D + 1), v(k.size());
    gen_tokens(rng, k, false);
    gen_tokens(rng, v, true);
    for (int s = 0; s < S; ++s)
      for (int i = 0; i < n[s]; ++i) {
        const std::size_t o = (static_cast<std::size_t>(cu[s]) + i) * H * D;
        m.append(s, &k[o], &v[o]);
      }
    kvtest::dbuf<T> dk(k.size()), dv(v.size());
    kvtest::dbuf<std::int32_t> dcu(S + 1);
    dk.up(k);
    dv.up(v);
    dcu.up(cu);
    dc.lens.up(m.lens);
    const int mx = *std::max_element(n.begin(), n.end());
    const kvtile::status st = kvtile::device::launch_prefill<Codec, T>(dc.view, dk.p, dv.p, dcu.p, mx, dc.flags.p);
    expect(st == kvtile::status::success, "launch_prefill returns success", cfg);
    KVT_CUDA(cudaDeviceSynchronize());
    dc.compare(m, phase, cfg);
  };
  // Phase A: prefill from empty, ragged.
  std::vector<int> n(S);
  const int shapes[] = {0, 1, G - 1, G, G + 1, 2 * G + 5, 3 * G};
  for (int s = 0; s < S; ++s) n[s] = s < 7 ? shapes[s] : static_cast<int>(rng() % (5 * G / 2));
  if (g_quick) for (int s = 0; s < S; ++s) n[s] = std::min(n[s], G + 3);
  prefill(n, "prefill");
  // Phase B: appends, the first half launched directly, the second half as
  // replays of one captured CUDA graph (global capture mode, as engines use):
  // [next_step_kernel, launch_append]; every replay completes tiles of some
  // sequences.
  const int steps = g_quick ? 4 : G + 10;
  const int direct = steps / 2, replays = steps - direct;
  const std::size_t n_tok = static_cast<std::size_t>(S) * H * D;
  std::vector<T> k(n_tok), v(n_tok);
  kvtest::dbuf<T> dk(k.size()), dv(v.size());
  for (int step = 0; step < direct; ++step) {
    gen_tokens(rng, k, step == 3);
    gen_tokens(rng, v, false);
    for (int s = 0; s < S; ++s) m.append(s, &k[static_cast<std::size_t>(s) * H * D], &v[static_cast<std::size_t>(s) * H * D]);
    dk.up(k);
    dv.up(v);
    dc.lens.up(m.lens);
    const kvtile::status st = kvtile::device::launch_append<Codec, T>(dc.view, dk.p, dv.p, dc.flags.p);
    if (st != kvtile::status::success) expect(false, "launch_append returns success", cfg);
  }
  {
    std::vector<T> all_k(n_tok * replays), all_v(all_k.size());
    std::vector<std::int32_t> all_lens(static_cast<std::size_t>(S) * replays);
    for (int r = 0; r < replays; ++r) {
      gen_tokens(rng, k, r == 1);
      gen_tokens(rng, v, false);
      for (int s = 0; s < S; ++s)
        m.append(s, &k[static_cast<std::size_t>(s) * H * D], &v[static_cast<std::size_t>(s) * H * D]);
      std::copy(k.begin(), k.end(), all_k.begin() + static_cast<std::ptrdiff_t>(r * n_tok));
      std::copy(v.begin(), v.end(), all_v.begin() + static_cast<std::ptrdiff_t>(r * n_tok));
      std::copy(m.lens.begin(), m.lens.end(), all_lens.begin() + static_cast<std::ptrdiff_t>(r) * S);
    }
    kvtest::dbuf<T> dak(all_k.size()), dav(all_v.size());
    kvtest::dbuf<std::int32_t> dal(all_lens.size()), counter(1);
    dak.up(all_k);
    dav.up(all_v);
    dal.up(all_lens);
    counter.up(std::vector<std::int32_t>{0});
    KVT_CUDA(cudaDeviceSynchronize());  // legacy-stream uploads done before the non-blocking stream reads them
    cudaStream_t stream;
    KVT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    KVT_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    next_step_kernel<T><<<1, 256, 0, stream>>>(counter.p, dak.p, dav.p, dal.p, dk.p, dv.p, dc.lens.p,
                                                static_cast<int>(n_tok), S);
    const kvtile::status st = kvtile::device::launch_append<Codec, T>(dc.view, dk.p, dv.p, dc.flags.p, stream);
    const cudaError_t ce = cudaStreamEndCapture(stream, &graph);
    expect(st == kvtile::status::success && ce == cudaSuccess, "launch_append is capturable in a CUDA graph", cfg);
    if (st == kvtile::status::success && ce == cudaSuccess) {
      KVT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
      for (int r = 0; r < replays; ++r) KVT_CUDA(cudaGraphLaunch(exec, stream));
      KVT_CUDA(cudaStreamSynchronize(stream));
      KVT_CUDA(cudaGraphExecDestroy(exec));
    }
    if (graph) KVT_CUDA(cudaGraphDestroy(graph));
    (void)cudaGetLastError();
    KVT_CUDA(cudaStreamDestroy(stream));
  }
  dc.compare(m, "append (direct + CUDA graph replays)", cfg);
  // Phase C: chunked prefill starting mid-tile.
  for (int s = 0; s < S; ++s) {
    const int room = maxp * G - m.lens[s];
    n[s] = std::max(0, std::min(room, static_cast<int>(rng() % (G + 30))));
  }
  prefill(n, "chunked prefill");
  // Phase D: chunked prefill as replays of one captured CUDA graph: the graph
  // holds launch_prefill over fixed buffers (tokens, cu_seqlens, the lengths
  // in the view) with a fixed bound on the chunk; before each replay the
  // stream copies the next chunk's tokens, cu_seqlens and lengths into them.
  {
    const int bound = G / 2 + 3;
    const int replays_d = g_quick ? 2 : 3;
    kvtest::dbuf<T> gk(static_cast<std::size_t>(S) * bound * H * D + 1), gv(gk.n);
    kvtest::dbuf<std::int32_t> gcu(S + 1);
    cudaStream_t stream;
    KVT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    KVT_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    const kvtile::status st = kvtile::device::launch_prefill<Codec, T>(dc.view, gk.p, gv.p, gcu.p, bound, dc.flags.p, stream);
    const cudaError_t ce = cudaStreamEndCapture(stream, &graph);
    expect(st == kvtile::status::success && ce == cudaSuccess, "launch_prefill is capturable in a CUDA graph", cfg);
    if (st == kvtile::status::success && ce == cudaSuccess) {
      KVT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
      for (int r = 0; r < replays_d; ++r) {
        std::vector<std::int32_t> cu(S + 1, 0);
        for (int q = 0; q < S; ++q) {
          const int room = maxp * G - m.lens[q];
          cu[q + 1] = cu[q] + std::max(0, std::min(room, static_cast<int>(rng() % (bound + 1))));
        }
        std::vector<T> k(static_cast<std::size_t>(cu[S]) * H * D + 1), v(k.size());
        gen_tokens(rng, k, r == 1);
        gen_tokens(rng, v, false);
        for (int q = 0; q < S; ++q)
          for (int i = cu[q]; i < cu[q + 1]; ++i)
            m.append(q, &k[static_cast<std::size_t>(i) * H * D], &v[static_cast<std::size_t>(i) * H * D]);
        KVT_CUDA(cudaMemcpyAsync(gk.p, k.data(), k.size() * sizeof(T), cudaMemcpyHostToDevice, stream));
        KVT_CUDA(cudaMemcpyAsync(gv.p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice, stream));
        KVT_CUDA(cudaMemcpyAsync(gcu.p, cu.data(), cu.size() * 4, cudaMemcpyHostToDevice, stream));
        KVT_CUDA(cudaMemcpyAsync(dc.lens.p, m.lens.data(), m.lens.size() * 4, cudaMemcpyHostToDevice, stream));
        KVT_CUDA(cudaGraphLaunch(exec, stream));
        KVT_CUDA(cudaStreamSynchronize(stream));  // the host vectors are reused
      }
      KVT_CUDA(cudaGraphExecDestroy(exec));
    }
    if (graph) KVT_CUDA(cudaGraphDestroy(graph));
    (void)cudaGetLastError();
    KVT_CUDA(cudaStreamDestroy(stream));
    dc.compare(m, "chunked prefill (CUDA graph replays)", cfg);
  }
  // Decode every page of a complete tile (not the sink tile).
  std::vector<std::int32_t> ids;
  std::vector<int> owner;
  for (int s = 0; s < S; ++s)
    for (int t = sink ? 1 : 0; t < m.lens[s] / G; ++t) {
      ids.push_back(m.table[static_cast<std::size_t>(s) * maxp + t]);
      owner.push_back(s * 1000 + t);
    }
  std::vector<unsigned char> by_tile;  // records in (sequence, tile, head) order
  for (std::size_t i = 0; i < ids.size(); ++i)
    for (int h = 0; h < H; ++h) {
      const unsigned char* r = m.pages.data() + (static_cast<std::size_t>(ids[i]) * H + h) * Codec::record_bytes;
      by_tile.insert(by_tile.end(), r, r + Codec::record_bytes);
    }
  const int cnt = static_cast<int>(ids.size());
  if (cnt > 0) {
    kvtest::dbuf<std::int32_t> dids(cnt);
    dids.up(ids);
    const std::size_t E = static_cast<std::size_t>(cnt) * H * G * D;
    kvtest::dbuf<half_t> ok_(E), ov(E);
    for (kvtile::frame f : {kvtile::frame::rotated, kvtile::frame::original}) {
      const kvtile::status st = kvtile::device::launch_dequantize_pages<Codec>(dc.view, dids.p, cnt, ok_.p, ov.p, f);
      expect(st == kvtile::status::success, "launch_dequantize_pages returns success", cfg);
      KVT_CUDA(cudaDeviceSynchronize());
      std::vector<half_t> gk = ok_.down(), gv = ov.down();
      std::atomic<long> bad{0};
      kvtest::parallel_for(cnt * H, [&](int w) {
        const int i = w / H, h = w % H;
        const unsigned char* r = m.pages.data() + (static_cast<std::size_t>(ids[i]) * H + h) * Codec::record_bytes;
        std::vector<float> fk(G * D), fv(G * D);
        if (!kvtile::ok(paged_record_codec<Codec>::decode(r, fk.data(), D, fv.data(), D, kvtile::frame::rotated))) ++bad;
        long b = 0;
        for (int g = 0; g < G; ++g) {
          if (f == kvtile::frame::original) {
            Codec::rotation::template inverse<D>(&fk[g * D]);
            Codec::rotation::template inverse<D>(&fv[g * D]);
          }
          for (int d = 0; d < D; ++d) {
            const std::size_t o = (static_cast<std::size_t>(w) * G + g) * D + d;
            b += kvtile::detail::element_from_float<half_t>(fk[g * D + d]).bits() != gk[o].bits();
            b += kvtile::detail::element_from_float<half_t>(fv[g * D + d]).bits() != gv[o].bits();
          }
        }
        bad += b;
      });
      char buf[96];
      std::snprintf(buf, sizeof buf, "decode_pages (%s) bit-identical to host (%ld mismatches)",
                    f == kvtile::frame::rotated ? "rotated" : "original", bad.load());
      expect(bad.load() == 0, buf, cfg);
      // Outputs that are not 16-byte aligned (here: 2 bytes off) take the
      // generic kernel: same bits.
      kvtest::dbuf<half_t> mk(E + 1), mv(E + 1);
      KVT_CUDA(cudaMemset(mk.p, 0, (E + 1) * sizeof(half_t)));  // element 0 is not an output
      KVT_CUDA(cudaMemset(mv.p, 0, (E + 1) * sizeof(half_t)));
      const kvtile::status sm = kvtile::device::launch_dequantize_pages<Codec>(dc.view, dids.p, cnt, mk.p + 1, mv.p + 1, f);
      expect(sm == kvtile::status::success, "launch_dequantize_pages (misaligned outputs) returns success", cfg);
      KVT_CUDA(cudaDeviceSynchronize());
      const std::vector<half_t> hk = mk.down(), hv = mv.down();
      std::snprintf(buf, sizeof buf, "decode_pages (%s, misaligned outputs) equals the aligned result",
                    f == kvtile::frame::rotated ? "rotated" : "original");
      expect(std::memcmp(hk.data() + 1, gk.data(), E * 2) == 0 && std::memcmp(hv.data() + 1, gv.data(), E * 2) == 0,
             buf, cfg);
    }
  }
  // Page dequantization as replays of one captured CUDA graph: the graph
  // reads a fixed page-id buffer; each replay gets other ids (reversed, then
  // as listed) and must equal a direct launch with the same ids, in both
  // frames and through the generic (misaligned-output) kernel.
  if (cnt > 0) {
    kvtest::dbuf<std::int32_t> gids(cnt);
    const std::size_t E = static_cast<std::size_t>(cnt) * H * G * D;
    kvtest::dbuf<half_t> gk(E + 1), gv(E + 1), rk(E + 1), rv(E + 1);
    for (half_t* b : {gk.p, gv.p, rk.p, rv.p})  // one element of each is not an output (shift): downloaded defined
      KVT_CUDA(cudaMemset(b, 0, (E + 1) * sizeof(half_t)));
    // The memsets and copies above ran on the legacy stream, which a non-blocking
    // stream does not wait for: finish them before the first launch on it.
    KVT_CUDA(cudaDeviceSynchronize());
    std::vector<std::int32_t> rev(ids.rbegin(), ids.rend());
    cudaStream_t stream;
    KVT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    for (int variant = 0; variant < 3; ++variant) {
      const kvtile::frame f = variant == 1 ? kvtile::frame::rotated : kvtile::frame::original;
      const int shift = variant == 2 ? 1 : 0;  // 2 bytes off: the generic kernel
      cudaGraph_t graph = nullptr;
      cudaGraphExec_t exec = nullptr;
      KVT_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
      const kvtile::status st =
          kvtile::device::launch_dequantize_pages<Codec>(dc.view, gids.p, cnt, gk.p + shift, gv.p + shift, f, stream);
      const cudaError_t ce = cudaStreamEndCapture(stream, &graph);
      char buf[128];
      std::snprintf(buf, sizeof buf, "launch_dequantize_pages (variant %d) is capturable in a CUDA graph", variant);
      expect(st == kvtile::status::success && ce == cudaSuccess, buf, cfg);
      if (st == kvtile::status::success && ce == cudaSuccess) {
        KVT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
        bool same = true;
        for (const std::vector<std::int32_t>* list : {&rev, &ids}) {
          KVT_CUDA(cudaMemcpyAsync(gids.p, list->data(), cnt * 4, cudaMemcpyHostToDevice, stream));
          KVT_CUDA(cudaGraphLaunch(exec, stream));
          KVT_CUDA(cudaStreamSynchronize(stream));
          kvtest::dbuf<std::int32_t> dids(cnt);  // uploaded in stream order (not the legacy stream's)
          KVT_CUDA(cudaMemcpyAsync(dids.p, list->data(), cnt * 4, cudaMemcpyHostToDevice, stream));
          const kvtile::status sd =
              kvtile::device::launch_dequantize_pages<Codec>(dc.view, dids.p, cnt, rk.p + shift, rv.p + shift, f, stream);
          KVT_CUDA(cudaStreamSynchronize(stream));
          const std::vector<half_t> a = gk.down(), b = rk.down(), c = gv.down(), d = rv.down();
          same &= sd == kvtile::status::success && std::memcmp(a.data() + shift, b.data() + shift, E * 2) == 0 &&
                  std::memcmp(c.data() + shift, d.data() + shift, E * 2) == 0;
        }
        std::snprintf(buf, sizeof buf, "dequantize graph replays (variant %d, new page ids) equal direct launches", variant);
        expect(same, buf, cfg);
        KVT_CUDA(cudaGraphExecDestroy(exec));
      }
      if (graph) KVT_CUDA(cudaGraphDestroy(graph));
      (void)cudaGetLastError();
    }
    KVT_CUDA(cudaStreamDestroy(stream));
  }
  // Page ids outside [0, num_pages) are skipped: their outputs stay untouched.
  {
    const std::vector<std::int32_t> bad_ids = {-1, m.npages, m.table[0]};
    kvtest::dbuf<std::int32_t> dids(bad_ids.size());
    dids.up(bad_ids);
    const std::size_t per = static_cast<std::size_t>(H) * G * D;
    std::vector<half_t> poison(per * bad_ids.size(), half_t::from_bits(0x7e00));
    kvtest::dbuf<half_t> ok_(poison.size()), ov(poison.size());
    ok_.up(poison);
    ov.up(poison);
    const kvtile::status st =
        kvtile::device::launch_dequantize_pages<Codec>(dc.view, dids.p, static_cast<int>(bad_ids.size()), ok_.p, ov.p);
    expect(st == kvtile::status::success, "launch_dequantize_pages with out-of-range ids returns success", cfg);
    KVT_CUDA(cudaDeviceSynchronize());
    std::vector<half_t> gk = ok_.down(), gv = ov.down();
    bool untouched = true, written = false;
    for (std::size_t e = 0; e < 2 * per; ++e) untouched &= gk[e].bits() == 0x7e00 && gv[e].bits() == 0x7e00;
    for (std::size_t e = 2 * per; e < 3 * per; ++e) written |= gk[e].bits() != 0x7e00;
    expect(untouched && written, "decode_pages skips page ids outside [0, num_pages) and decodes the valid one", cfg);
  }
  tiles_checked += static_cast<long>(cnt) * H;
  long toks = 0;
  for (int s = 0; s < S; ++s) toks += m.lens[s];
  std::printf("%-40s seqs %d heads %d tokens %ld pages(tile x head) %ld -> %s\n", cfg, S, H, toks,
              static_cast<long>(cnt) * H, g_fail ? "FAIL so far" : "ok");
  std::fflush(stdout);
  return by_tile;
}

template <class Codec, class T>
void run_config(const char* cfg, int S, int H, bool sink, std::uint64_t seed, long& tiles) {
  auto a = run_scenario<Codec, T>(cfg, S, H, sink, seed, seed + 100, tiles);
  auto b = run_scenario<Codec, T>(cfg, S, H, sink, seed, seed + 200, tiles);
  expect(a == b, "records independent of the page permutation", cfg);
}

}  // namespace

int main(int argc, char** argv) {
  if (int r = kvtest::require_device()) return r;
  for (int i = 1; i < argc; ++i) g_quick |= !std::strcmp(argv[i], "--quick");
  using namespace kvtile::presets;
  long tiles = 0;
  const int S = g_quick ? 3 : 12, H = g_quick ? 2 : 4;
  run_config<k4v2_g128<128>, half_t>("k4v2_g128<128> f16 in, no sink", S, H, false, 1, tiles);
  run_config<k4v2_g64<64, kvtile::fp16_scales>, kvtile::bfloat16_t>("k4v2_g64<64,fp16_scales> bf16 in, sink", S, H, true, 2,
                                                                    tiles);
  if (!g_quick) {
    run_config<k2v2_g128<128>, half_t>("k2v2_g128<128> f16 in, sink", S, H, true, 3, tiles);
    run_config<k8v8_g128<256>, half_t>("k8v8_g128<256> f16 in, no sink", 8, 2, false, 4, tiles);
    using rh = kvtile::tile_codec<kvtile::tile_config<128, 64, 4, 2>, kvtile::randomized_hadamard<7>, kvtile::sinkhorn<8>,
                                  kvtile::rtn<>, kvtile::fp8_scales>;
    run_config<rh, kvtile::bfloat16_t>("randomized_hadamard k4v2_g64<128> bf16 in", 8, 3, false, 5, tiles);
    run_config<kivi<128, 32>, half_t>("kivi<128, G=32> (identity) f16 in, sink", 8, 2, true, 6, tiles);
    g_token_scale = 4000.0f;
    run_config<k4v4_g128<128>, half_t>("k4v4_g128<128> f16 in near fp16 max", 6, 2, false, 7, tiles);
    g_token_scale = 1.0f;
  }
  // Host-side validation returns statuses before launch.
  {
    kvtile::paged_cache_view v{};
    const kvtile::status st = kvtile::device::launch_append<k4v2_g128<128>, half_t>(v, nullptr, nullptr);
    expect(st == kvtile::status::null_pointer, "launch_append on an empty view returns null_pointer", "validation");
  }
  std::printf("TOTAL paged records compared after decode %ld, failures %ld -> %s\n", tiles, g_fail, g_fail ? "FAIL" : "PASS");
  return g_fail ? 1 : 0;
}
