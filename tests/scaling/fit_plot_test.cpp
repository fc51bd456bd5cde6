#include "k3/scaling/fit_plot.h"

#include <gtest/gtest.h>

#include <cmath>

namespace k3::scaling {
namespace {

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

ScalingRuns runs_of(const ScalingLaw& law) {
  ScalingRuns runs;
  for (double n : {1e7, 1e8, 1e9})
    for (double d : {1e9, 1e10, 1e11}) {
      runs.params.push_back(n), runs.tokens.push_back(d), runs.loss.push_back(law.loss(n, d));
      runs.lines.push_back(runs.lines.size() + 2);
    }
  return runs;
}

// Form nd: two panels (contours with the frontier and the runs; loss against compute), each run
// a dot in both; the contours are curves at five losses across the runs' range.
TEST(FitPlot, DrawsContoursFrontierAndRuns) {
  const ScalingLaw law{LawForm::kParamsTokens, 1.69, 406.4, 410.7, 0.34, 0.28};
  const ScalingRuns runs = runs_of(law);
  const std::string svg = render_fit_svg(law, runs, "runs.csv");
  EXPECT_EQ(count(svg, "<svg"), 3u);  // the document and its two panels
  EXPECT_NE(svg.find("runs.csv: iso-loss contours of the fit"), std::string::npos);
  EXPECT_NE(svg.find("loss against compute C = 6 N D"), std::string::npos);
  EXPECT_EQ(count(svg, ">L = "), 5u);
  EXPECT_EQ(count(svg, ">compute-optimal<"), 1u);
  EXPECT_GE(count(svg, "<circle"), 2 * runs.loss.size());
  EXPECT_GE(count(svg, "<polyline"), 7u);  // 5 contours, the frontier, the fit against C
}

TEST(FitPlot, TheComputeFormHasOnePanel) {
  const ScalingLaw law{LawForm::kCompute, 1.69, 406.4, 0, 0.34, 0};
  const ScalingRuns runs = runs_of(law);
  const std::string svg = render_fit_svg(law, runs, "runs.csv");
  EXPECT_EQ(count(svg, "<svg"), 2u);
  EXPECT_EQ(count(svg, "iso-loss"), 0u);
  EXPECT_NE(svg.find(">fit L(C)<"), std::string::npos);
  EXPECT_EQ(count(svg, "<circle"), runs.loss.size());
}

}  // namespace
}  // namespace k3::scaling
