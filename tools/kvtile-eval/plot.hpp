// tools/kvtile-eval/plot.hpp: the Pareto plot (attention error and KL versus
// bits per element), drawn by gnuplot.
#pragma once

#include <cctype>
#include <string>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "ranking.hpp"
#include "report.hpp"
#include "results.hpp"

namespace kvtile_eval {

// The gnuplot binary: $KVTILE_EVAL_GNUPLOT if set, else "gnuplot".
inline std::string gnuplot_binary() {
  const char* e = std::getenv("KVTILE_EVAL_GNUPLOT");
  return e && *e ? e : "gnuplot";
}

namespace detail {
inline std::string shell_quote(const std::string& s) {
  std::string r = "'";
  for (char c : s) r += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return r + "'";
}
inline std::string gp_quote(const std::string& s) {  // gnuplot single-quoted string
  std::string r = "'";
  for (char c : s) r += c == '\'' ? std::string("''") : std::string(1, c);
  return r + "'";
}
inline bool ends_with(const std::string& s, const std::string& e) {
  return s.size() >= e.size() && s.compare(s.size() - e.size(), e.size(), e) == 0;
}
}  // namespace detail

enum class plot_status { written, no_gnuplot, failed };

// The plot's format comes from its file name: .png (pngcairo) or .svg.
inline bool plot_extension_ok(const std::string& path) {
  auto ends = [&](const char* e) {
    const std::size_t n = std::char_traits<char>::length(e);
    if (path.size() <= n) return false;
    for (std::size_t i = 0; i < n; ++i)
      if (std::tolower(static_cast<unsigned char>(path[path.size() - n + i])) != e[i]) return false;
    return true;
  };
  return ends(".png") || ends(".svg");
}

// Writes the Pareto plot (PNG with pngcairo, or SVG by extension). Returns
// no_gnuplot (with a message) when gnuplot is missing: the caller warns and
// goes on.
inline plot_status write_plot(const eval_result& r, const ranking& k, const std::string& path, std::string& msg) {
  namespace fs = std::filesystem;
  const std::string gp = gnuplot_binary();
  if (std::system(("command -v " + detail::shell_quote(gp) + " >/dev/null 2>&1").c_str()) != 0) {
    msg = "gnuplot not found ('" + gp + "'); plot " + path + " skipped (install gnuplot-nox)";
    return plot_status::no_gnuplot;
  }
  const bool svg = detail::ends_with(path, ".svg") || detail::ends_with(path, ".SVG");
  std::error_code ec;
  fs::path dir = fs::temp_directory_path(ec);
  if (ec) dir = ".";
  for (int i = 0;; ++i) {
    fs::path d = dir / ("kvtile-eval-plot-" + std::to_string(std::rand()) + "-" + std::to_string(i));
    if (fs::create_directory(d, ec)) {
      dir = d;
      break;
    }
    if (i > 100) {
      msg = "cannot create a temporary directory for the plot";
      return plot_status::failed;
    }
  }
  const fs::path data = dir / "points.dat", front = dir / "front.dat", script = dir / "plot.gp", log = dir / "log.txt";
  struct group {
    std::string title;
    int pt;
    std::string color;
    std::vector<std::size_t> idx;
  };
  std::vector<group> groups = {{"KVarN, fp8 scales", 7, "#1f77b4", {}},
                               {"KVarN, fp16 scales", 5, "#2ca02c", {}},
                               {"KIVI", 9, "#d62728", {}},
                               {"rotate+RTN", 11, "#ff7f0e", {}},
                               {"per-token RTN", 13, "#7f7f7f", {}},
                               {"KVarN, kvtile 0.1 rounding (fp16 scales)", 4, "#9467bd", {}}};
  for (std::size_t i = 0; i < r.methods.size(); ++i) {
    const auto& m = r.methods[i];
    if (!m.ok) continue;
    int g = m.spec.fam == family::kvarn ? (m.spec.pack == kvtile::packing::fp8_scales ? 0 : 1)
            : m.spec.fam == family::kivi ? 2
            : m.spec.fam == family::rotate_rtn ? 3
            : m.spec.fam == family::token_rtn  ? 4
                                               : 5;
    groups[g].idx.push_back(i);
  }
  {
    // Labels (fp8 presets) of points at close bits (k4v2_g128 3.25 and
    // k4v2_g64 3.38) would overlap: of such a pair (within 0.5 bits), the
    // label of the higher point goes above it and the other's below, per
    // panel; a lone point's label goes above. Columns 5 and 6 hold each
    // label's y on the two panels (log scale: a factor).
    auto label_factors = [&](auto y) {
      std::vector<double> f(r.methods.size(), 1.4);
      std::vector<std::size_t> by_bits = groups[0].idx;
      std::sort(by_bits.begin(), by_bits.end(),
                [&](std::size_t a, std::size_t b) { return r.methods[a].bits < r.methods[b].bits; });
      for (std::size_t n = 0; n + 1 < by_bits.size(); ++n) {
        const std::size_t a = by_bits[n], b = by_bits[n + 1];
        if (r.methods[b].bits - r.methods[a].bits > 0.5) continue;
        const bool a_high = y(r.methods[a]) >= y(r.methods[b]);
        f[a] = a_high ? 1.4 : 1.0 / 1.4;
        f[b] = a_high ? 1.0 / 1.4 : 1.4;
        ++n;  // a pair
      }
      return f;
    };
    const std::vector<double> err_factor =
        label_factors([](const method_result& m) { return std::max(m.all.attn.rel_err_mean, 1e-12); });
    const std::vector<double> kl_factor =
        label_factors([](const method_result& m) { return std::max(m.all.attn.kl_mean, 1e-16); });
    std::ofstream f(data);
    int block = 0;
    for (auto& g : groups) {
      if (g.idx.empty()) continue;
      f << "# " << g.title << "\n";
      for (std::size_t i : g.idx) {
        const auto& m = r.methods[i];
        std::string label = m.spec.fam == family::kvarn ? m.spec.config() : m.spec.name();
        if (m.spec.fam == family::kvarn && m.spec.iterations != preset_iterations) label += " it" + std::to_string(m.spec.iterations);
        if (m.spec.fam != family::kvarn) label = label.substr(0, label.find('/'));
        const double e = std::max(m.all.attn.rel_err_mean, 1e-12), kl = std::max(m.all.attn.kl_mean, 1e-16);
        f << detail::fmt("%.6g", m.bits) << " " << detail::fmt("%.6g", e) << " " << detail::fmt("%.6g", kl) << " \""
          << label << "\" " << detail::fmt("%.6g", e * err_factor[i]) << " "
          << detail::fmt("%.6g", kl * kl_factor[i]) << "\n";
      }
      f << "\n\n";
      g.pt = g.pt * 1000 + block++;  // remember the block index
    }
    std::ofstream ff(front);
    std::vector<std::size_t> fr;
    for (std::size_t i = 0; i < r.methods.size(); ++i)
      if (r.methods[i].ok && k.pareto[i]) fr.push_back(i);
    std::sort(fr.begin(), fr.end(), [&](std::size_t a, std::size_t b) { return r.methods[a].bits < r.methods[b].bits; });
    for (std::size_t i : fr)
      ff << detail::fmt("%.6g", r.methods[i].bits) << " " << detail::fmt("%.6g", std::max(r.methods[i].all.attn.rel_err_mean, 1e-12))
         << "\n";
  }
  auto plot_cmd = [&](int col, bool with_front) {
    std::string c = "plot ";
    bool first = true;
    for (const auto& g : groups) {
      if (g.idx.empty()) continue;
      const int pt = g.pt / 1000, block = g.pt % 1000;
      c += std::string(first ? "" : ", \\\n     ") + detail::gp_quote(data.string()) + " index " + std::to_string(block) +
           " using 1:" + std::to_string(col) + " with points pt " + std::to_string(pt) + " ps 1.6 lc rgb '" + g.color +
           "' title '" + g.title + "'";
      if (&g == &groups[0])  // label the fp8 presets only (the others sit at the same bits, +0.12 for fp16)
        c += ", \\\n     " + detail::gp_quote(data.string()) + " index " + std::to_string(block) + " using 1:" +
             std::to_string(col + 3) + ":4 with labels offset 0.8,0 left font ',9' tc rgb '" + g.color + "' notitle";
      first = false;
    }
    if (with_front)
      c += ", \\\n     " + detail::gp_quote(front.string()) + " using 1:2 with lines dt 2 lc rgb '#444444' title 'Pareto front'";
    return c + "\n";
  };
  {
    std::ofstream s(script);
    if (svg)
      s << "set terminal svg size 1400,620 dynamic font 'Helvetica,11' background rgb 'white'\n";
    else
      s << "set terminal pngcairo size 1400,620 font 'DejaVu Sans,10'\n";
    s << "set termoption noenhanced\n";
    s << "set output " << detail::gp_quote(path) << "\n";
    std::string title = "kvtile-eval: " + r.description;
    s << "set multiplot layout 1,2 title " << detail::gp_quote(title) << " noenhanced\n";
    s << "set grid\nset logscale y\nset format y '%g'\nset key top right box opaque noenhanced\n";
    s << "set xlabel 'bits per element (K and V, all metadata)'\n";
    s << "set xrange [*:*]\nset offsets 0.2, 1.2, 0, 0\n";
    s << "set ylabel 'attention output relative error (mean)'\n";
    s << plot_cmd(2, true);
    s << "set ylabel 'softmax KL divergence (mean)'\n";
    s << plot_cmd(3, false);
    s << "unset multiplot\nset output\n";
  }
  const std::string cmd =
      detail::shell_quote(gp) + " " + detail::shell_quote(script.string()) + " >" + detail::shell_quote(log.string()) + " 2>&1";
  const int rc = std::system(cmd.c_str());
  std::string gplog;
  {
    std::ifstream lf(log);
    std::stringstream ss;
    ss << lf.rdbuf();
    gplog = ss.str();
  }
  fs::remove_all(dir, ec);
  if (rc != 0 || !fs::exists(path, ec) || fs::file_size(path, ec) == 0) {
    msg = "gnuplot failed to write " + path + (gplog.empty() ? "" : ": " + gplog.substr(0, 400));
    return plot_status::failed;
  }
  return plot_status::written;
}

}  // namespace kvtile_eval
