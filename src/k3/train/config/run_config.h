// The run configuration: a TOML file with one table per concern, command-line overrides
// (`--set train.lr=1e-3`), validation that names the offending field, and the fully resolved
// configuration written back as TOML into the run directory.
//
// Every field is declared once, in the field table of run_config.cpp (name, member, range,
// description); parsing, overrides, validation and to_toml all work from that table.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "k3/kernels/gemm.h"
#include "k3/optim/schedule.h"

namespace k3::train {

struct ModelSection {
  std::string config = "configs/dense-tiny.json";  // HF-style model JSON
  int64_t seed = 1234;
  bool operator==(const ModelSection&) const = default;
};

struct DataSection {
  std::string source = "builtin";  // "builtin", "image_text", "shards", a .txt file or a directory
  std::string path;                // the shard directory, for source = "shards"
  std::string tokenizer = "byte";  // "byte" or a tokenizer directory
  int64_t builtin_tokens = 4000000;
  double val_fraction = 0.05;
  int64_t seq_len = 256;
  int64_t seed = 1234;     // data order and the built-in corpus; apart from model.seed
  bool documents = false;  // attention and KDA restart at each document (packed documents)
  bool operator==(const DataSection&) const = default;
};

struct TrainSection {
  int64_t steps = 1000;
  int64_t batch_size = 8;  // sequences per micro-batch
  int64_t grad_accum = 1;  // micro-batches per optimizer step
  double lr = 3e-3;        // peak learning rate
  double min_lr_ratio = 0.1;
  int64_t warmup_steps = 50;
  double warmup_fraction = 0;  // when > 0, replaces warmup_steps: a fraction of steps
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double grad_clip = 1.0;          // global gradient norm limit; 0 disables clipping
  std::string optimizer = "muon";  // "muon" (K3's parameter groups) or "adamw" (AdamW for all)
  bool muon_per_head = true;  // false: the per-head rules orthogonalize whole matrices
  // Extra rules tried before the defaults: "pattern=spec, pattern=spec" (optim/param_groups.h).
  std::string optim_rules;
  std::string schedule = "cosine";     // cosine, wsd or constant
  double decay_fraction = 0.2;         // wsd: share of the steps spent decaying
  std::string decay_shape = "linear";  // wsd: linear, sqrt or exp
  int64_t threads = 0;                 // 0: all cores
  // Matrix products: "fp32", or "bf16" (operands rounded to bf16, fp32 accumulation; fp32 master
  // weights, optimizer states, reductions and everything elementwise; docs/precision.md).
  std::string precision = "fp32";
  // Muon's Newton–Schulz products: "auto" (as train.precision), "fp32" or "bf16".
  std::string ns_precision = "auto";

  kernels::Precision gemm_precision() const {
    return precision == "bf16" ? kernels::Precision::BF16 : kernels::Precision::F32;
  }
  kernels::Precision newton_schulz_precision() const {
    if (ns_precision == "auto") return gemm_precision();
    return ns_precision == "bf16" ? kernels::Precision::BF16 : kernels::Precision::F32;
  }
  // Warmup length in steps: warmup_fraction * steps when set, else warmup_steps; at most steps.
  int64_t warmup() const;
  optim::Schedule lr_schedule() const;  // the learning-rate schedule these fields describe
  bool operator==(const TrainSection&) const = default;
};

struct EvalSection {
  int64_t every = 100;  // steps between evaluations; 0 disables them
  int64_t batches = 8;  // validation batches per evaluation
  bool operator==(const EvalSection&) const = default;
};

struct CheckpointSection {
  int64_t every = 200;    // steps between checkpoints; 0 disables periodic ones
  int64_t keep_last = 2;  // 0 keeps all
  bool operator==(const CheckpointSection&) const = default;
};

struct SampleSection {
  int64_t every = 0;  // steps between generated samples; 0 disables them
  int64_t max_tokens = 200;
  double temperature = 0.8;  // 0: greedy
  int64_t top_k = 40;        // 0: no top-k filter
  double top_p = 0.95;       // 1: no nucleus filter
  std::string prompt;
  bool operator==(const SampleSection&) const = default;
};

struct RunSection {
  std::string dir;              // empty: runs/<name>
  std::string name;             // empty: the TOML file's stem, or "run"
  double memory_limit_gib = 0;  // the run is refused when its estimate exceeds it; 0: the machine's
  bool operator==(const RunSection&) const = default;
};

// How the run is spread over processes (docs/distributed.md). The sizes multiply to the number
// of ranks the job was launched with; a plain `k3lab train` is one rank.
struct ParallelSection {
  int64_t dp = 1, tp = 1, pp = 1, ep = 1, cp = 1;
  int64_t zero = 0;                // 0: replicated optimizer; 1: states sharded; 2: gradients too
  double bucket_mib = 4;           // gradient-reduction bucket size
  bool overlap = true;             // reduce buckets during the backward (false: after it)
  bool sequence_parallel = false;  // the residual stream's tokens split over tp
  std::string moe_dispatch = "alltoall";  // under ep: "alltoall" (baseline) or "moonep"
  int64_t moonep_slots = 2;               // MoonEP: replica slots per rank
  int64_t vp = 1;                         // pipeline: virtual stages (model chunks) per pp rank
  std::string pp_layers;                  // pipeline: layers per virtual stage, "3,5"; empty: even
  std::string pp_schedule = "auto";       // "auto" (interleaved when vp > 1, else 1f1b), gpipe, ...
  int64_t pp_group = 0;                   // interleaved: micro-batches per group; 0: pp
  std::string pp_fillers = "bubbles";     // a vision tower's forward: bubbles, before or none
  bool operator==(const ParallelSection&) const = default;
};

// How saved activations are held (docs/activations.md): a default policy, rules that override it
// per tensor class, or a memory budget the policies are chosen to fit.
struct ActivationSection {
  std::string policy = "keep";           // keep, recompute, fp8, offload or bf16
  std::string rules;                     // "pattern=policy, ..." on "KIND.LAYER.ROLE"
  std::string granularity = "sublayer";  // what a recompute re-runs: layer or sublayer
  std::string budget;                    // "2GiB": chosen to fit; empty: the policy and rules
  std::string offload_to = "host";       // host, or peer (another rank's memory, under MPI)
  double peer_mib = 1024;                // offload_to = peer: the memory each rank lends its peer
  bool operator==(const ActivationSection&) const = default;
};

// One phase of a context curriculum (docs/curriculum.md, `[[curriculum]]` tables): a share of the
// run's steps trained at its own sequence length, the tokens of a micro-batch kept (its batch is
// train.batch_size x data.seq_len / seq_len sequences), with settings of its own for the data,
// the activation policy and the layout ("section.key" -> value as TOML, applied like --set).
struct CurriculumPhase {
  double share = 0;
  int64_t seq_len = 0;
  std::vector<std::pair<std::string, std::string>> settings;
  bool operator==(const CurriculumPhase&) const = default;
};

struct RunConfig {
  ModelSection model;
  DataSection data;
  TrainSection train;
  EvalSection eval;
  CheckpointSection checkpoint;
  SampleSection sample;
  RunSection run;
  ParallelSection parallel;
  ActivationSection activation;
  std::vector<CurriculumPhase> curriculum;  // empty: one phase, the sections above as they are
  bool operator==(const RunConfig&) const = default;
};

// Parses TOML text; ORIGIN (a file name) is used in error messages only. Keys not in the text
// keep their defaults. No file system access: paths are left as written.
RunConfig parse_run_config(const std::string& toml_text, const std::string& origin = "");

// Applies one "section.key=value" override. The value is read as TOML (1e-3, 8, "text"); for a
// string field unquoted text is taken as is.
void apply_override(RunConfig& config, const std::string& assignment);

// The configuration a run uses: TOML_PATH parsed (when TOML_PATH is empty: BASE, or the
// defaults without one), the overrides applied in order, run.name and run.dir filled in, and the
// input paths (model.config, data.source unless "builtin") made absolute: a relative path is
// looked up next to the TOML file, then in the working directory, and must exist. A path still
// equal to BASE's is taken as it is (a resumed run does not need its original files).
RunConfig load_run_config(const std::string& toml_path,
                          const std::vector<std::string>& overrides = {},
                          const RunConfig* base = nullptr);

// A field whose value differs between two configurations (values as TOML).
struct FieldChange {
  std::string key, from, to;
};
std::vector<FieldChange> changed_fields(const RunConfig& from, const RunConfig& to);

// Every field, one table per section, with a comment describing each; parse_run_config reads
// it back to an equal RunConfig.
std::string to_toml(const RunConfig& config);

// One field as the reference page shows it (`k3lab config reference`, docs/run-config.md).
struct FieldDoc {
  std::string key;            // "section.name"
  std::string type;           // "integer", "number" or "string"
  std::string default_value;  // as TOML, formatted from a default RunConfig
  std::string allowed;        // the values accepted, in words: "a value > 0", "one of ..."
  std::string doc;            // what the field does
};

// Every field of the table, in its order (sections together).
std::vector<FieldDoc> run_config_fields();

}  // namespace k3::train
