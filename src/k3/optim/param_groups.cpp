#include "k3/optim/param_groups.h"

#include <algorithm>
#include <string_view>
#include <unordered_map>

#include "k3/base/error.h"
#include "k3/base/strings.h"
#include "k3/optim/adamw.h"

namespace k3::optim {
namespace {

struct Rule {
  std::string text, pattern;
  OptimizerKind kind = OptimizerKind::adamw;
  MuonGrouping grouping = MuonGrouping::whole;
  std::string head_size;  // per_head: a HeadSizes name or a number
};

bool is_digit(char c) { return c >= '0' && c <= '9'; }

bool is_number(const std::string& s) {
  return !s.empty() && s.size() < 10 && s.find_first_not_of("0123456789") == std::string::npos;
}

constexpr const char* kHeadSizeNames[] = {"attn", "kda", "mla_qk", "mla_kv", "mla_v", "dense"};

Rule parse_rule(const std::string& text) {
  const std::string where = "optimizer rule \"" + text + "\": ";
  const size_t eq = text.find('=');
  K3_CHECK(eq != std::string::npos, where, "expected \"pattern=spec\"");
  Rule r{text, trim(std::string_view(text).substr(0, eq)), OptimizerKind::adamw,
         MuonGrouping::whole, ""};
  const std::string spec = trim(std::string_view(text).substr(eq + 1));
  K3_CHECK(!r.pattern.empty(), where, "the pattern is empty");
  const std::string per_head = "muon:per_head(";
  if (spec == "adamw") {
    r.kind = OptimizerKind::adamw;
  } else if (spec == "frozen") {
    r.kind = OptimizerKind::frozen;
  } else if (spec == "muon" || spec == "muon:per_expert") {
    r.kind = OptimizerKind::muon;
    r.grouping = spec == "muon" ? MuonGrouping::whole : MuonGrouping::per_expert;
  } else if (spec.rfind(per_head, 0) == 0 && spec.back() == ')') {
    r.kind = OptimizerKind::muon;
    r.grouping = MuonGrouping::per_head;
    r.head_size =
        trim(std::string_view(spec).substr(per_head.size(), spec.size() - per_head.size() - 1));
    bool known = is_number(r.head_size) && std::stoll(r.head_size) > 0;
    for (const char* name : kHeadSizeNames) known |= r.head_size == name;
    K3_CHECK(known, where, "per_head(", r.head_size,
             ") needs a positive number or one of attn, kda, mla_qk, mla_kv, mla_v, dense");
  } else {
    throw Error(where + "unknown optimizer \"" + spec +
                "\": expected adamw, frozen, muon, muon:per_expert or muon:per_head(SIZE)");
  }
  return r;
}

enum class AttentionKind { kda, mla, dense };

// "model.layers.3.self_attn." for a tensor of an attention layer, else "".
std::string attention_prefix(const std::string& name) {
  const size_t at = name.find(".self_attn.");
  return at == std::string::npos ? "" : name.substr(0, at + 11);
}

std::unordered_map<std::string, AttentionKind> attention_kinds(
    const std::vector<ParamSlot>& params) {
  std::unordered_map<std::string, AttentionKind> kinds;
  for (const ParamSlot& p : params) {
    const std::string prefix = attention_prefix(p.name);
    if (prefix.empty()) continue;
    const std::string leaf = p.name.substr(prefix.size());
    AttentionKind& k = kinds.try_emplace(prefix, AttentionKind::dense).first->second;
    if (leaf == "kv_b_proj.weight") k = AttentionKind::mla;
    if (leaf == "f_a_proj.weight") k = AttentionKind::kda;
  }
  return kinds;
}

int64_t head_rows(const Rule& r, const std::string& name, const HeadSizes& s,
                  const std::unordered_map<std::string, AttentionKind>& kinds) {
  if (is_number(r.head_size)) return std::stoll(r.head_size);
  std::string size = r.head_size;
  if (size == "attn") {
    auto it = kinds.find(attention_prefix(name));
    K3_CHECK_CTX(it != kinds.end(), (ErrorContext{"", name, -1}), "rule \"", r.text,
                 "\": per_head(attn) applies to self_attn tensors only");
    size = it->second == AttentionKind::kda   ? "kda"
           : it->second == AttentionKind::mla ? "mla_v"
                                              : "dense";
  }
  const int64_t rows = size == "kda"      ? s.kda
                       : size == "mla_qk" ? s.mla_qk
                       : size == "mla_kv" ? s.mla_kv
                       : size == "mla_v"  ? s.mla_v
                                          : s.dense;
  K3_CHECK_CTX(rows > 0, (ErrorContext{"", name, -1}), "rule \"", r.text, "\": the head size ",
               size, " is not set by the model configuration");
  return rows;
}

Assignment assign(const ParamSlot& p, const Rule& r, const HeadSizes& sizes,
                  const std::unordered_map<std::string, AttentionKind>& kinds) {
  Assignment a{p.name, p.shape, r.kind, r.grouping, 0, {}, false, r.text};
  if (r.kind != OptimizerKind::muon) {
    a.weight_decay = r.kind == OptimizerKind::adamw && decays_by_default(p);
    return a;
  }
  const ErrorContext ctx{"", p.name, -1};
  const bool stacked = r.grouping == MuonGrouping::per_expert && p.shape.size() == 3;
  K3_CHECK_CTX(p.shape.size() == 2 || stacked, ctx, "rule \"", r.text,
               "\" gives Muon a tensor of shape ", shape_str(p.shape),
               ": Muon needs a matrix (or [E, m, n] experts with muon:per_expert)");
  const int64_t rows = p.shape[p.shape.size() - 2], cols = p.shape.back();
  a.weight_decay = true;
  a.block_shape = {rows, cols};
  if (stacked) a.block_rows = rows;
  if (r.grouping == MuonGrouping::per_head) {
    a.block_rows = head_rows(r, p.name, sizes, kinds);
    K3_CHECK_CTX(rows % a.block_rows == 0, ctx, "rule \"", r.text, "\": heads of ", a.block_rows,
                 " rows do not tile its ", rows, " rows");
    a.block_shape = {a.block_rows, cols};
  }
  return a;
}

// Tensors no optimizer touches.
const std::vector<std::string> kFrozenRules = {
    // Set by Quantile Balancing (math §6), never by a gradient.
    "*.block_sparse_moe.gate.e_score_correction_bias=frozen",
    // MXFP4 block scales of an exported checkpoint follow from the weights.
    "*.weight_scale=frozen",
};

}  // namespace

std::vector<std::string> split_rules(const std::string& comma_separated) {
  std::vector<std::string> rules;
  std::string_view rest = comma_separated;
  while (!rest.empty()) {
    const size_t comma = std::min(rest.find(','), rest.size());
    if (std::string rule = trim(rest.substr(0, comma)); !rule.empty()) rules.push_back(rule);
    rest.remove_prefix(std::min(comma + 1, rest.size()));
  }
  return rules;
}

const std::vector<std::string>& adamw_only_rules() {
  static const std::vector<std::string> rules = [] {
    std::vector<std::string> r = kFrozenRules;
    r.push_back("*=adamw");
    return r;
  }();
  return rules;
}

const std::vector<std::string>& default_param_group_rules() {
  static const std::vector<std::string> rules = [] {
    std::vector<std::string> r = kFrozenRules;
    r.insert(r.end(), {
                          // Per-Head Muon: rows are per-head blocks.
                          "*.self_attn.q_proj.weight=muon:per_head(attn)",
                          "*.self_attn.k_proj.weight=muon:per_head(attn)",
                          "*.self_attn.v_proj.weight=muon:per_head(attn)",
                          "*.self_attn.g_proj.weight=muon:per_head(attn)",
                          "*.self_attn.f_b_proj.weight=muon:per_head(kda)",
                          "*.self_attn.q_b_proj.weight=muon:per_head(mla_qk)",
                          "*.self_attn.kv_b_proj.weight=muon:per_head(mla_kv)",
                          "*.block_sparse_moe.experts.*=muon:per_expert",
                          // Whole-matrix Muon.
                          "*.self_attn.f_a_proj.weight=muon",
                          "*.self_attn.o_proj.weight=muon",
                          "*.self_attn.q_a_proj.weight=muon",
                          "*.self_attn.kv_a_proj_with_mqa.weight=muon",
                          "*.block_sparse_moe.gate.weight=muon",
                          "*.block_sparse_moe.shared_experts.*=muon",
                          "*.block_sparse_moe.routed_expert_down_proj.weight=muon",
                          "*.block_sparse_moe.routed_expert_up_proj.weight=muon",
                          "*.mlp.gate_proj.weight=muon",
                          "*.mlp.up_proj.weight=muon",
                          "*.mlp.down_proj.weight=muon",
                          // DeepSeek-V3's multi-token prediction: the projection of [h; e].
                          "*.eh_proj.weight=muon",
                          // The vision tower's and projector's matrices.
                          "vision_tower.encoder.blocks.*.wqkv.weight=muon",
                          "vision_tower.encoder.blocks.*.wo.weight=muon",
                          "vision_tower.encoder.blocks.*.mlp.fc*.weight=muon",
                          "mm_projector.proj.*.weight=muon",
                          // AdamW: KDA's per-head and per-channel parameters, convolutions, norms,
                          // AttnRes vectors,
                          // embeddings (the vision tower's patch and position embeddings too) and
                          // the output head.
                          "*.self_attn.b_proj.weight=adamw",
                          "*.self_attn.A_log=adamw",
                          "*.self_attn.dt_bias=adamw",
                          "*_conv1d.weight=adamw",
                          "*norm*.weight=adamw",
                          "*_res_proj.weight=adamw",
                          "*embed_tokens.weight=adamw",
                          "*lm_head.weight=adamw",
                          "*.shared_head.head.weight=adamw",  // an MTP module's copy of lm_head
                          "vision_tower.patch_embed.*=adamw",
                      });
    return r;
  }();
  return rules;
}

const std::vector<std::string>& whole_matrix_muon_rules() {
  static const std::vector<std::string> rules = [] {
    std::vector<std::string> r;
    for (const std::string& rule : default_param_group_rules())
      if (const size_t at = rule.find("=muon:per_head("); at != std::string::npos)
        r.push_back(rule.substr(0, at) + "=muon");
    return r;
  }();
  return rules;
}

std::vector<Assignment> assign_param_groups(const std::vector<ParamSlot>& params,
                                            const HeadSizes& sizes,
                                            const std::vector<std::string>& rules) {
  std::vector<Rule> parsed;
  for (const auto* list : {&rules, &default_param_group_rules()})
    for (const std::string& text : *list) parsed.push_back(parse_rule(text));
  const auto kinds = attention_kinds(params);
  // A pattern without digits matches a digit only by a '*', and so a run of digits as well: names
  // that differ only in their numbers (layers, experts) match the same such patterns. The first
  // of them a name matches is found once for all names of its key (each run of digits as "0"; a
  // K3 rank's quarter of a million tensors have a few dozen keys); the few patterns with digits
  // ("*_conv1d.weight") are tried on each name, up to that one.
  std::vector<bool> has_digit;
  for (const Rule& r : parsed)
    has_digit.push_back(r.pattern.find_first_of("0123456789") != std::string::npos);
  std::unordered_map<std::string, size_t> first_plain;  // by key: an index into `parsed`
  std::string key;
  std::vector<Assignment> out;
  for (const ParamSlot& p : params) {
    key.clear();
    for (size_t i = 0; i < p.name.size(); ++i)
      if (!is_digit(p.name[i]) || i == 0 || !is_digit(p.name[i - 1]))
        key += is_digit(p.name[i]) ? '0' : p.name[i];
    auto [plain, added] = first_plain.try_emplace(key, parsed.size());
    for (size_t k = 0; added && k < parsed.size(); ++k)
      if (!has_digit[k] && glob_match(parsed[k].pattern, p.name)) {
        plain->second = k;
        break;
      }
    size_t first = plain->second;
    for (size_t k = 0; k < first; ++k)
      if (has_digit[k] && glob_match(parsed[k].pattern, p.name)) {
        first = k;
        break;
      }
    const Rule* match = first < parsed.size() ? &parsed[first] : nullptr;
    K3_CHECK_CTX(match, (ErrorContext{"", p.name, -1}),
                 "no optimizer rule matches this parameter (shape ", shape_str(p.shape),
                 "): add a \"pattern=adamw|muon|frozen|...\" rule for it");
    out.push_back(assign(p, *match, sizes, kinds));
  }
  return out;
}

int64_t Assignment::blocks() const {
  return optimizer == OptimizerKind::muon ? shape_numel(shape) / shape_numel(block_shape) : 0;
}

std::string Assignment::describe() const {
  if (optimizer != OptimizerKind::muon)
    return std::string(optimizer_name(optimizer)) +
           (optimizer == OptimizerKind::adamw ? (weight_decay ? ", decay" : ", no decay") : "");
  const char* group = grouping == MuonGrouping::per_head     ? " per-head "
                      : grouping == MuonGrouping::per_expert ? " per-expert "
                                                             : " ";
  const int64_t n = blocks();
  return std::string("muon") + group + (n > 1 ? std::to_string(n) + " x " : "") +
         shape_str(block_shape) + ", decay";
}

const char* optimizer_name(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::adamw:
      return "adamw";
    case OptimizerKind::muon:
      return "muon";
    case OptimizerKind::frozen:
      return "frozen";
  }
  return "?";
}

}  // namespace k3::optim
