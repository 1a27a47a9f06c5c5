// gnn plot RUN [RUN...]: an HTML report of the curves in each RUN/metrics.jsonl as inline SVG (no
// scripts, no network): training loss, validation score and throughput per epoch, one line per run on
// the same axes, with integer epoch ticks. One run writes RUN/report.html; several write --out (default
// report.html in the first run's parent folder, where gnn demo keeps its runs).
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "apps/commands.h"
#include "apps/plot.h"
#include "apps/train/trainer.h"
#include "base/error.h"
#include "io/atomic_file.h"
#include "io/byte_source.h"
#include "io/json.h"

namespace gnn::cli {

namespace {

constexpr const char* kColours[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                    "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};
constexpr int kNumColours = int(sizeof kColours / sizeof kColours[0]);
// Past ten runs the colours come round again, dashed, then dotted (and so on in turn).
constexpr const char* kDashes[] = {"", "7,4", "2,3"};
constexpr const char* kDashNames[] = {"", " (dashed)", " (dotted)"};
const char* dash_of(size_t r) { return kDashes[r / kNumColours % 3]; }
// A curve draws at most this many points (every k-th epoch, and the last) and marks each only when it has
// few: a run of a million epochs makes a report of a few hundred kilobytes, not hundreds of megabytes.
constexpr size_t kMaxDrawn = 2000, kMaxMarked = 300;

// Text for HTML: a run's folder name may hold markup characters
std::string html_text(const std::string& text) {
  std::string out;
  for (char ch : text)
    out += ch == '<' ? "&lt;" : ch == '>' ? "&gt;" : ch == '&' ? "&amp;" : ch == '\'' ? "&#39;" : std::string(1, ch);
  return out;
}

// Ticks at whole epochs: a step of 1, 2, 5, 10, 20, ... so that at most about 8 fit.
double epoch_step(double span) {
  for (double base = 1;; base *= 10)
    for (double m : {1.0, 2.0, 5.0})
      if (span / (m * base) <= 8) return m * base;
}

std::string svg(const std::string& title, const std::vector<PlotSeries>& runs) {
  const double W = 560, H = 280, L = 60, R = 16, T = 28, B = 36;
  std::ostringstream o;
  o << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W << "' height='" << H
    << "' font-family='sans-serif' font-size='11'>";
  o << "<text x='" << L << "' y='16' font-size='13'>" << title << "</text>";
  bool any = false;
  double x0 = 0, x1 = 0, y0 = 0, y1 = 0;
  for (const PlotSeries& s : runs)
    for (auto [x, y] : s.points) {
      if (!any) x0 = x1 = x, y0 = y1 = y, any = true;
      x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
  if (!any) return o.str() + "<text x='" + std::to_string(int(L)) + "' y='60'>no values</text></svg>";
  x0 = std::floor(x0), x1 = std::ceil(x1);
  if (x1 == x0) x0 -= 1, x1 += 1;
  if (y1 == y0) y0 -= std::max(1e-9, std::fabs(y0) * 0.05), y1 += std::max(1e-9, std::fabs(y1) * 0.05);
  y0 = std::max(y0, -std::numeric_limits<double>::max()), y1 = std::min(y1, std::numeric_limits<double>::max());
  // (in halves: values near the double's range, 1e308 against -1e308, would make the span infinite)
  auto px = [&](double x) { return L + (x - x0) / (x1 - x0) * (W - L - R); };
  auto py = [&](double y) { return H - B - (y / 2 - y0 / 2) / (y1 / 2 - y0 / 2) * (H - T - B); };
  o << "<rect x='" << L << "' y='" << T << "' width='" << W - L - R << "' height='" << H - T - B
    << "' fill='none' stroke='#999'/>";
  char buf[64];
  for (int k = 0; k <= 4; ++k) {
    const double y = y0 * (1 - k / 4.0) + y1 * (k / 4.0);
    std::snprintf(buf, sizeof buf, "%.4g", y);
    o << "<text x='" << L - 4 << "' y='" << py(y) + 4 << "' text-anchor='end'>" << buf << "</text>";
  }
  const double step = epoch_step(x1 - x0);
  for (double x = std::ceil(x0 / step) * step; x <= x1; x += step) {
    std::snprintf(buf, sizeof buf, "%lld", (long long)std::llround(x));
    o << "<text x='" << px(x) << "' y='" << H - B + 16 << "' text-anchor='middle'>" << buf << "</text>";
    o << "<line x1='" << px(x) << "' x2='" << px(x) << "' y1='" << H - B << "' y2='" << H - B + 4
      << "' stroke='#999'/>";
  }
  o << "<text x='" << (L + W - R) / 2 << "' y='" << H - 4 << "' text-anchor='middle'>epoch</text>";
  for (size_t r = 0; r < runs.size(); ++r) {
    const char* colour = kColours[r % kNumColours];
    const auto& points = runs[r].points;
    const size_t stride = (points.size() + kMaxDrawn - 1) / kMaxDrawn;
    o << "<polyline fill='none' stroke='" << colour << "' stroke-width='2'";
    if (*dash_of(r)) o << " stroke-dasharray='" << dash_of(r) << "'";
    o << " points='";
    for (size_t i = 0; i < points.size(); i += stride) o << px(points[i].first) << "," << py(points[i].second) << " ";
    if (!points.empty() && (points.size() - 1) % stride != 0)
      o << px(points.back().first) << "," << py(points.back().second);
    o << "'/>";
    for (size_t i = 0; points.size() <= kMaxMarked && i < points.size(); ++i)
      o << "<circle cx='" << px(points[i].first) << "' cy='" << py(points[i].second) << "' r='2.5' fill='" << colour
        << "'/>";
  }
  return o.str() + "</svg>";
}

// A run's folder as a path whose last part names it: runs/a/ is runs/a, and "." or ".." the folder they
// are (absolute), so that its name and parent are the folder's own.
std::filesystem::path run_folder(const std::string& run) {
  namespace fs = std::filesystem;
  fs::path dir = fs::path(run).lexically_normal();
  if (!dir.has_filename()) dir = dir.parent_path();
  if (dir.empty() || dir.filename() == "." || dir.filename() == "..") {
    dir = fs::absolute(dir.empty() ? fs::path(".") : dir).lexically_normal();
    if (!dir.has_filename()) dir = dir.parent_path();
  }
  return dir;
}

// Each run's name in the legend: its folder's name as given, with as many of the folders above as tell it from
// the others' (a/run and b/run are drawn as a/run and b/run, not as two "run"). The same folder given twice
// (through a link too) is refused: it would be drawn twice under two names.
std::vector<std::string> legend_names(const std::vector<std::string>& runs) {
  namespace fs = std::filesystem;
  std::vector<fs::path> dirs, real;  // as given (named so), and with links resolved (one folder twice)
  for (size_t i = 0; i < runs.size(); ++i) {
    std::error_code ec;
    dirs.push_back(fs::absolute(run_folder(runs[i])).lexically_normal());
    real.push_back(fs::weakly_canonical(dirs[i], ec));
    for (size_t j = 0; j < i; ++j)
      if (real[j] == real[i]) throw UsageError("RUN " + runs[i] + ": the same folder as " + runs[j] + ", given twice");
  }
  // (the last `depth` parts of each path; the paths differ, so some depth tells every two apart)
  const auto tail = [](const fs::path& p, size_t depth) {
    std::vector<fs::path> parts(p.begin(), p.end());
    fs::path out;
    for (size_t k = parts.size() - std::min(depth, parts.size()); k < parts.size(); ++k) out /= parts[k];
    return out.string();
  };
  std::vector<size_t> depth(runs.size(), 1);
  std::vector<std::string> names(runs.size());
  for (bool clash = true; clash;) {
    clash = false;
    for (size_t i = 0; i < runs.size(); ++i) names[i] = tail(dirs[i], depth[i]);
    std::vector<bool> deeper(runs.size(), false);  // (one part more a round, however many it clashes with)
    for (size_t i = 0; i < runs.size(); ++i)
      for (size_t j = i + 1; j < runs.size(); ++j)
        if (names[i] == names[j]) deeper[i] = deeper[j] = clash = true;
    for (size_t i = 0; i < runs.size(); ++i) depth[i] += deeper[i];
  }
  return names;
}

}  // namespace

PlotRun read_plot_run(const std::string& run) {
  namespace fs = std::filesystem;
  const fs::path metrics = fs::path(run) / "metrics.jsonl";
  std::error_code ec;
  GNN_CHECK(!fs::exists(run, ec) || fs::is_directory(run, ec), run,
            ": not a directory (give the folder of a gnn train run)");
  GNN_CHECK(fs::exists(metrics), metrics.string(), ": not found (not a gnn train run, or no epoch finished yet)");
  PlotRun r;
  const fs::path dir = run_folder(run);
  r.name = html_text(dir.filename().string());  // the legend is HTML
  const std::string text = read_text_file(metrics.string());
  std::istringstream in(text);
  std::string line;
  for (int64_t ln = 1; std::getline(in, line); ++ln) {
    if (line.empty()) continue;
    const std::string where = metrics.string() + " line " + std::to_string(ln);
    // A last line without its newline is one being written, or one an interrupted write cut short (train
    // drops it when it resumes): left out, and said, if it does not read whole.
    Json j;
    try {
      j = Json::parse(line, where);
    } catch (const Error&) {
      if (in.peek() != std::char_traits<char>::eof() || text.back() == '\n') throw;
      std::fprintf(stderr,
                   "gnn plot: warning: %s: its last line is cut short (being written, or a write was "
                   "interrupted); left out\n",
                   where.c_str());
      break;
    }
    GNN_CHECK(j.type() == Json::Type::Object, where, ": not a JSON object (one per epoch, as gnn train writes)");
    if (j.contains("partial_epoch")) continue;  // a --steps stop inside an epoch: not an epoch's point
    // (an epoch past --epochs' bound: 1e17 + 1 is 1e17, and the axis ticks would never reach the end)
    GNN_CHECK(j.contains("epoch") && j["epoch"].is_integer() && j["epoch"].as_int() >= 0 &&
                  j["epoch"].as_int() <= train::kMaxEpochs,
              where, ": 'epoch' is not a whole number in [0, ", train::kMaxEpochs, "]");
    const double e = double(j["epoch"].as_int());
    auto add = [&](PlotSeries& s, const char* key) {
      if (!j.contains(key) || j[key].is_null()) return;  // (NaN and infinities are written as null)
      GNN_CHECK(j[key].type() == Json::Type::Number, where, ": '", key, "' is not a number");
      s.points.push_back({e, j[key].as_number()});
    };
    add(r.loss, "train_loss"), add(r.valid, "valid_score"), add(r.speed, "configs_per_s");
    ++r.epochs;
  }
  return r;
}

std::string plot_html(const std::string& title, const std::vector<PlotRun>& runs, const std::string& note) {
  std::string html = "<!doctype html><meta charset='utf-8'><title>" + title +
                     "</title><body style='font-family:sans-serif'><h2>" + title + "</h2>";
  if (!note.empty()) html += "<p>" + note + "</p>";
  html += "<p>";
  for (size_t r = 0; r < runs.size(); ++r)
    html += std::string("<span style='color:") + kColours[r % kNumColours] + "'>&#9632; " + runs[r].name + "</span>" +
            kDashNames[r / kNumColours % 3] + " (" + std::to_string(runs[r].epochs) + " epochs) &nbsp; ";
  html += "</p>";
  std::vector<PlotSeries> loss, valid, speed;
  for (const PlotRun& r : runs) loss.push_back(r.loss), valid.push_back(r.valid), speed.push_back(r.speed);
  html += "<div>" + svg("training loss (mean over the epoch's steps)", loss) + "</div>";
  html += "<div>" + svg("validation score (tile 1 - slowdown@5, layout Kendall tau)", valid) + "</div>";
  html += "<div>" + svg("throughput (configs / s)", speed) + "</div>";
  return html + "</body>\n";
}

Command plot_command() {
  Command c;
  c.name = "plot";
  c.summary = "an HTML report of training runs: loss, validation score and throughput curves, runs on the same axes";
  c.positionals = {{"RUN", "the run directory of gnn train"}};
  c.repeat_last = true;
  c.flags = {{"out", "FILE",
              "where to write the report (default: RUN/report.html for one run, report.html in the "
              "first run's parent folder for several)"}};
  c.run = [](const Args& a) {
    namespace fs = std::filesystem;
    std::vector<PlotRun> runs;
    for (const std::string& run : a.positionals()) runs.push_back(read_plot_run(run));
    const std::vector<std::string> names = legend_names(a.positionals());
    for (size_t r = 0; r < runs.size(); ++r) runs[r].name = html_text(names[r]);
    const fs::path first = run_folder(a.positional(0));
    const std::string out = a.has("out")       ? a.str("out")
                            : runs.size() == 1 ? (first / "report.html").string()
                                               : (first.parent_path() / "report.html").string();
    std::vector<std::string> inputs;
    for (const std::string& run : a.positionals())
      for (const std::string& f : train::run_files(run)) inputs.push_back(f);
    check_output("out", out, inputs);
    write_file_atomic(out,
                      plot_html(runs.size() == 1 ? "gnn run " + html_text(a.positional(0)) : "gnn runs", runs, ""));
    std::printf("wrote %s (%zu run%s)\n", out.c_str(), runs.size(), runs.size() == 1 ? "" : "s");
    return 0;
  };
  return c;
}

}  // namespace gnn::cli
