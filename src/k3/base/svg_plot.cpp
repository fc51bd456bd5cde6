#include "k3/base/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "k3/base/format.h"
#include "k3/base/fs.h"

namespace k3 {
// Text and attribute content; control characters, which XML does not allow, become spaces.
std::string xml_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '&')
      out += "&amp;";
    else if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '"')
      out += "&quot;";
    else if (static_cast<unsigned char>(c) < 0x20)
      out += ' ';
    else
      out += c;
  }
  return out;
}

namespace {

constexpr const char* kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
// Perceptually even dark-to-bright scale (viridis), interpolated between these anchors.
constexpr uint32_t kColourScale[] = {0x440154, 0x482878, 0x3e4989, 0x31688e, 0x26828e,
                                     0x1f9e89, 0x35b779, 0x6ece58, 0xb5de2b, 0xfde725};
constexpr double kCharWidth = 7;  // average width of a 12px sans-serif character


double power_of_ten(int exponent) {
  return exponent >= 0 ? std::pow(10.0, exponent) : 1 / std::pow(10.0, -exponent);
}

// "0.25", "1500", "2.5e-5", "1e6": short, and exact for round values.
std::string number_label(double v) {
  if (v == 0) return "0";
  if (std::abs(v) >= 1e-3 && std::abs(v) < 1e5) {
    // Four significant digits, but never fewer than the integer part has (20000, not 2e+04).
    const int integer_digits = static_cast<int>(std::floor(std::log10(std::abs(v)))) + 1;
    return strprintf("%.*g", std::max(4, integer_digits), v);
  }
  std::string s = strprintf("%.3g", v);
  const size_t e = s.find('e');
  if (e == std::string::npos) return s;
  std::string mantissa = s.substr(0, e), exponent = s.substr(e + 1);
  const bool negative = exponent[0] == '-';
  exponent.erase(0, exponent.find_first_not_of("+-0"));
  return mantissa + "e" + (negative ? "-" : "") + exponent;
}

// A label for a linear-axis tick: as many decimals as the step needs.
std::string tick_label(double v, double step) {
  if (std::abs(v) < step * 1e-6) v = 0;  // rounding dust, and -0
  if (std::max(std::abs(v), step) >= 1e6 || step < 1e-4) return number_label(v);
  const int decimals = std::max(0, -static_cast<int>(std::floor(std::log10(step) + 1e-9)));
  return strprintf("%.*f", decimals, v);
}

struct Range {
  double lo = INFINITY, hi = -INFINITY;
  void add(double v) { lo = std::min(lo, v), hi = std::max(hi, v); }
  bool empty() const { return lo > hi; }
};

// Maps data values on [lo, hi] (log10 of them on a log axis) to pixels on [from, to].
struct Axis {
  double lo, hi, from, to;
  bool log = false;
  double operator()(double v) const {
    auto t = [this](double u) { return log ? std::log10(u) : u; };
    return from + (t(v) - t(lo)) / (t(hi) - t(lo)) * (to - from);
  }
};

class Svg {
 public:
  Svg(int width, int height, const std::string& title) {
    out_ = strprintf(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d "
        "%d\" "
        "font-family=\"sans-serif\" font-size=\"12\">\n",
        width, height, width, height);
    rect(0, 0, width, height, "white");
    if (!title.empty()) text(width / 2.0, 22, title, "middle", " font-size=\"15\"");
  }
  void text(double x, double y, const std::string& s, const char* anchor, const char* extra = "") {
    out_ += strprintf("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\"%s>", x, y, anchor, extra) +
            xml_escape(s) + "</text>\n";
  }
  void vertical_text(double x, double y, const std::string& s) {
    out_ +=
        strprintf("<text transform=\"translate(%.1f,%.1f) rotate(-90)\" text-anchor=\"middle\">", x,
                  y) +
        xml_escape(s) + "</text>\n";
  }
  void line(double x1, double y1, double x2, double y2, const char* stroke, double width = 1) {
    out_ += strprintf(
        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
        "stroke-width=\"%g\"/>\n",
        x1, y1, x2, y2, stroke, width);
  }
  void rect(double x, double y, double w, double h, const std::string& fill,
            const char* stroke = "none", const std::string& tooltip = "") {
    out_ += strprintf(
        "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\" stroke=\"%s\"", x,
        y, w, h, fill.c_str(), stroke);
    out_ += tooltip.empty() ? "/>\n" : "><title>" + xml_escape(tooltip) + "</title></rect>\n";
  }
  void raw(const std::string& element) { out_ += element; }
  std::string finish() { return out_ + "</svg>\n"; }

 private:
  std::string out_;
};

// The polylines of one series: runs of drawable points, split at gaps. A lone point is a dot.
void draw_series(Svg& svg, const PlotSeries& s, const Axis& x, const Axis& y, const char* colour) {
  std::string points;
  int count = 0;
  double first_x = 0, first_y = 0;
  auto flush = [&] {
    if (count == 1)
      svg.raw(strprintf("<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"%s\"/>\n", first_x,
                        first_y, colour));
    if (count > 1)
      svg.raw(
          strprintf("<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"%s\"/>\n",
                    colour, points.c_str()));
    points.clear();
    count = 0;
  };
  for (size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i) {
    if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i]) || (y.log && s.y[i] <= 0)) {
      flush();
      continue;
    }
    const double px = x(s.x[i]), py = y(s.y[i]);
    if (count++ == 0) first_x = px, first_y = py;
    points += strprintf(points.empty() ? "%.1f,%.1f" : " %.1f,%.1f", px, py);
  }
  flush();
}

void draw_legend(Svg& svg, const std::vector<PlotSeries>& series, double right, double top) {
  size_t longest = 0;
  for (const PlotSeries& s : series) longest = std::max(longest, s.name.size());
  const double width = 36 + kCharWidth * static_cast<double>(longest), left = right - width - 8;
  svg.rect(left, top + 8, width, 18.0 * static_cast<double>(series.size()) + 6, "white", "#999999");
  for (size_t i = 0; i < series.size(); ++i) {
    const double y = top + 22 + 18.0 * static_cast<double>(i);
    const char* colour = kPalette[i % std::size(kPalette)];
    svg.line(left + 6, y - 4, left + 26, y - 4, colour, 2);
    svg.text(left + 30, y, series[i].name, "start");
  }
}

std::string scale_colour(double t) {
  if (!std::isfinite(t)) return "#cccccc";
  const double position = std::clamp(t, 0.0, 1.0) * (std::size(kColourScale) - 1);
  const size_t i = std::min(static_cast<size_t>(position), std::size(kColourScale) - 2);
  const double f = position - static_cast<double>(i);
  auto channel = [&](int shift) {
    const double a = (kColourScale[i] >> shift) & 0xff, b = (kColourScale[i + 1] >> shift) & 0xff;
    return static_cast<int>(std::lround(a + f * (b - a)));
  };
  return strprintf("#%02x%02x%02x", channel(16), channel(8), channel(0));
}

// Every how many labels to show so that labels of EXTENT pixels fit in cells of CELL pixels.
size_t label_stride(double extent, double cell) {
  return std::max<size_t>(1, static_cast<size_t>(std::ceil(extent / cell)));
}

}  // namespace

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) lo = 0, hi = 1;
  if (hi < lo) std::swap(lo, hi);
  if (hi == lo) {
    const double pad = lo == 0 ? 1 : std::abs(lo) * 0.1;
    lo -= pad, hi += pad;
  }
  const double raw = (hi - lo) / std::max(target, 1);
  int exponent = static_cast<int>(std::floor(std::log10(raw)));
  const double normalized = raw / power_of_ten(exponent);
  int multiple = normalized < 1.5 ? 1 : normalized < 3 ? 2 : normalized < 7 ? 5 : 10;
  if (multiple == 10) multiple = 1, exponent += 1;
  // k * multiple * 10^exponent, computed so that round decimals come out exact (0.3, not
  // 0.30000000000000004).
  auto tick = [&](int64_t k) {
    const double units = static_cast<double>(k * multiple);
    return exponent >= 0 ? units * power_of_ten(exponent) : units / power_of_ten(-exponent);
  };
  const double step = tick(1);
  const double first = std::floor(lo / step + 1e-9), last = std::ceil(hi / step - 1e-9);
  if (!(step > 0) || !std::isfinite(last - first) || last - first > 1000) return {lo, hi};
  std::vector<double> ticks;
  for (auto k = static_cast<int64_t>(first); k <= static_cast<int64_t>(last); ++k)
    ticks.push_back(tick(k));
  return ticks;
}

std::vector<double> log_ticks(double lo, double hi) {
  if (!(lo > 0) || !std::isfinite(hi) || hi < lo) return {1, 10};
  const int first = static_cast<int>(std::floor(std::log10(lo) + 1e-9));
  int last = std::max(first + 1, static_cast<int>(std::ceil(std::log10(hi) - 1e-9)));
  const int stride = std::max(1, (last - first + 7) / 8);  // at most about 8 labelled decades
  last = first + stride * ((last - first + stride - 1) / stride);
  const std::vector<int> multiples =
      last - first <= 2 ? std::vector<int>{1, 2, 5} : std::vector<int>{1};
  std::vector<double> ticks;
  for (int d = first; d <= last; d += stride)
    for (int m : multiples)
      if (d < last || m == 1) ticks.push_back(m * power_of_ten(d));
  return ticks;
}

std::string render_line_plot(const LinePlot& plot) {
  Svg svg(plot.width, plot.height, plot.title);
  const double left = 70, top = 36, right = plot.width - 16.0, bottom = plot.height - 46.0;
  Range xs, ys;
  for (const PlotSeries& s : plot.series)
    for (size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i)
      if (std::isfinite(s.x[i]) && std::isfinite(s.y[i]) && (!plot.log_y || s.y[i] > 0))
        xs.add(s.x[i]), ys.add(s.y[i]);
  const bool empty = xs.empty();
  if (empty) xs = {0, 1}, ys = plot.log_y ? Range{1, 10} : Range{0, 1};

  const std::vector<double> xt = nice_ticks(xs.lo, xs.hi);
  const std::vector<double> yt = plot.log_y ? log_ticks(ys.lo, ys.hi) : nice_ticks(ys.lo, ys.hi);
  const Axis x{xt.front(), xt.back(), left, right},
      y{yt.front(), yt.back(), bottom, top, plot.log_y};
  for (double t : xt) {
    svg.line(x(t), top, x(t), bottom, "#e5e5e5");
    svg.text(x(t), bottom + 16, tick_label(t, xt.size() > 1 ? xt[1] - xt[0] : 1), "middle");
  }
  for (double t : yt) {
    svg.line(left, y(t), right, y(t), "#e5e5e5");
    svg.text(left - 6, y(t) + 4,
             plot.log_y ? number_label(t) : tick_label(t, yt.size() > 1 ? yt[1] - yt[0] : 1),
             "end");
  }
  svg.rect(left, top, right - left, bottom - top, "none", "#333333");
  if (empty)
    svg.text((left + right) / 2, (top + bottom) / 2, "no data", "middle", " fill=\"#999999\"");
  for (size_t i = 0; i < plot.series.size(); ++i)
    draw_series(svg, plot.series[i], x, y, kPalette[i % std::size(kPalette)]);
  if (!plot.series.empty()) draw_legend(svg, plot.series, right, top);
  if (!plot.x_label.empty())
    svg.text((left + right) / 2, plot.height - 10.0, plot.x_label, "middle");
  if (!plot.y_label.empty()) svg.vertical_text(16, (top + bottom) / 2, plot.y_label);
  return svg.finish();
}

std::string render_heatmap(const Heatmap& map) {
  Svg svg(map.width, map.height, map.title);
  const size_t rows = map.values.size();
  size_t columns = 0, longest_row_label = 0, longest_column_label = 0;
  for (const auto& row : map.values) columns = std::max(columns, row.size());
  for (const auto& label : map.row_labels)
    longest_row_label = std::max(longest_row_label, label.size());
  for (const auto& label : map.column_labels)
    longest_column_label = std::max(longest_column_label, label.size());
  const double left = 30 + std::min(160.0, kCharWidth * static_cast<double>(longest_row_label)),
               top = 36;
  const double right = map.width - 90.0, bottom = map.height - 46.0;
  svg.rect(left, top, right - left, bottom - top, "none", "#333333");
  if (!map.x_label.empty()) svg.text((left + right) / 2, map.height - 10.0, map.x_label, "middle");
  if (!map.y_label.empty()) svg.vertical_text(14, (top + bottom) / 2, map.y_label);
  Range range;
  for (const auto& row : map.values)
    for (double v : row)
      if (std::isfinite(v)) range.add(v);
  if (rows == 0 || columns == 0 || range.empty()) {
    svg.text((left + right) / 2, (top + bottom) / 2, "no data", "middle", " fill=\"#999999\"");
    return svg.finish();
  }
  if (std::isfinite(map.scale_lo)) range.lo = map.scale_lo;
  if (std::isfinite(map.scale_hi)) range.hi = map.scale_hi;
  if (range.hi == range.lo) range.hi = range.lo + 1;

  const double cell_w = (right - left) / static_cast<double>(columns),
               cell_h = (bottom - top) / static_cast<double>(rows);
  auto label = [](const std::vector<std::string>& labels, size_t i) {
    return i < labels.size() ? labels[i] : std::to_string(i);
  };
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < columns; ++c) {
      const double v = c < map.values[r].size() ? map.values[r][c] : NAN;
      svg.rect(
          left + static_cast<double>(c) * cell_w, top + static_cast<double>(r) * cell_h, cell_w,
          cell_h, scale_colour((v - range.lo) / (range.hi - range.lo)), "none",
          label(map.row_labels, r) + ", " + label(map.column_labels, c) + ": " + number_label(v));
      // Outlined so that it reads on the dark and the light ends of the scale alike.
      if (map.cell_numbers && std::isfinite(v))
        svg.text(left + (static_cast<double>(c) + 0.5) * cell_w,
                 top + (static_cast<double>(r) + 0.5) * cell_h + 4, number_label(v), "middle",
                 " stroke=\"#ffffff\" stroke-width=\"3\" paint-order=\"stroke\"");
    }
  const size_t row_stride = label_stride(14, cell_h);
  for (size_t r = 0; r < rows; r += row_stride)
    svg.text(left - 4, top + (static_cast<double>(r) + 0.5) * cell_h + 4, label(map.row_labels, r),
             "end");
  const size_t column_stride = label_stride(
      kCharWidth * static_cast<double>(std::max<size_t>(longest_column_label, 3)) + 6, cell_w);
  for (size_t c = 0; c < columns; c += column_stride)
    svg.text(left + (static_cast<double>(c) + 0.5) * cell_w, bottom + 16,
             label(map.column_labels, c), "middle");

  // The colour scale: a vertical gradient, minimum at the bottom.
  std::string gradient = "<defs><linearGradient id=\"scale\" x1=\"0\" y1=\"1\" x2=\"0\" y2=\"0\">";
  for (size_t i = 0; i < std::size(kColourScale); ++i)
    gradient += strprintf("<stop offset=\"%.3f\" stop-color=\"#%06x\"/>",
                          static_cast<double>(i) / (std::size(kColourScale) - 1), kColourScale[i]);
  svg.raw(gradient + "</linearGradient></defs>\n");
  const double bar_left = right + 14;
  svg.rect(bar_left, top, 14, bottom - top, "url(#scale)", "#333333");
  svg.text(bar_left + 18, top + 10, number_label(range.hi), "start");
  svg.text(bar_left + 18, bottom, number_label(range.lo), "start");
  if (!map.value_label.empty())
    svg.vertical_text(map.width - 8.0, (top + bottom) / 2, map.value_label);
  return svg.finish();
}

std::string render_gantt(const GanttChart& chart) {
  constexpr double kRow = 24, kPanelTop = 30, kPanelBottom = 44, kTitle = 36;
  double height = kTitle + 28;  // the legend's line at the bottom
  for (const GanttPanel& p : chart.panels)
    height += kPanelTop + kRow * static_cast<double>(p.rows.size()) + kPanelBottom;
  Svg svg(chart.width, static_cast<int>(height), chart.title);
  const double left = 70, right = chart.width - 16.0;
  double top = kTitle;
  for (const GanttPanel& p : chart.panels) {
    svg.text(left, top + 18, p.title, "start", " font-weight=\"bold\"");
    const double rows_top = top + kPanelTop;
    const double bottom = rows_top + kRow * static_cast<double>(p.rows.size());
    Range span;
    for (const GanttBar& b : p.bars) span.add(b.start), span.add(b.end);
    if (span.empty() || span.hi <= span.lo) span = {0, 1};
    const std::vector<double> ticks = nice_ticks(span.lo, span.hi);
    const Axis x{ticks.front(), ticks.back(), left, right};
    for (double t : ticks) {
      svg.line(x(t), rows_top, x(t), bottom, "#e5e5e5");
      svg.text(x(t), bottom + 16, tick_label(t, ticks.size() > 1 ? ticks[1] - ticks[0] : 1),
               "middle");
    }
    for (size_t r = 0; r < p.rows.size(); ++r)
      svg.text(left - 6, rows_top + (static_cast<double>(r) + 0.5) * kRow + 4, p.rows[r], "end");
    for (const GanttBar& b : p.bars) {
      const double x0 = x(b.start), w = std::max(0.5, x(b.end) - x0);
      const double y0 = rows_top + static_cast<double>(b.row) * kRow + 2;
      svg.rect(x0, y0, w, kRow - 4, kPalette[static_cast<size_t>(b.colour) % std::size(kPalette)],
               "white", b.label);
      if (kCharWidth * static_cast<double>(b.label.size()) + 2 < w)
        svg.text(x0 + w / 2, y0 + kRow / 2 + 2, b.label, "middle",
                 " fill=\"white\" font-size=\"10\"");
    }
    svg.rect(left, rows_top, right - left, bottom - rows_top, "none", "#333333");
    if (!p.time_label.empty()) svg.text((left + right) / 2, bottom + 32, p.time_label, "middle");
    top = bottom + kPanelBottom;
  }
  double lx = left;
  for (size_t i = 0; i < chart.legend.size(); ++i) {
    svg.rect(lx, top + 6, 12, 12, kPalette[i % std::size(kPalette)]);
    svg.text(lx + 16, top + 16, chart.legend[i], "start");
    lx += 28 + kCharWidth * static_cast<double>(chart.legend[i].size());
  }
  return svg.finish();
}

void write_svg(const std::string& path, const std::string& svg) { write_file_atomic(path, svg); }

}  // namespace k3
