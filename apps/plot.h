// The training-run report of gnn plot, also written by gnn demo: the curves of each run's
// metrics.jsonl (loss, validation score, throughput per epoch) as inline SVG, runs on the same axes.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace gnn::cli {

struct PlotSeries {
  std::vector<std::pair<double, double>> points;  // (epoch, value), finite values only
};

struct PlotRun {
  std::string name;  // the run directory's name, for the legend
  PlotSeries loss, valid, speed;
  int64_t epochs = 0;
};

PlotRun read_plot_run(const std::string& run);  // gnn::Error when RUN/metrics.jsonl is missing or bad
std::string plot_html(const std::string& title, const std::vector<PlotRun>& runs, const std::string& note);

}  // namespace gnn::cli
