// tools/kvtile-eval/ranking.hpp: the Pareto front and the best preset per
// error budget.
//
// The primary error metric is the mean attention-output relative error over
// the sampled queries ("attn err"); budgets mark, per error budget, the preset
// with the fewest bits per element whose attn err is within it (baselines are
// shown for comparison, not marked). The Pareto front is over all methods'
// (bits per element, attn err).
#pragma once

#include <cstddef>
#include <vector>

#include "results.hpp"

namespace kvtile_eval {

inline std::vector<double> default_budgets() { return {0.01, 0.02, 0.05, 0.10, 0.20}; }

struct ranking {
  std::vector<double> budgets;
  std::vector<int> best;     // per budget: method index or -1
  std::vector<bool> pareto;  // per method
};

inline ranking rank_methods(const eval_result& r, const std::vector<double>& budgets) {
  ranking k;
  k.budgets = budgets;
  const std::size_t n = r.methods.size();
  k.pareto.assign(n, false);
  auto err = [&](std::size_t i) { return r.methods[i].all.attn.rel_err_mean; };
  // Without sampled queries (attn.samples == 0) there is no attention error:
  // such methods are neither on the front nor best for any budget.
  auto ranked = [&](std::size_t i) { return r.methods[i].ok && r.methods[i].all.attn.samples > 0; };
  for (std::size_t i = 0; i < n; ++i) {
    if (!ranked(i)) continue;
    bool dominated = false;
    for (std::size_t j = 0; j < n && !dominated; ++j) {
      if (j == i || !ranked(j)) continue;
      const double bi = r.methods[i].bits, bj = r.methods[j].bits;
      dominated = bj <= bi && err(j) <= err(i) && (bj < bi || err(j) < err(i));
    }
    k.pareto[i] = !dominated;
  }
  // Best per budget: the kvtile preset (family kvarn) with the fewest bits
  // whose attn err is within the budget; bits within 0.5% count as equal and
  // then the lower error wins.
  for (double b : budgets) {
    int best = -1;
    for (std::size_t i = 0; i < n; ++i) {
      if (!ranked(i) || r.methods[i].spec.fam != family::kvarn || !(err(i) <= b)) continue;
      const double bi = r.methods[i].bits;
      const double bb = best < 0 ? 0.0 : r.methods[best].bits;
      if (best < 0 || bi < bb * 0.995 || (bi <= bb * 1.005 && err(i) < err(best))) best = static_cast<int>(i);
    }
    k.best.push_back(best);
  }
  return k;
}

}  // namespace kvtile_eval
