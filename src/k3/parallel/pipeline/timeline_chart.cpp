#include "k3/parallel/pipeline/timeline_chart.h"

namespace k3::parallel::pipeline {

std::string describe(const ScheduleShape& s) {
  static const char* const names[] = {"GPipe", "1F1B", "interleaved 1F1B", "zero-bubble (ZB-H1)"};
  std::string d = std::string(names[static_cast<int>(s.kind)]) + ", pp " + std::to_string(s.pp);
  if (s.vp > 1) d += " × vp " + std::to_string(s.vp);
  d += ", " + std::to_string(s.microbatches) + " micro-batches";
  if (s.kind == ScheduleKind::interleaved) d += " in groups of " + std::to_string(s.group);
  if (s.fillers != Fillers::none)
    d += std::string(", encoder fillers on rank 0 ") + fillers_name(s.fillers);
  return d;
}

namespace {

int colour_of(Op op) {
  switch (op) {
    case Op::forward:
      return 0;
    case Op::backward:
    case Op::backward_input:
      return 1;
    case Op::backward_weight:
      return 2;
    default:
      return 3;
  }
}

GanttPanel panel(const Schedule& s, const Timeline& t, std::string title, std::string time) {
  GanttPanel p{std::move(title), std::move(time), {}, {}};
  for (size_t r = 0; r < t.ranks.size(); ++r) {
    p.rows.push_back("rank " + std::to_string(r));
    for (const NodeTime& n : t.ranks[r])
      p.bars.push_back({static_cast<int>(r), n.start, n.end, node_label(n.node, s.shape.vp),
                        colour_of(n.node.op)});
  }
  return p;
}

}  // namespace

GanttChart timeline_chart(const Schedule& s, const Timeline& planned, const Timeline* measured) {
  GanttChart c;
  c.title = describe(s.shape);
  c.panels.push_back(panel(s, planned, "planned", "time (unit costs: a stage's forward = 1)"));
  if (measured)
    c.panels.push_back(panel(s, *measured, "measured", "seconds from the step's start"));
  c.legend = {"forward", s.split_backward() ? "backward (inputs)" : "backward", "weight gradients",
              "filler (encoder)"};
  return c;
}

}  // namespace k3::parallel::pipeline
