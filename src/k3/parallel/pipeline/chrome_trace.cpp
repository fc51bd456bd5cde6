#include "k3/parallel/pipeline/chrome_trace.h"

namespace k3::parallel::pipeline {

nlohmann::json timeline_trace_events(const Schedule& s, const Timeline& measured, int pid0) {
  static const char* const kinds[] = {"forward",         "backward",      "backward input",
                                      "backward weight", "filler",        "send forward",
                                      "receive forward", "send backward", "receive backward"};
  nlohmann::json events = nlohmann::json::array();
  for (size_t r = 0; r < measured.ranks.size(); ++r) {
    const int pid = pid0 + static_cast<int>(r);
    events.push_back({{"ph", "M"},
                      {"name", "process_name"},
                      {"pid", pid},
                      {"args", {{"name", "pp rank " + std::to_string(r)}}}});
    events.push_back({{"ph", "M"},
                      {"name", "thread_name"},
                      {"pid", pid},
                      {"tid", 0},
                      {"args", {{"name", "schedule"}}}});
    for (const NodeTime& t : measured.ranks[r])
      events.push_back({{"ph", "X"},
                        {"name", node_label(t.node, s.shape.vp)},
                        {"cat", kinds[static_cast<int>(t.node.op)]},
                        {"pid", pid},
                        {"tid", 0},
                        {"ts", t.start * 1e6},
                        {"dur", (t.end - t.start) * 1e6},
                        {"args", {{"micro_batch", t.node.micro}, {"chunk", t.node.chunk}}}});
  }
  return events;
}

}  // namespace k3::parallel::pipeline
