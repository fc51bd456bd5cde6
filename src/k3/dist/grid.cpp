#include "k3/dist/grid.h"

#include "k3/base/error.h"

namespace k3::dist {

std::string ParallelDims::str() const {
  std::string s;
  for (auto [name, n] : {std::pair{"dp", dp}, {"tp", tp}, {"pp", pp}, {"ep", ep}, {"cp", cp}})
    if (n > 1) s += (s.empty() ? "" : " × ") + std::string(name) + std::to_string(n);
  if (sequence_parallel && tp > 1) s += " (sequence parallel)";
  if (moonep && ep > 1) s += " (MoonEP, " + std::to_string(moonep_slots) + " slots)";
  return s.empty() ? "single process" : s;
}

int rank_of(const ParallelDims& d, const GridCoord& c) {
  return c.tp + d.tp * (c.cp + d.cp * (c.ep + d.ep * (c.dp + d.dp * c.pp)));
}

GridCoord coord_of(const ParallelDims& d, int rank) {
  GridCoord c;
  c.tp = rank % d.tp, rank /= d.tp;
  c.cp = rank % d.cp, rank /= d.cp;
  c.ep = rank % d.ep, rank /= d.ep;
  c.dp = rank % d.dp, rank /= d.dp;
  c.pp = rank;
  return c;
}

ProcessGrid::ProcessGrid(const ParallelDims& dims, const Comm& world) : dims_(dims), world_(world) {
  for (int n : {dims.tp, dims.cp, dims.ep, dims.dp, dims.pp})
    K3_CHECK_CTX(n >= 1, (ErrorContext{"", "parallel", -1}),
                 "every parallel size must be >= 1, got ", dims.str());
  K3_CHECK_CTX(dims.product() == world.size(), (ErrorContext{"", "parallel", -1}),
               "tp·cp·ep·dp·pp = ", dims.product(), " (", dims.str(), ") but the job has ",
               world.size(), " process", world.size() == 1 ? "" : "es",
               ": the grid must multiply to the number of ranks");
  coord_ = coord_of(dims, world.rank());
  const GridCoord& c = coord_;
  // A group holds the ranks equal in every other coordinate: color = the rank with this
  // dimension's coordinate zeroed, key = the coordinate.
  auto group = [&](const char* name, int GridCoord::*dim) {
    GridCoord base = c;
    base.*dim = 0;
    return world.split(name, rank_of(dims, base), c.*dim);
  };
  tp_ = group("tp", &GridCoord::tp);
  cp_ = group("cp", &GridCoord::cp);
  ep_ = group("ep", &GridCoord::ep);
  dp_ = group("dp", &GridCoord::dp);
  pp_ = group("pp", &GridCoord::pp);
  GridCoord base = c;
  base.cp = base.ep = base.dp = 0;
  replica_ = world.split("replica", rank_of(dims, base), c.cp + dims.cp * (c.ep + dims.ep * c.dp));
  base = c;
  base.tp = base.dp = 0;
  tp_dp_ = world.split("tp_dp", rank_of(dims, base), c.tp + dims.tp * c.dp);
}

std::array<const Comm*, 8> ProcessGrid::groups() const {
  return {&world_, &tp_, &cp_, &ep_, &dp_, &pp_, &replica_, &tp_dp_};
}

const ProcessGrid& single_process() {
  static const ProcessGrid grid;
  return grid;
}

}  // namespace k3::dist
