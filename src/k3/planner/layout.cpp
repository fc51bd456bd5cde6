#include "k3/planner/layout.h"

#include <charconv>
#include <set>
#include <string_view>
#include <utility>

#include "k3/base/error.h"
#include "k3/base/format.h"
#include "k3/base/strings.h"

namespace k3::planner {

std::string Layout::str() const {
  return strprintf("dp=%lld,tp=%lld,pp=%lld,vp=%lld,ep=%lld,cp=%lld%s", static_cast<long long>(dp),
                   static_cast<long long>(tp), static_cast<long long>(pp),
                   static_cast<long long>(vp), static_cast<long long>(ep),
                   static_cast<long long>(cp), sequence_parallel ? ",sp=1" : "");
}

void check_layout_sizes(const Layout& l) {
  int64_t gpus = 1;  // at most kMaxGpus² before the check: no overflow
  for (const auto& [name, n] : {std::pair{"dp", l.dp},
                                {"tp", l.tp},
                                {"pp", l.pp},
                                {"vp", l.vp},
                                {"ep", l.ep},
                                {"cp", l.cp}}) {
    K3_CHECK(n >= 1 && n <= kMaxGpus, "--layout: ", name, "=", n, " is not in [1, ", kMaxGpus, "]");
    if (name != std::string_view("vp")) {
      gpus *= n;
      K3_CHECK(gpus <= kMaxGpus, "--layout: ", l.str(), " takes more than ", kMaxGpus, " GPUs");
    }
  }
}

Layout parse_layout(const std::string& text) {
  Layout l;
  std::set<std::string> named;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string part = trim(text.substr(at, comma - at));
    at = comma + 1;
    K3_CHECK(!part.empty(), "--layout '", text, "': an empty part (e.g. dp=8,tp=4)");
    const size_t eq = part.find('=');
    K3_CHECK(eq != std::string::npos, "--layout: '", part, "' is not NAME=SIZE (e.g. dp=8,tp=4)");
    const std::string name = trim(part.substr(0, eq)), value = trim(part.substr(eq + 1));
    int64_t n = 0;
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
    K3_CHECK(ec == std::errc() && end == value.data() + value.size() &&
                 (name == "sp" ? n == 0 || n == 1 : n >= 1 && n <= kMaxGpus),
             "--layout: ", name, "='", value, "' is not ",
             name == "sp" ? "0 or 1" : "a whole number in [1, " + std::to_string(kMaxGpus) + "]");
    if (name == "dp")
      l.dp = n;
    else if (name == "tp")
      l.tp = n;
    else if (name == "pp")
      l.pp = n;
    else if (name == "vp")
      l.vp = n;
    else if (name == "ep")
      l.ep = n;
    else if (name == "cp")
      l.cp = n;
    else if (name == "sp")
      l.sequence_parallel = n == 1;
    else
      throw Error("--layout: unknown part '" + name + "' (dp, tp, pp, vp, ep, cp, sp=0|1)");
    K3_CHECK(named.insert(name).second, "--layout: ", name, " is given twice");
  }
  check_layout_sizes(l);
  K3_CHECK(l.vp == 1 || l.pp > 1, "--layout: vp=", l.vp, " needs pipeline parallelism (pp > 1)");
  return l;
}

}  // namespace k3::planner
