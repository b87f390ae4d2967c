// tests/device/speculative.cu: the draft and fork launchers
// (device/paged/speculative.cuh) against the host path of paged/speculative.hpp,
// byte for byte over the whole cache (every page, tail, sink, staging row,
// draft state, length and flag word), and that host path against appending only
// the accepted tokens (speculative_model.hpp's one-by-one reference).
//   1. Verify steps of 0..8 drafts per row, any accepted prefix (0, 1, all,
//      random), rows on permuted slots, a padding row, sink on and off, fp16
//      and bf16 tokens, G = 32 and G = 128; every other step replays one
//      captured CUDA graph of append_drafts + commit.
//   2. Bad input: commit more than appended, commit with nothing pending,
//      drafts while drafts are pending: flagged, the row unchanged.
//   3. Fork then divergent continuations, with verify steps (append_drafts,
//      multi-query decode attention, commit) as replays of one captured graph:
//      the forked cache (rows sharing pages) gives the same attention outputs,
//      bit for bit, as an unshared copy, and reads the same afterwards; the
//      shared pages are never written.
// Exit 0 pass, 1 fail, 77 no device.
// ctest-sanitize: run
#include "gpu_codec_common.cuh"

#include <kvtile/device/attention/paged_decode.cuh>
#include <kvtile/device/paged/speculative.cuh>

#include "../host/paged/speculative_model.hpp"

namespace {

using kvtile::half_t;
using spectest::host_cache;
long g_fail = 0;

void expect(bool c, const std::string& what, const char* cfg) {
  if (!c) {
    std::printf("  FAIL [%s]: %s\n", cfg, what.c_str());
    ++g_fail;
  }
}

template <class Codec>
struct dev_cache {
  kvtest::dbuf<unsigned char> pages;
  kvtest::dbuf<std::int32_t> table, lens, tslots, state;
  kvtest::dbuf<half_t> tk, tv, sk, sv, dk, dv;
  kvtile::paged_cache_view view{};
  kvtile::draft_view drafts{};
  bool sink;
  explicit dev_cache(host_cache<Codec>& h)
      : pages(h.pages.size()), table(h.table.size()), lens(h.lens.size()), tslots(h.tslots.size()),
        state(h.state.size()), tk(h.tk.size()), tv(h.tk.size()), sk(h.tk.size()), sv(h.tk.size()), dk(h.dk.size()),
        dv(h.dk.size()), sink(h.sink) {
    up(h);
    view = h.view();
    view.pages = pages.p;
    view.page_table = table.p;
    view.seq_lens = lens.p;
    view.tail_k = tk.p;
    view.tail_v = tv.p;
    view.sink_k = h.sink ? sk.p : nullptr;
    view.sink_v = h.sink ? sv.p : nullptr;
    view.tail_slots = tslots.p;
    drafts = {dk.p, dv.p, state.p};
  }
  void up(const host_cache<Codec>& h) {
    pages.up(h.pages);
    table.up(h.table);
    lens.up(h.lens);
    tslots.up(h.tslots);
    state.up(h.state);
    tk.up(h.tk);
    tv.up(h.tv);
    sk.up(h.sk);
    sv.up(h.sv);
    dk.up(h.dk);
    dv.up(h.dv);
  }
  // The device state as a host_cache (same shape as h).
  host_cache<Codec> down(const host_cache<Codec>& h) const {
    KVT_CUDA(cudaDeviceSynchronize());
    host_cache<Codec> d = h;
    d.pages = pages.down();
    d.table = table.down();
    d.lens = lens.down();
    d.state = state.down();
    d.tk = tk.down();
    d.tv = tv.down();
    d.sk = sk.down();
    d.sv = sv.down();
    d.dk = dk.down();
    d.dv = dv.down();
    return d;
  }
};

// "" when every byte of the two caches is equal, else the first buffer that differs.
template <class Codec>
std::string byte_diff(const host_cache<Codec>& a, const host_cache<Codec>& b) {
  auto eqh = [](const std::vector<half_t>& x, const std::vector<half_t>& y) {
    return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * 2) == 0;
  };
  if (a.pages != b.pages) return "pages";
  if (a.lens != b.lens) return "seq_lens";
  if (a.state != b.state) return "draft_state";
  if (!eqh(a.tk, b.tk) || !eqh(a.tv, b.tv)) return "tails";
  if (!eqh(a.sk, b.sk) || !eqh(a.sv, b.sv)) return "sinks";
  if (!eqh(a.dk, b.dk) || !eqh(a.dv, b.dv)) return "staging rows";
  return "";
}

template <class T>
std::vector<T> tokens_as(std::size_t n, std::uint64_t seed) {
  std::vector<half_t> h;
  spectest::make_tokens(h, n, seed);
  std::vector<T> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = T(h[i].to_float());
  return out;
}

// 1 and 2: verify steps, direct and as graph replays; then bad input.
template <class Codec, class T>
void run_drafts(const char* cfg, bool sink, std::uint64_t seed) {
  constexpr int D = Codec::D, G = Codec::G, K = kvtile::max_draft_tokens;
  const int S = 4, H = 2, maxp = 5;  // row 3: padding (length 0, no drafts)
  host_cache<Codec> h(S, H, maxp, sink, 2, seed), ref(S, H, maxp, sink, 2, seed);
  std::uint64_t x = seed * 77 + 5;
  auto rnd = [&](int m) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<int>((x >> 33) % static_cast<std::uint64_t>(m));
  };
  const int start[3] = {G - 3, 0, G + 5};
  for (int s = 0; s < 3; ++s)
    for (int i = 0; i < start[s]; ++i) {
      const auto k = tokens_as<T>(static_cast<std::size_t>(H) * D, seed * 1000 + s * 300 + i);
      const auto v = tokens_as<T>(static_cast<std::size_t>(H) * D, seed * 2000 + s * 300 + i);
      h.plain_append(s, k.data(), v.data());
      ref.plain_append(s, k.data(), v.data());
    }
  dev_cache<Codec> d(h);
  kvtest::dbuf<T> dk(static_cast<std::size_t>(S) * K * H * D), dv(static_cast<std::size_t>(S) * K * H * D);
  kvtest::dbuf<std::int32_t> dcu(S + 1), dacc(S), dflags(S);
  KVT_CUDA(cudaMemset(dflags.p, 0, S * 4));
  cudaStream_t stream;
  KVT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  KVT_CUDA(cudaDeviceSynchronize());
  cudaGraphExec_t exec = nullptr;
  int rejected_tile = 0, accepted_tile = 0;
  for (int step = 0; step < 24; ++step) {
    std::vector<std::int32_t> n(S, 0), a(S, -1), cu(S + 1, 0);
    for (int s = 0; s < 3; ++s) {
      n[s] = h.lens[s] + K < maxp * G ? (step < 3 ? (s == 0 ? 5 : 3) : rnd(K + 1)) : 0;
      const int pick = step < 3 ? step : rnd(4);
      a[s] = pick == 0 ? 0 : pick == 1 ? std::min(1, n[s]) : pick == 2 ? n[s] : rnd(n[s] + 1);
    }
    for (int s = 0; s < S; ++s) cu[s + 1] = cu[s] + n[s];
    const auto k = tokens_as<T>(static_cast<std::size_t>(S) * K * H * D, seed * 31 + step);
    const auto v = tokens_as<T>(static_cast<std::size_t>(S) * K * H * D, seed * 37 + step);
    std::vector<std::int32_t> hflags(S, 0);
    for (int s = 0; s < S; ++s) h.lens[s] += n[s];
    const kvtile::status hs = kvtile::host_append_drafts<Codec>(h.view(), h.drafts(), k.data(), v.data(), cu.data(),
                                                                 hflags.data());
    expect(hs == kvtile::status::success, "host_append_drafts succeeds", cfg);
    KVT_CUDA(cudaMemcpyAsync(d.lens.p, h.lens.data(), S * 4, cudaMemcpyHostToDevice, stream));
    KVT_CUDA(cudaMemcpyAsync(dcu.p, cu.data(), (S + 1) * 4, cudaMemcpyHostToDevice, stream));
    KVT_CUDA(cudaMemcpyAsync(dk.p, k.data(), k.size() * sizeof(T), cudaMemcpyHostToDevice, stream));
    KVT_CUDA(cudaMemcpyAsync(dv.p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice, stream));
    KVT_CUDA(cudaMemcpyAsync(dacc.p, a.data(), S * 4, cudaMemcpyHostToDevice, stream));
    const bool graph = step % 2 == 1;
    auto launch_both = [&](bool commit) {
      const auto s1 =
          kvtile::device::launch_append_drafts<Codec, T>(d.view, d.drafts, dk.p, dv.p, dcu.p, dflags.p, stream);
      expect(s1 == kvtile::status::success, "launch_append_drafts succeeds", cfg);
      if (!commit) return;
      const auto s2 = kvtile::device::launch_commit_drafts<Codec>(d.view, d.drafts, dacc.p, d.lens.p, dflags.p, stream);
      expect(s2 == kvtile::status::success, "launch_commit_drafts succeeds", cfg);
    };
    if (graph) {
      if (!exec) {
        cudaGraph_t g = nullptr;
        KVT_CUDA(cudaStreamSynchronize(stream));  // the uploads above are done before the capture begins
        KVT_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
        launch_both(true);
        KVT_CUDA(cudaStreamEndCapture(stream, &g));
        KVT_CUDA(cudaGraphInstantiate(&exec, g, 0));
        KVT_CUDA(cudaGraphDestroy(g));
      }
      KVT_CUDA(cudaGraphLaunch(exec, stream));
    } else {
      launch_both(false);
      KVT_CUDA(cudaStreamSynchronize(stream));
      expect(byte_diff(d.down(h), h) == "", "verify state (append_drafts) equals the host path byte for byte", cfg);
      expect(dflags.down() == hflags, "append_drafts flags equal the host path", cfg);
      const auto s2 = kvtile::device::launch_commit_drafts<Codec>(d.view, d.drafts, dacc.p, d.lens.p, dflags.p, stream);
      expect(s2 == kvtile::status::success, "launch_commit_drafts succeeds", cfg);
    }
    KVT_CUDA(cudaStreamSynchronize(stream));
    const kvtile::status hc = kvtile::host_commit_drafts<Codec>(h.view(), h.drafts(), a.data(), h.lens.data());
    expect(hc == kvtile::status::success, "host_commit_drafts succeeds", cfg);
    const std::string diff = byte_diff(d.down(h), h);
    expect(diff == "", std::string(graph ? "graph replay: " : "") + "committed state equals the host path (" + diff + ")",
           cfg);
    expect(dflags.down() == hflags, "flags equal the host path (none set)", cfg);
    for (int s = 0; s < 3; ++s) {
      const int l0 = ref.lens[s];
      for (int i = 0; i < a[s]; ++i)
        ref.plain_append(s, &k[(static_cast<std::size_t>(cu[s]) + i) * H * D], &v[(static_cast<std::size_t>(cu[s]) + i) * H * D]);
      if ((l0 + n[s]) / G > l0 / G) ++((l0 + a[s]) / G > l0 / G ? accepted_tile : rejected_tile);
      expect(spectest::readable_diff(h, s, ref, s) == "", "host path equals appending only the accepted tokens", cfg);
    }
  }
  expect(rejected_tile > 0 && accepted_tile > 0, "drafts completed tiles that were rolled back and kept", cfg);
  if (exec) KVT_CUDA(cudaGraphExecDestroy(exec));

  // 2. Bad input: flagged, nothing changed.
  {
    auto flag_of = [&](int s) { return dflags.down()[s]; };
    const std::vector<std::int32_t> none(S, -1);
    std::vector<std::int32_t> acc = none;
    acc[0] = 0;  // rollback with nothing pending
    KVT_CUDA(cudaMemset(dflags.p, 0, S * 4));
    KVT_CUDA(cudaMemcpy(dacc.p, acc.data(), S * 4, cudaMemcpyHostToDevice));
    host_cache<Codec> before = d.down(h);
    expect(kvtile::device::launch_commit_drafts<Codec>(d.view, d.drafts, dacc.p, d.lens.p, dflags.p) ==
               kvtile::status::success,
           "launch_commit_drafts (nothing pending) launches", cfg);
    expect((flag_of(0) & kvtile::device::paged_flag_bad_drafts) != 0, "commit with nothing pending is flagged", cfg);
    expect(byte_diff(d.down(h), before) == "", "commit with nothing pending changes nothing", cfg);
    expect(kvtile::host_commit_drafts<Codec>(h.view(), h.drafts(), acc.data()) == kvtile::status::invalid_argument,
           "host path: commit with nothing pending is invalid_argument", cfg);
    // Two drafts on row 0, then commit 3 of them; then drafts while pending.
    std::vector<std::int32_t> cu = {0, 2, 2, 2, 2};
    h.lens[0] += 2;
    const auto k = tokens_as<T>(static_cast<std::size_t>(2) * H * D, 9);
    KVT_CUDA(cudaMemcpy(d.lens.p, h.lens.data(), S * 4, cudaMemcpyHostToDevice));
    KVT_CUDA(cudaMemcpy(dcu.p, cu.data(), (S + 1) * 4, cudaMemcpyHostToDevice));
    KVT_CUDA(cudaMemcpy(dk.p, k.data(), k.size() * sizeof(T), cudaMemcpyHostToDevice));
    expect(kvtile::host_append_drafts<Codec>(h.view(), h.drafts(), k.data(), k.data(), cu.data()) == kvtile::status::success,
           "host_append_drafts (2 drafts) succeeds", cfg);
    (void)kvtile::device::launch_append_drafts<Codec, T>(d.view, d.drafts, dk.p, dk.p, dcu.p, dflags.p);
    expect(byte_diff(d.down(h), h) == "", "two drafts: device equals host path", cfg);
    acc[0] = 3;
    KVT_CUDA(cudaMemset(dflags.p, 0, S * 4));
    KVT_CUDA(cudaMemcpy(dacc.p, acc.data(), S * 4, cudaMemcpyHostToDevice));
    (void)kvtile::device::launch_commit_drafts<Codec>(d.view, d.drafts, dacc.p, d.lens.p, dflags.p);
    expect((flag_of(0) & kvtile::device::paged_flag_bad_drafts) != 0, "commit of more than appended is flagged", cfg);
    expect(byte_diff(d.down(h), h) == "", "commit of more than appended changes nothing", cfg);
    KVT_CUDA(cudaMemset(dflags.p, 0, S * 4));
    (void)kvtile::device::launch_append_drafts<Codec, T>(d.view, d.drafts, dk.p, dk.p, dcu.p, dflags.p);
    expect((flag_of(0) & kvtile::device::paged_flag_bad_drafts) != 0, "drafts while drafts are pending are flagged", cfg);
    expect(byte_diff(d.down(h), h) == "", "drafts while drafts are pending change nothing", cfg);
  }
  KVT_CUDA(cudaStreamDestroy(stream));
  std::printf("%-48s %s\n", cfg, g_fail ? "FAIL so far" : "ok");
  std::fflush(stdout);
}

// 3. Fork, shared pages, verify steps with attention under graph replay.
void run_fork_graph(bool sink) {
  using Codec = kvtile::presets::k4v2_g128<128>;
  constexpr int D = Codec::D, G = Codec::G, K = kvtile::max_draft_tokens;
  const char* cfg = sink ? "fork + graph replay, k4v2_g128<128>, sink" : "fork + graph replay, k4v2_g128<128>";
  const int S = 3, H = 2, QH = 4, maxp = 4, prefix = 2 * G + 50;
  host_cache<Codec> hf(S, H, maxp, sink, 0, 11), hu(S, H, maxp, sink, 0, 12);  // forked, unshared
  for (int i = 0; i < prefix; ++i) {
    const auto k = tokens_as<half_t>(static_cast<std::size_t>(H) * D, 4000 + i);
    const auto v = tokens_as<half_t>(static_cast<std::size_t>(H) * D, 9000 + i);
    hf.plain_append(0, k.data(), v.data());
    for (int r = 0; r < S; ++r) hu.plain_append(r, k.data(), v.data());
  }
  dev_cache<Codec> df(hf), du(hu);
  // Fork row 0 into rows 1 and 2 on the device and on the host.
  const std::int32_t src[2] = {hf.tslots[0], hf.tslots[0]}, dst[2] = {hf.tslots[1], hf.tslots[2]};
  expect(kvtile::validate_fork(hf.view(), src, dst, 2, hf.tslots.data(), hf.lens.data()) == kvtile::status::success,
         "validate_fork accepts free slots", cfg);
  kvtest::dbuf<std::int32_t> dsrc(2), ddst(2), fflags(2);
  dsrc.up({src[0], src[1]});
  ddst.up({dst[0], dst[1]});
  KVT_CUDA(cudaMemset(fflags.p, 0, 8));
  expect(kvtile::device::launch_fork<Codec>(df.view, df.drafts, dsrc.p, ddst.p, 2, fflags.p) == kvtile::status::success,
         "launch_fork succeeds", cfg);
  expect(kvtile::host_fork(hf.view(), hf.drafts(), src, dst, 2) == kvtile::status::success, "host_fork succeeds", cfg);
  for (int r = 1; r < S; ++r) {
    for (int t = 0; t < prefix / G; ++t) hf.table[r * maxp + t] = hf.table[t];
    hf.lens[r] = prefix;
  }
  df.table.up(hf.table);
  df.lens.up(hf.lens);
  expect(byte_diff(df.down(hf), hf) == "", "fork: device equals host path", cfg);
  expect(fflags.down() == std::vector<std::int32_t>{0, 0}, "fork: no flags", cfg);
  for (int r = 0; r < S; ++r)
    expect(spectest::readable_diff(hf, r, hu, r) == "", "forked rows read as unshared copies", cfg);
  std::vector<unsigned char> shared_before;
  const std::vector<unsigned char> pages0 = df.pages.down();
  for (int t = sink ? 1 : 0; t < prefix / G; ++t)
    shared_before.insert(shared_before.end(), pages0.begin() + hf.table[t] * H * Codec::record_bytes,
                         pages0.begin() + (hf.table[t] + 1) * H * Codec::record_bytes);

  // One graph per cache: append_drafts, multi-query decode, commit.
  struct io {
    kvtest::dbuf<half_t> k, v, q, out;
    kvtest::dbuf<std::int32_t> cu, acc;
    kvtest::dbuf<std::uint8_t> ws;
    io(int S, int H, int QH, std::size_t ws_bytes)
        : k(static_cast<std::size_t>(S) * K * H * D), v(k.n), q(static_cast<std::size_t>(S) * K * QH * D), out(q.n),
          cu(S + 1), acc(S), ws(ws_bytes) {}
  };
  const std::size_t wsb = kvtile::attention::workspace_bytes<Codec>(df.view, QH, 0, K);
  io iof(S, H, QH, wsb), iou(S, H, QH, wsb);
  cudaStream_t stream;
  KVT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  KVT_CUDA(cudaDeviceSynchronize());
  auto step_launch = [&](dev_cache<Codec>& c, io& b) {
    kvtile::attention::decode_args<half_t> a;
    a.q = b.q.p;
    a.out = b.out.p;
    a.q_heads = QH;
    a.softmax_scale = 0.0884f;
    a.workspace = b.ws.p;
    a.workspace_bytes = b.ws.n;
    a.qo_indptr = b.cu.p;
    a.max_q_tokens = K;
    bool ok = kvtile::device::launch_append_drafts<Codec, half_t>(c.view, c.drafts, b.k.p, b.v.p, b.cu.p, nullptr,
                                                                   stream) == kvtile::status::success;
    ok &= kvtile::attention::paged_decode<Codec>(c.view, a, stream) == kvtile::status::success;
    ok &= kvtile::device::launch_commit_drafts<Codec>(c.view, c.drafts, b.acc.p, c.lens.p, nullptr, stream) ==
          kvtile::status::success;
    return ok;
  };
  cudaGraphExec_t ef = nullptr, eu = nullptr;
  std::vector<std::int32_t> lens = hf.lens;
  bool outputs_equal = true, states_equal = true, launched = true;
  for (int step = 0; step < 10; ++step) {
    std::vector<std::int32_t> n(S), a(S), cu(S + 1, 0);
    for (int r = 0; r < S; ++r) {
      n[r] = 1 + (step * 3 + r * 5) % K;
      a[r] = (step + r) % (n[r] + 1);
      cu[r + 1] = cu[r] + n[r];
    }
    const auto k = tokens_as<half_t>(iof.k.n, 70 + step), v = tokens_as<half_t>(iof.k.n, 170 + step);
    const auto q = tokens_as<half_t>(iof.q.n, 270 + step);  // every row its own tokens: the rows diverge
    for (int r = 0; r < S; ++r) lens[r] += n[r];
    for (auto* pair : {&df, &du}) KVT_CUDA(cudaMemcpyAsync(pair->lens.p, lens.data(), S * 4, cudaMemcpyHostToDevice, stream));
    for (io* b : {&iof, &iou}) {
      KVT_CUDA(cudaMemcpyAsync(b->k.p, k.data(), k.size() * 2, cudaMemcpyHostToDevice, stream));
      KVT_CUDA(cudaMemcpyAsync(b->v.p, v.data(), v.size() * 2, cudaMemcpyHostToDevice, stream));
      KVT_CUDA(cudaMemcpyAsync(b->q.p, q.data(), q.size() * 2, cudaMemcpyHostToDevice, stream));
      KVT_CUDA(cudaMemcpyAsync(b->cu.p, cu.data(), (S + 1) * 4, cudaMemcpyHostToDevice, stream));
      KVT_CUDA(cudaMemcpyAsync(b->acc.p, a.data(), S * 4, cudaMemcpyHostToDevice, stream));
    }
    if (step == 0) {  // outside any capture first (the decode's one-time setup)
      launched &= step_launch(df, iof) && step_launch(du, iou);
    } else {
      for (int c = 0; c < 2; ++c) {
        cudaGraphExec_t& e = c == 0 ? ef : eu;
        if (!e) {
          cudaGraph_t g = nullptr;
          KVT_CUDA(cudaStreamSynchronize(stream));
          KVT_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
          launched &= c == 0 ? step_launch(df, iof) : step_launch(du, iou);
          KVT_CUDA(cudaStreamEndCapture(stream, &g));
          KVT_CUDA(cudaGraphInstantiate(&e, g, 0));
          KVT_CUDA(cudaGraphDestroy(g));
        }
        KVT_CUDA(cudaGraphLaunch(e, stream));
      }
    }
    KVT_CUDA(cudaStreamSynchronize(stream));
    for (int r = 0; r < S; ++r) lens[r] += a[r] - n[r];
    const std::size_t written = static_cast<std::size_t>(cu[S]) * QH * D;  // the step's query rows
    const std::vector<half_t> of = iof.out.down(written), ou = iou.out.down(written);
    outputs_equal &= std::memcmp(of.data(), ou.data(), written * 2) == 0;
    const host_cache<Codec> xf = df.down(hf), xu = du.down(hu);
    for (int r = 0; r < S; ++r) states_equal &= spectest::readable_diff(xf, r, xu, r) == "";
    states_equal &= xf.lens == lens;
  }
  expect(launched, "every launch of the verify step succeeds (direct and captured)", cfg);
  expect(outputs_equal, "attention over the forked cache equals the unshared copy, bit for bit, on every replay", cfg);
  expect(states_equal, "forked and unshared caches read the same after every committed step", cfg);
  std::vector<unsigned char> shared_after;
  const std::vector<unsigned char> pages1 = df.pages.down();
  for (int t = sink ? 1 : 0; t < prefix / G; ++t)
    shared_after.insert(shared_after.end(), pages1.begin() + hf.table[t] * H * Codec::record_bytes,
                        pages1.begin() + (hf.table[t] + 1) * H * Codec::record_bytes);
  expect(shared_after == shared_before, "shared pages are never written", cfg);
  if (ef) KVT_CUDA(cudaGraphExecDestroy(ef));
  if (eu) KVT_CUDA(cudaGraphExecDestroy(eu));
  KVT_CUDA(cudaStreamDestroy(stream));
  std::printf("%-48s %s\n", cfg, g_fail ? "FAIL so far" : "ok");
  std::fflush(stdout);
}

}  // namespace

int main() {
  if (int r = kvtest::require_device()) return r;
  using namespace kvtile::presets;
  run_drafts<kvarn<64, 32, 4, 2>, half_t>("drafts kvarn<64, G 32> fp16, no sink", false, 1);
  run_drafts<kvarn<64, 32, 4, 2>, kvtile::bfloat16_t>("drafts kvarn<64, G 32> bf16, sink", true, 2);
  run_drafts<k4v2_g128<128>, half_t>("drafts k4v2_g128<128> fp16, sink", true, 3);
  run_drafts<k4v2_g128<128>, kvtile::bfloat16_t>("drafts k4v2_g128<128> bf16, no sink", false, 4);
  run_fork_graph(false);
  run_fork_graph(true);
  // Statuses before launch.
  {
    kvtile::paged_cache_view v{};
    kvtile::draft_view dv{};
    expect(kvtile::device::launch_append_drafts<k4v2_g128<128>, half_t>(v, dv, nullptr, nullptr, nullptr) ==
               kvtile::status::null_pointer,
           "launch_append_drafts on an empty view returns null_pointer", "validation");
  }
  std::printf("speculative: failures %ld -> %s\n", g_fail, g_fail ? "FAIL" : "PASS");
  return g_fail ? 1 : 0;
}
