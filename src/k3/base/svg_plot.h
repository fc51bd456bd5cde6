// Plots drawn as standalone SVG: line plots of named series (loss curves, learning rate) and
// heatmaps (expert load per layer over training). No plotting library is needed to view a run.
#pragma once

#include <cmath>
#include <string>
#include <vector>

namespace k3 {

struct PlotSeries {
  std::string name;
  std::vector<double> x, y;  // same length; non-finite points (and y <= 0 on a log axis) are gaps
};

struct LinePlot {
  std::string title, x_label, y_label;
  std::vector<PlotSeries> series;
  bool log_y = false;
  int width = 720, height = 440;
};

struct Heatmap {
  std::string title, x_label, y_label;
  std::vector<std::string> row_labels, column_labels;  // may be empty
  std::vector<std::vector<double>> values;             // values[row][column]; NaN cells are grey
  std::string value_label;                             // caption of the colour scale
  double scale_lo = NAN, scale_hi = NAN;  // the colour scale's ends; NaN: the values' range
  bool cell_numbers = false;              // write each cell's value in it
  int width = 720, height = 440;
};

// Timelines (pipeline schedules): one row per rank, a bar per piece of work from start to end.
// Panels stack top to bottom, each with its own time axis (a plan in unit costs above a measured
// step in seconds, say).
struct GanttBar {
  int row = 0;
  double start = 0, end = 0;
  std::string label;  // drawn inside the bar when it fits, and as its tooltip
  int colour = 0;     // index into the legend
};
struct GanttPanel {
  std::string title, time_label;
  std::vector<std::string> rows;
  std::vector<GanttBar> bars;
};
struct GanttChart {
  std::string title;
  std::vector<GanttPanel> panels;
  std::vector<std::string> legend;  // the name of each colour
  int width = 960;
};

std::string render_line_plot(const LinePlot& plot);
std::string render_heatmap(const Heatmap& map);
std::string render_gantt(const GanttChart& chart);
void write_svg(const std::string& path, const std::string& svg);  // atomic
// Text and attribute content for XML and HTML: & < > " escaped, control characters as spaces.
std::string xml_escape(const std::string& text);

// Round tick values for a linear axis: multiples of a step of 1, 2 or 5 times a power of ten,
// about TARGET of them, from one at or below LO to one at or above HI.
std::vector<double> nice_ticks(double lo, double hi, int target = 6);

// Tick values for a log axis over [LO, HI], LO > 0: the powers of ten around the range, with
// 2 and 5 times them when the range spans at most two decades.
std::vector<double> log_ticks(double lo, double hi);

}  // namespace k3
