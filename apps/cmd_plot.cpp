// gnn plot RUN: RUN/report.html, the curves of RUN/metrics.jsonl as inline SVG (no scripts, no
// network): training loss, validation score, and throughput per epoch.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "apps/commands.h"
#include "io/atomic_file.h"
#include "io/json.h"
#include "runtime/error.h"

namespace gnn::cli {

namespace {

struct Series {
  std::string title;
  std::vector<std::pair<double, double>> points;  // (epoch, value), finite values only
};

std::string svg(const Series& s) {
  const double W = 520, H = 260, L = 60, R = 16, T = 28, B = 36;
  std::ostringstream o;
  o << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W << "' height='" << H << "' font-family='sans-serif' font-size='11'>";
  o << "<text x='" << L << "' y='16' font-size='13'>" << s.title << "</text>";
  if (s.points.empty()) return o.str() + "<text x='" + std::to_string(int(L)) + "' y='60'>no values</text></svg>";
  double x0 = s.points.front().first, x1 = x0, y0 = s.points.front().second, y1 = y0;
  for (auto [x, y] : s.points) x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
  if (x1 == x0) x0 -= 1, x1 += 1;
  if (y1 == y0) y0 -= std::max(1e-9, std::fabs(y0) * 0.05), y1 += std::max(1e-9, std::fabs(y1) * 0.05);
  auto px = [&](double x) { return L + (x - x0) / (x1 - x0) * (W - L - R); };
  auto py = [&](double y) { return H - B - (y - y0) / (y1 - y0) * (H - T - B); };
  o << "<rect x='" << L << "' y='" << T << "' width='" << W - L - R << "' height='" << H - T - B
    << "' fill='none' stroke='#999'/>";
  for (int k = 0; k <= 4; ++k) {
    const double y = y0 + (y1 - y0) * k / 4, x = x0 + (x1 - x0) * k / 4;
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.4g", y);
    o << "<text x='" << L - 4 << "' y='" << py(y) + 4 << "' text-anchor='end'>" << buf << "</text>";
    std::snprintf(buf, sizeof buf, "%.3g", x);
    o << "<text x='" << px(x) << "' y='" << H - B + 16 << "' text-anchor='middle'>" << buf << "</text>";
  }
  o << "<text x='" << (L + W - R) / 2 << "' y='" << H - 4 << "' text-anchor='middle'>epoch</text>";
  o << "<polyline fill='none' stroke='#1f77b4' stroke-width='2' points='";
  for (auto [x, y] : s.points) o << px(x) << "," << py(y) << " ";
  o << "'/>";
  for (auto [x, y] : s.points) o << "<circle cx='" << px(x) << "' cy='" << py(y) << "' r='2.5' fill='#1f77b4'/>";
  return o.str() + "</svg>";
}

}  // namespace

Command plot_command() {
  Command c;
  c.name = "plot";
  c.summary = "write RUN/report.html: loss, validation score and throughput curves of a training run";
  c.positionals = {{"RUN", "the run directory of gnn train"}};
  c.run = [](const Args& a) {
    namespace fs = std::filesystem;
    const fs::path run = a.positional(0), metrics = run / "metrics.jsonl";
    GNN_CHECK(fs::exists(metrics), metrics.string(), ": not found (not a gnn train run, or no epoch finished yet)");
    std::ifstream in(metrics);
    Series loss{"training loss (mean over the epoch's steps)", {}}, valid{"validation score (tile 1 - slowdown@5, layout Kendall tau)", {}},
        speed{"throughput (configs / s)", {}};
    std::string line;
    int64_t n = 0;
    for (int64_t ln = 1; std::getline(in, line); ++ln) {
      if (line.empty()) continue;
      const Json j = Json::parse(line, metrics.string() + " line " + std::to_string(ln));
      const double e = j["epoch"].as_number();
      auto add = [&](Series& s, const char* key) {
        if (j.contains(key) && !j[key].is_null() && std::isfinite(j[key].as_number())) s.points.push_back({e, j[key].as_number()});
      };
      add(loss, "train_loss"), add(valid, "valid_score"), add(speed, "configs_per_s");
      ++n;
    }
    std::string html = "<!doctype html><meta charset='utf-8'><title>gnn run " + run.string() +
                       "</title><body style='font-family:sans-serif'><h2>" + run.string() + "</h2><p>" +
                       std::to_string(n) + " epochs from metrics.jsonl</p>";
    for (const Series* s : {&loss, &valid, &speed}) html += "<div>" + svg(*s) + "</div>";
    html += "</body>\n";
    const std::string out = (run / "report.html").string();
    write_file_atomic(out, html);
    std::printf("wrote %s (%lld epochs)\n", out.c_str(), (long long)n);
    return 0;
  };
  return c;
}

}  // namespace gnn::cli
