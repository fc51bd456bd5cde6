#include "k3/model/balancing.h"

#include <algorithm>

#include "k3/base/error.h"
#include "k3/model/bias_balancing.h"
#include "k3/model/config.h"
#include "k3/model/quantile_balancing.h"

namespace k3::model {

ExpertLoadStats ExpertLoadStats::of(std::vector<int64_t> load, int64_t tokens) {
  ExpertLoadStats st;
  st.tokens = tokens;
  st.load = std::move(load);
  if (st.load.empty()) return st;
  int64_t total = 0;
  st.min_load = st.max_load = st.load[0];
  for (int64_t l : st.load) {
    total += l;
    st.min_load = std::min(st.min_load, l);
    st.max_load = std::max(st.max_load, l);
    st.idle += l == 0;
  }
  const double mean = static_cast<double>(total) / static_cast<double>(st.load.size());
  st.maxvio = total > 0 ? static_cast<double>(st.max_load) / mean - 1 : 0;
  return st;
}

RouterBalancer::RouterBalancer(int64_t experts, int64_t k, size_t counts)
    : experts_(experts), k_(k), size_(counts) {
  K3_CHECK(k >= 1 && experts > k, "router balancing needs num_experts > num_experts_per_token >= 1",
           " (got ", experts, " experts, k = ", k, ")");
  last_ = ExpertLoadStats::of(std::vector<int64_t>(static_cast<size_t>(experts), 0), 0);
}

const ExpertLoadStats& RouterBalancer::record_stats(size_t load_at) {
  const int64_t* load = counts_.data() + load_at;
  last_ = ExpertLoadStats::of(std::vector<int64_t>(load, load + experts_), tokens());
  return last_;
}

std::unique_ptr<RouterBalancer> make_balancer(const ModelConfig& c) {
  if (c.moe_balancer == "bias")
    return std::make_unique<BiasBalancer>(c.num_experts, c.num_experts_per_token,
                                          c.moe_bias_update_rate);
  K3_CHECK_CTX(c.moe_balancer == "quantile", (ErrorContext{c.source, "moe_balancer", -1}),
               "expected \"quantile\" or \"bias\", found \"", c.moe_balancer, "\"");
  return std::make_unique<QuantileBalancer>(c.num_experts, c.num_experts_per_token);
}

int64_t balancer_counts(const ModelConfig& c) {
  return c.moe_balancer == "bias" ? c.num_experts + 1
                                  : c.num_experts * (QuantileBalancer::kBins + 1) + 1;
}

}  // namespace k3::model
