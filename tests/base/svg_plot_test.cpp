#include "k3/base/svg_plot.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <regex>
#include <vector>

#include "k3/base/fs.h"

namespace k3 {
namespace {

// True when every tag is closed in order, the root is <svg>, attribute quotes pair up and every
// '&' starts an entity.
::testing::AssertionResult well_formed(const std::string& svg) {
  std::vector<std::string> open;
  size_t pos = 0;
  bool saw_root = false;
  while ((pos = svg.find('<', pos)) != std::string::npos) {
    const size_t end = svg.find('>', pos);
    if (end == std::string::npos)
      return ::testing::AssertionFailure() << "unterminated tag at " << pos;
    const std::string tag = svg.substr(pos + 1, end - pos - 1);
    pos = end + 1;
    if (std::count(tag.begin(), tag.end(), '"') % 2 != 0)
      return ::testing::AssertionFailure() << "unbalanced quotes in <" << tag << ">";
    if (tag[0] == '/') {
      if (open.empty() || open.back() != tag.substr(1))
        return ::testing::AssertionFailure() << "unexpected </" << tag.substr(1) << ">";
      open.pop_back();
      continue;
    }
    const std::string name = tag.substr(0, tag.find_first_of(" /"));
    if (open.empty()) {
      if (saw_root || name != "svg")
        return ::testing::AssertionFailure() << "root element is <" << name << ">";
      saw_root = true;
    }
    if (tag.back() != '/') open.push_back(name);
  }
  if (!open.empty())
    return ::testing::AssertionFailure() << "<" << open.back() << "> is never closed";
  for (size_t amp = svg.find('&'); amp != std::string::npos; amp = svg.find('&', amp + 1))
    if (!std::regex_search(svg.begin() + static_cast<long>(amp), svg.end(),
                           std::regex("^&(amp|lt|gt|quot);")))
      return ::testing::AssertionFailure() << "bare & at " << amp;
  return saw_root ? ::testing::AssertionSuccess() : ::testing::AssertionFailure() << "no <svg>";
}

// The number of points of each polyline, in document order.
std::vector<size_t> polyline_sizes(const std::string& svg) {
  std::vector<size_t> sizes;
  const std::regex polyline("<polyline[^>]*points=\"([^\"]*)\"");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), polyline);
       it != std::sregex_iterator(); ++it) {
    const std::string points = (*it)[1];
    sizes.push_back(static_cast<size_t>(std::count(points.begin(), points.end(), ',')));
  }
  return sizes;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) ++n;
  return n;
}

// Ticks are k times a step of 1, 2 or 5 times a power of ten and cover [lo, hi].
void expect_round_ticks(const std::vector<double>& ticks, double lo, double hi) {
  ASSERT_GE(ticks.size(), 2u);
  const double step = ticks[1] - ticks[0];
  const double mantissa = step / std::pow(10.0, std::floor(std::log10(step) + 1e-9));
  EXPECT_TRUE(std::abs(mantissa - 1) < 1e-9 || std::abs(mantissa - 2) < 1e-9 ||
              std::abs(mantissa - 5) < 1e-9)
      << "step " << step;
  for (double t : ticks) EXPECT_NEAR(t / step, std::round(t / step), 1e-9) << t;
  EXPECT_LE(ticks.front(), lo);
  EXPECT_GE(ticks.back(), hi);
  EXPECT_LE(ticks.size(), 12u);
}

TEST(SvgPlot, NiceTicks) {
  expect_round_ticks(nice_ticks(0, 1), 0, 1);
  expect_round_ticks(nice_ticks(-13, 987), -13, 987);
  expect_round_ticks(nice_ticks(0.0012, 0.0047), 0.0012, 0.0047);
  expect_round_ticks(nice_ticks(3.7, 3.7), 3.7, 3.7);
  expect_round_ticks(nice_ticks(1e9, 3e9), 1e9, 3e9);
  EXPECT_EQ(nice_ticks(0, 1, 10)[3], 0.3);  // exact, not 0.30000000000000004
  EXPECT_EQ(nice_ticks(-13, 987), (std::vector<double>{-200, 0, 200, 400, 600, 800, 1000}));
  EXPECT_EQ(nice_ticks(NAN, 1).size(), 6u);
}

TEST(SvgPlot, LogTicks) {
  EXPECT_EQ(log_ticks(2, 30), (std::vector<double>{1, 2, 5, 10, 20, 50, 100}));
  EXPECT_EQ(log_ticks(0.02, 50), (std::vector<double>{0.01, 0.1, 1, 10, 100}));
  EXPECT_EQ(log_ticks(0, 1), (std::vector<double>{1, 10}));
  EXPECT_LE(log_ticks(1e-30, 1e30).size(), 9u);
}

TEST(SvgPlot, LinePlotHasOnePolylinePerSeries) {
  LinePlot plot;
  plot.title = "loss & lr <test>";
  plot.x_label = "step";
  plot.y_label = "loss";
  PlotSeries train{"train", {}, {}}, val{"val \"held out\"", {0, 50, 100}, {3.0, 2.5, 2.25}};
  for (int i = 0; i < 50; ++i) train.x.push_back(i * 2), train.y.push_back(3.0 - i * 0.02);
  plot.series = {train, val};
  const std::string svg = render_line_plot(plot);
  EXPECT_TRUE(well_formed(svg)) << svg;
  EXPECT_EQ(polyline_sizes(svg), (std::vector<size_t>{50, 3}));
  EXPECT_NE(svg.find("loss &amp; lr &lt;test&gt;"), std::string::npos);
  EXPECT_NE(svg.find(">val &quot;held out&quot;</text>"), std::string::npos);
  EXPECT_NE(svg.find(">2.2</text>"), std::string::npos) << "a round y tick";
  EXPECT_NE(svg.find(">100</text>"), std::string::npos) << "a round x tick";
}

TEST(SvgPlot, GapsAndLogAxis) {
  LinePlot plot;
  plot.log_y = true;
  PlotSeries s{"loss", {}, {}};
  for (int i = 0; i < 20; ++i) s.x.push_back(i), s.y.push_back(i == 10 ? NAN : 100.0 / (i + 1));
  s.y[15] = 0;  // not drawable on a log axis
  s.x.push_back(INFINITY), s.y.push_back(1);
  s.x.push_back(30), s.y.push_back(2);  // a lone point between gaps is a dot
  plot.series = {s};
  const std::string svg = render_line_plot(plot);
  EXPECT_TRUE(well_formed(svg)) << svg;
  EXPECT_EQ(polyline_sizes(svg), (std::vector<size_t>{10, 4, 4}));
  EXPECT_EQ(count(svg, "<circle"), 1u);
  EXPECT_NE(svg.find(">100</text>"), std::string::npos);
}

TEST(SvgPlot, EmptyAndNaNDataDoNotCrash) {
  for (const LinePlot& plot :
       {LinePlot{}, LinePlot{"t", "x", "y", {{"a", {}, {}}, {"b", {1, 2}, {NAN, NAN}}}, true},
        LinePlot{"t", "x", "y", {{"ragged", {1, 2, 3}, {1}}}}}) {
    const std::string svg = render_line_plot(plot);
    EXPECT_TRUE(well_formed(svg)) << svg;
  }
  EXPECT_NE(render_line_plot(LinePlot{}).find("no data"), std::string::npos);
}

TEST(SvgPlot, Heatmap) {
  Heatmap map;
  map.title = "expert load";
  map.x_label = "expert";
  map.y_label = "layer";
  map.value_label = "tokens";
  map.row_labels = {"layer 0", "layer 1", "layer 2"};
  map.values = {{1, 2, 3, 4}, {4, 3, NAN, 1}, {0, 0, 0, 8}};
  const std::string svg = render_heatmap(map);
  EXPECT_TRUE(well_formed(svg)) << svg;
  EXPECT_EQ(count(svg, "<title>"), 12u);
  EXPECT_EQ(count(svg, "fill=\"#cccccc\""), 1u) << "the NaN cell";
  EXPECT_NE(svg.find("<title>layer 1, 3: 1</title>"), std::string::npos);
  EXPECT_NE(svg.find(">layer 2</text>"), std::string::npos);
  EXPECT_NE(svg.find(">8</text>"), std::string::npos) << "the top of the colour scale";

  for (const Heatmap& empty : {Heatmap{}, Heatmap{"t", "x", "y", {}, {}, {{}, {}}, "v"},
                               Heatmap{"t", "x", "y", {}, {}, {{NAN, NAN}}, "v"}}) {
    const std::string s = render_heatmap(empty);
    EXPECT_TRUE(well_formed(s)) << s;
    EXPECT_NE(s.find("no data"), std::string::npos);
  }
}

TEST(SvgPlot, HeatmapNumbersAndFixedScale) {
  Heatmap map;
  map.values = {{25, 50}, {75, NAN}};
  map.scale_lo = 0;
  map.scale_hi = 100;
  map.cell_numbers = true;
  const std::string svg = render_heatmap(map);
  EXPECT_TRUE(well_formed(svg)) << svg;
  for (const char* cell : {">25</text>", ">50</text>", ">75</text>"})
    EXPECT_EQ(count(svg, cell), 1u) << cell;
  EXPECT_EQ(count(svg, ">nan</text>"), 0u) << "an empty cell has no number";
  // The scale's ends are the fixed ones, not the values' 25 and 75.
  EXPECT_NE(svg.find(">100</text>"), std::string::npos);
  EXPECT_NE(svg.find(">0</text>"), std::string::npos);
  map.cell_numbers = false;
  EXPECT_EQ(count(render_heatmap(map), ">50</text>"), 0u);
}

TEST(SvgPlot, WriteSvg) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("k3_plot_" + std::to_string(::getpid()) + ".svg"))
          .string();
  const std::string svg = render_line_plot(LinePlot{"t", "x", "y", {{"a", {0, 1}, {0, 1}}}});
  write_svg(path, svg);
  EXPECT_EQ(read_file(path), svg);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace k3
