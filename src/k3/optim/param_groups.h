// Parameter groups: which optimizer updates each tensor, chosen by its K3 name (math §7).
//
// A rule is "pattern=spec". The pattern is matched against the whole name; '*' stands for any
// run of characters (dots included). The spec is one of
//   adamw                  AdamW
//   frozen                 no optimizer touches it (e.g. the router bias Quantile Balancing sets)
//   muon                   Muon on the whole matrix
//   muon:per_expert        Muon per expert: a [m, n] expert tensor whole, a stacked [E, m, n]
//                          tensor as E matrices
//   muon:per_head(SIZE)    Per-Head Muon: the rows split into blocks of SIZE rows, one per head.
//                          SIZE is a number or a name from HeadSizes: kda, mla_qk, mla_kv, mla_v,
//                          dense, or attn — the value-head size of the tensor's own layer (KDA:
//                          kda, MLA: mla_v, plain gated attention: dense).
// Rules are tried in order and the first whose pattern matches wins: a run's own rules come
// before default_param_group_rules(), so they can override or extend it. A tensor no rule matches
// is an error naming it: nothing is left unassigned.
//
// The layer kind behind `attn` comes from the tensor names themselves: a layer whose self_attn
// has kv_b_proj is MLA, one with f_a_proj is KDA, any other is the plain gated attention.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "k3/optim/param_set.h"

namespace k3::optim {

enum class OptimizerKind { adamw, muon, frozen };
enum class MuonGrouping { whole, per_head, per_expert };

// Rows per head block, from the model configuration.
struct HeadSizes {
  int64_t kda = 0;     // KDA head_dim: q/k/v/g/f_b_proj rows per head
  int64_t mla_qk = 0;  // qk_nope_head_dim + qk_rope_head_dim: q_b_proj rows per head
  int64_t mla_kv = 0;  // qk_nope_head_dim + v_head_dim: kv_b_proj rows per head
  int64_t mla_v = 0;   // v_head_dim: MLA g_proj rows per head
  int64_t dense = 0;   // head_dim of the plain gated attention
};

struct Assignment {
  std::string name;
  Shape shape;
  OptimizerKind optimizer = OptimizerKind::adamw;
  MuonGrouping grouping = MuonGrouping::whole;  // Muon only
  int64_t block_rows = 0;                       // Muon: rows per orthogonalized block; 0: whole
  Shape block_shape;                            // Muon: each block's matrix [rows, cols]
  bool weight_decay = false;
  std::string rule;  // the rule that assigned it

  int64_t blocks() const;        // Muon: how many blocks the tensor splits into
  std::string describe() const;  // "muon per-head 96 x [128, 7168], decay", for inspection
};

// The K3 grouping of math §7, in the order it is tried.
const std::vector<std::string>& default_param_group_rules();
// The default rules' Per-Head Muon tensors under whole-matrix Muon (tried before the defaults).
const std::vector<std::string>& whole_matrix_muon_rules();
// Every trainable tensor under AdamW; what the defaults freeze stays frozen.
const std::vector<std::string>& adamw_only_rules();
// "rule, rule, ..." as a list (spaces around each rule dropped, empty ones skipped).
std::vector<std::string> split_rules(const std::string& comma_separated);

// One assignment per parameter, in the order given. `rules` come before the defaults.
std::vector<Assignment> assign_param_groups(const std::vector<ParamSlot>& params,
                                            const HeadSizes& sizes,
                                            const std::vector<std::string>& rules = {});

const char* optimizer_name(OptimizerKind kind);

}  // namespace k3::optim
