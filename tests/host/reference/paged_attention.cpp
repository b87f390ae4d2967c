// reference/paged_attention.hpp against a direct fp64 attention written here
// in the ROTATED frame (records decoded rotated, the query rotated, the output
// rotated back): another path to the same numbers. A host cache with a sink,
// a tail, permuted slots, GQA, multi-query, a window and a soft-cap (issue 31 item 20).
#include "test_util.hpp"

#include <kvtile/paged/paged_record.hpp>
#include <kvtile/reference/paged_attention.hpp>

#include <cmath>
#include <vector>

namespace {
using kvtile::status;
using Codec = kvtile::presets::k4v2_g64<64>;
using PC = kvtile::device::paged_record_codec<Codec>;
constexpr int D = Codec::D, G = Codec::G, H = 2, S = 3, MAXP = 4, QH = 4;
constexpr std::size_t RB = Codec::record_bytes;

struct host_cache {
  std::vector<std::uint8_t> storage;
  std::vector<std::int32_t> table, lens, slots;
  std::vector<kvtile::half_t> tk, tv, sk, sv;
  kvtile::paged_cache_view view{};
};

// Sequences of the given lengths, random tokens through the paged store's
// host model (rotate to fp16, then the record codec), slots reversed.
void build(host_cache& c, const std::vector<int>& lengths, kvtest::rng& r) {
  const int slots = S + 1;
  c.storage.assign(static_cast<std::size_t>(S) * MAXP * H * RB + 16, 0);
  c.table.assign(static_cast<std::size_t>(S) * MAXP, -1);
  c.lens.assign(lengths.begin(), lengths.end());
  c.slots.resize(S);
  c.tk.assign(static_cast<std::size_t>(slots) * H * G * D + 8, kvtile::half_t(0.0f));
  c.tv = c.sk = c.sv = c.tk;
  auto* base = c.storage.data();
  while (reinterpret_cast<std::uintptr_t>(base) % 16) ++base;
  auto& v = c.view;
  v.pages = base;
  v.page_table = c.table.data();
  v.seq_lens = c.lens.data();
  v.tail_k = c.tk.data();
  v.tail_v = c.tv.data();
  v.sink_k = c.sk.data();
  v.sink_v = c.sv.data();
  v.num_seqs = S;
  v.kv_heads = H;
  v.head_dim = D;
  v.tile_tokens = G;
  v.max_pages_per_seq = MAXP;
  v.num_pages = S * MAXP;
  v.record_bytes = static_cast<std::int64_t>(RB);
  v.tail_slots = c.slots.data();
  v.num_slots = slots;
  std::vector<float> tok(D);
  std::vector<kvtile::half_t> kt(static_cast<std::size_t>(G) * D), vt(kt.size());
  for (int s = 0; s < S; ++s) {
    c.slots[s] = slots - 1 - s;
    const int len = c.lens[s], full = len / G;
    for (int i = 0; i < MAXP; ++i) c.table[static_cast<std::size_t>(s) * MAXP + i] = (s * MAXP + MAXP - 1 - i);
    for (int h = 0; h < H; ++h) {
      const std::int64_t off = v.tile_offset_of_slot(c.slots[s], h);
      for (int tile = 0; tile * G < len; ++tile) {
        const int rows = tile < full ? G : len % G;
        for (int g = 0; g < rows; ++g)
          for (int side = 0; side < 2; ++side) {
            for (auto& x : tok) x = static_cast<float>(r.normal() * (side == 0 && g % 7 == 0 ? 3.0 : 1.0));
            auto& dst = side == 0 ? kt : vt;
            REQUIRE(kvtile::device::host_rotate_to_half<Codec::rotation, D>(tok.data(), &dst[g * D]) == 0u);
          }
        if (tile < full && tile == 0) {  // the sink
          std::copy(kt.begin(), kt.end(), c.sk.begin() + off);
          std::copy(vt.begin(), vt.end(), c.sv.begin() + off);
        } else if (tile < full) {
          const std::int32_t page = c.table[static_cast<std::size_t>(s) * MAXP + tile];
          REQUIRE(PC::encode(kt.data(), D, vt.data(), D, v.record(page, h)) == status::success);
        } else {
          std::copy(kt.begin(), kt.begin() + rows * D, c.tk.begin() + off);
          std::copy(vt.begin(), vt.begin() + rows * D, c.tv.begin() + off);
        }
      }
    }
  }
}

// The test's own path: K/V of (s, h) in the rotated frame (records decoded
// rotated, sink and tail as stored).
void rotated_kv(const host_cache& c, int s, int h, std::vector<double>& K, std::vector<double>& V) {
  const auto& v = c.view;
  const int len = c.lens[s];
  K.assign(static_cast<std::size_t>(len) * D, 0.0);
  V.assign(K.size(), 0.0);
  std::vector<float> k(static_cast<std::size_t>(G) * D), vv(k.size());
  const std::int64_t off = v.tile_offset_of_slot(c.slots[s], h);
  for (int t = 0; t < len; ++t) {
    const int tile = t / G, g = t % G;
    if (tile < len / G && tile > 0) {
      if (g == 0) {
        const std::int32_t page = c.table[static_cast<std::size_t>(s) * MAXP + tile];
        REQUIRE(Codec::decode(v.record(page, h), k.data(), D, vv.data(), D, kvtile::frame::rotated) == status::success);
      }
      for (int d = 0; d < D; ++d) {
        K[static_cast<std::size_t>(t) * D + d] = k[static_cast<std::size_t>(g) * D + d];
        V[static_cast<std::size_t>(t) * D + d] = vv[static_cast<std::size_t>(g) * D + d];
      }
    } else {
      const auto& sk = tile == 0 && len >= G ? c.sk : c.tk;
      const auto& sv = tile == 0 && len >= G ? c.sv : c.tv;
      for (int d = 0; d < D; ++d) {
        K[static_cast<std::size_t>(t) * D + d] = sk[off + g * D + d].to_float();
        V[static_cast<std::size_t>(t) * D + d] = sv[off + g * D + d].to_float();
      }
    }
  }
}
}  // namespace

TEST_CASE("reference::paged_attention equals a direct fp64 attention (sink, tail, slots, GQA, multi-query, window, soft-cap)") {
  kvtest::rng r(2026);
  host_cache c;
  build(c, {G * 3 + 17, G + 1, 40}, r);  // sink + 2 records + tail; sink + 1-token tail; tail only
  const std::vector<std::int32_t> indptr = {0, 3, 4, 6};  // 3, 1 and 2 new tokens
  const int rows = indptr[S];
  std::vector<float> q(static_cast<std::size_t>(rows) * QH * D);
  for (auto& x : q) x = static_cast<float>(r.normal());
  struct variant { int window; double cap; bool multi; };
  for (const variant var : {variant{-1, 0.0, true}, variant{50, 0.0, true}, variant{-1, 5.0, false}, variant{10, 2.0, true}}) {
    CAPTURE(var.window);
    CAPTURE(var.cap);
    kvtile::reference::attention_options o;
    o.q_heads = QH;
    o.softmax_scale = 1.0 / std::sqrt(static_cast<double>(D));
    o.window_left = var.window;
    o.logit_softcap = var.cap;
    o.qo_indptr = var.multi ? indptr.data() : nullptr;
    o.max_q_tokens = var.multi ? 3 : 1;
    const int nrows = var.multi ? rows : S;
    std::vector<double> out(static_cast<std::size_t>(nrows) * QH * D), lse(static_cast<std::size_t>(nrows) * QH);
    REQUIRE(kvtile::reference::paged_attention<Codec>(c.view, q.data(), o, out.data(), lse.data()) == status::success);

    double worst = 0;
    for (int s = 0; s < S; ++s) {
      const int n = var.multi ? indptr[s + 1] - indptr[s] : 1, first = var.multi ? indptr[s] : s;
      for (int h = 0; h < H; ++h) {
        std::vector<double> K, V;
        rotated_kv(c, s, h, K, V);
        for (int i = 0; i < n; ++i)
          for (int j = 0; j < QH / H; ++j) {
            const int row = (first + i) * QH + h * (QH / H) + j;
            float qr[D];
            for (int d = 0; d < D; ++d) qr[d] = q[static_cast<std::size_t>(row) * D + d];
            Codec::rotation::forward<D>(qr);  // the query into the rotated frame
            const int end = c.lens[s] - (n - 1 - i);
            const int lo = var.window >= 0 ? std::max(0, end - 1 - var.window) : 0;
            std::vector<double> sc;
            double mx = -INFINITY;
            for (int t = lo; t < end; ++t) {
              double a = 0;
              for (int d = 0; d < D; ++d) a += static_cast<double>(qr[d]) * K[static_cast<std::size_t>(t) * D + d];
              a *= o.softmax_scale;
              if (var.cap > 0) a = var.cap * std::tanh(a / var.cap);
              sc.push_back(a);
              mx = std::max(mx, a);
            }
            double sum = 0;
            float o_rot[D] = {};
            std::vector<double> acc(D, 0.0);
            for (int t = lo; t < end; ++t) {
              const double p = std::exp(sc[static_cast<std::size_t>(t - lo)] - mx);
              sum += p;
              for (int d = 0; d < D; ++d) acc[d] += p * V[static_cast<std::size_t>(t) * D + d];
            }
            for (int d = 0; d < D; ++d) o_rot[d] = static_cast<float>(acc[d] / sum);
            Codec::rotation::inverse<D>(o_rot);  // back to the original frame
            double num = 0, den = 0;
            for (int d = 0; d < D; ++d) {
              const double e = out[static_cast<std::size_t>(row) * D + d] - o_rot[d];
              num += e * e;
              den += static_cast<double>(o_rot[d]) * o_rot[d];
            }
            worst = std::max(worst, std::sqrt(num / den));
            CHECK(lse[row] == doctest::Approx(mx + std::log(sum)).epsilon(1e-5));
          }
      }
    }
    CHECK(worst < 1e-5);  // float rounding of the rotations only
  }
}

TEST_CASE("reference::paged_attention refuses bad arguments with statuses") {
  kvtest::rng r(7);
  host_cache c;
  build(c, {G + 3, 5, 0}, r);
  std::vector<float> q(static_cast<std::size_t>(S) * QH * D, 0.5f);
  std::vector<double> out(q.size());
  kvtile::reference::attention_options o;
  o.q_heads = QH;
  o.softmax_scale = 0.125;
  CHECK(kvtile::reference::paged_attention<Codec>(c.view, q.data(), o, out.data()) == status::success);
  CHECK(out[static_cast<std::size_t>(2) * QH * D] == 0.0);  // an empty sequence: zero output
  CHECK(kvtile::reference::paged_attention<Codec>(c.view, static_cast<const float*>(nullptr), o, out.data()) ==
        status::null_pointer);
  o.q_heads = 3;
  CHECK(kvtile::reference::paged_attention<Codec>(c.view, q.data(), o, out.data()) == status::invalid_argument);
  o.q_heads = QH;
  o.softmax_scale = NAN;
  CHECK(kvtile::reference::paged_attention<Codec>(c.view, q.data(), o, out.data()) == status::invalid_argument);
  o.softmax_scale = 0.125;
  c.lens[0] = G * (MAXP + 1);  // more complete tiles than the page table holds
  CHECK(kvtile::reference::paged_attention<Codec>(c.view, q.data(), o, out.data()) == status::invalid_argument);
  c.lens[0] = G + 3;
  c.slots[1] = c.slots[0];  // two live sequences on one slot
  CHECK(kvtile::reference::paged_attention<Codec>(c.view, q.data(), o, out.data()) == status::invalid_argument);
}
