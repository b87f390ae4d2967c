// device/attention/decode_args.hpp: the decode options' rules
// (check_decode_options), which every layer reports: each broken rule gives
// its status, the argument's name and value, in the documented order.
#include <kvtile/device/attention/decode_args.hpp>

#include <cmath>
#include <limits>
#include <string>

#include "test_util.hpp"

namespace {
using kvtile::status;
using kvtile::attention::arg_error;
using kvtile::attention::check_decode_options;

struct opts {
  int q_heads = 4, max_q = 1;
  bool indptr = false;
  int window = -1;
  float cap = 0.0f;
  int splits = 0;
  bool need_io = true;
  float scale = 0.125f;
  arg_error check() const { return check_decode_options(q_heads, max_q, indptr, window, cap, splits, need_io, scale); }
};
}  // namespace

TEST_CASE("decode options: the defaults and the edges of every range pass") {
  CHECK_FALSE(opts{}.check());
  opts o;
  o.max_q = kvtile::attention::max_q_tokens;
  o.indptr = true;
  o.window = 0;
  o.cap = 30.0f;
  o.splits = 4096;
  CHECK_FALSE(o.check());
  o.need_io = false;
  o.indptr = false;  // a workspace query reads max_q_tokens without qo_indptr
  o.scale = -1.0f;   // and no softmax_scale
  CHECK_FALSE(o.check());
}

TEST_CASE("decode options: each broken rule names its argument and value") {
  struct bad {
    opts o;
    const char* name;
    double value;
  };
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  auto with = [](auto f) {
    opts o;
    f(o);
    return o;
  };
  const bad cases[] = {
      {with([](opts& o) { o.q_heads = 0; }), "q_heads", 0},
      {with([](opts& o) { o.max_q = 0; }), "max_q_tokens", 0},
      {with([](opts& o) { o.max_q = 9, o.indptr = true; }), "max_q_tokens", 9},
      {with([](opts& o) { o.window = -2; }), "window_left", -2},
      {with([](opts& o) { o.cap = -3.0f; }), "logit_softcap", -3},
      {with([=](opts& o) { o.cap = inf; }), "logit_softcap", inf},
      {with([](opts& o) { o.splits = -1; }), "num_splits", -1},
      {with([](opts& o) { o.splits = 4097; }), "num_splits", 4097},
      {with([](opts& o) { o.max_q = 2; }), "max_q_tokens", 2},  // > 1 without qo_indptr
      {with([](opts& o) { o.scale = 0.0f; }), "softmax_scale", 0},
      {with([=](opts& o) { o.scale = inf; }), "softmax_scale", inf},
  };
  for (const bad& b : cases) {
    const arg_error e = b.o.check();
    CAPTURE(b.name);
    CHECK(e.code == status::invalid_argument);
    CHECK(std::string(e.name) == b.name);
    CHECK(e.value == b.value);
    CHECK(std::string(e.rule).size() > 0);
  }
  opts o;
  o.cap = nan;
  CHECK(std::string(o.check().name) == "logit_softcap");
  o = opts{};
  o.scale = nan;
  CHECK(std::string(o.check().name) == "softmax_scale");
  // the order: the first broken rule is reported
  o = opts{};
  o.q_heads = -1;
  o.window = -5;
  CHECK(std::string(o.check().name) == "q_heads");
  // the pairing and the scale are not checked by a workspace query
  o = opts{};
  o.max_q = 3;
  o.scale = nan;
  o.need_io = false;
  CHECK_FALSE(o.check());
  // the host reference's doubles: finite in double but not in float is rejected alike
  CHECK(check_decode_options(4, 1, false, -1, 0.0, 0, true, 1e300).code == status::invalid_argument);
}

TEST_CASE("decode options: a plan's host query offsets") {
  using kvtile::attention::check_host_qo_indptr;
  const std::int32_t off[4] = {0, 3, 3, 11};  // counts 3, 0, 8
  CHECK_FALSE(check_host_qo_indptr(nullptr, 3, 8, false));  // none: every sequence at max_q_tokens
  CHECK_FALSE(check_host_qo_indptr(off, 3, 8, true));
  arg_error e = check_host_qo_indptr(off, 3, 8, false);
  CHECK(e.code == status::invalid_argument);
  CHECK(std::string(e.name) == "host_qo_indptr");
  e = check_host_qo_indptr(off, 3, 7, true);
  CHECK(e.code == status::invalid_argument);
  CHECK(e.value == 8);
  const std::int32_t down[3] = {0, 5, 4};  // a count of -1
  e = check_host_qo_indptr(down, 2, 8, true);
  CHECK(e.code == status::invalid_argument);
  CHECK(e.value == -1);
  const std::int32_t wide[2] = {-2147483647 - 1, 2147483647};  // the difference needs 64 bits
  CHECK(check_host_qo_indptr(wide, 1, 8, true).code == status::invalid_argument);
}
