#include "k3/train/config/run_config.h"

#include <toml++/toml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <functional>
#include <sstream>

#include "k3/activation/policy.h"
#include "k3/base/error.h"
#include "k3/base/format.h"
#include "k3/base/fs.h"
#include "k3/base/strings.h"
#include "k3/train/config/curriculum.h"
#include "k3/train/config/toml_fields.h"

namespace k3::train {
namespace {

using RunField = toml_fields::Field<RunConfig>;
using toml_fields::SearchDirs;
using namespace toml_fields;

Rule<std::string> policy_rules() {
  return {[](const std::string& v) {
            try {
              activation::PolicyRules::parse(v, "activation.rules");
              return true;
            } catch (const Error&) {
              return false;
            }
          },
          "rules \"pattern=policy, ...\" (policies keep, recompute, fp8, offload, bf16)"};
}

Rule<std::string> byte_size_or_empty() {
  return {[](const std::string& v) { return v.empty() || parse_bytes(v).has_value(); },
          "empty, or a size such as \"2GiB\" or \"512MiB\""};
}

const std::vector<RunField>& fields() {
  using R = RunConfig;
  using M = ModelSection;
  using D = DataSection;
  using T = TrainSection;
  using E = EvalSection;
  using C = CheckpointSection;
  using S = SampleSection;
  using N = RunSection;
  using P = ParallelSection;
  using A = ActivationSection;
  using I = int64_t;
  // clang-format off
  static const std::vector<RunField> table = {
    field("model.config", &R::model, &M::config, input_path(), "HF-style model config (JSON)"),
    field("model.seed", &R::model, &M::seed, at_least<I>(0), "initialization seed"),
    field("data.source", &R::data, &D::source, input_path({"builtin", "image_text", "shards"}),
          "builtin, image_text (the image-text corpus, for a model with a vision tower), shards "
          "(the shard directory data.path), a .txt file or a directory"),
    field("data.path", &R::data, &D::path, optional_input_path(),
          "the shard directory (`k3lab data prepare`) when data.source = \"shards\""),
    field("data.tokenizer", &R::data, &D::tokenizer, input_path({"byte"}),
          "the run's tokenizer: byte, or a tokenizer directory"),
    field("data.builtin_tokens", &R::data, &D::builtin_tokens, above<I>(0), "built-in corpus size"),
    field("data.val_fraction", &R::data, &D::val_fraction, within('(', 0, 1, ')'),
          "share held out for validation"),
    field("data.seq_len", &R::data, &D::seq_len, above<I>(0), "tokens per sequence"),
    field("data.seed", &R::data, &D::seed, at_least<I>(0), "data order and built-in corpus seed"),
    field("data.documents", &R::data, &D::documents, on_off(),
          "each token sees only its own document (which starts after an end-of-text token)"),
    field("train.steps", &R::train, &T::steps, above<I>(0), "optimizer steps"),
    field("train.batch_size", &R::train, &T::batch_size, above<I>(0), "sequences per micro-batch"),
    field("train.grad_accum", &R::train, &T::grad_accum, above<I>(0), "micro-batches per step"),
    field("train.lr", &R::train, &T::lr, above(0.0), "peak learning rate"),
    field("train.min_lr_ratio", &R::train, &T::min_lr_ratio, within('[', 0, 1, ']'),
          "final lr / peak lr"),
    field("train.warmup_steps", &R::train, &T::warmup_steps, at_least<I>(0), "linear warmup steps"),
    field("train.warmup_fraction", &R::train, &T::warmup_fraction, within('[', 0, 1, ')'),
          "share of steps; > 0 replaces warmup_steps"),
    field("train.weight_decay", &R::train, &T::weight_decay, at_least(0.0),
          "decoupled weight decay"),
    field("train.beta1", &R::train, &T::beta1, within('[', 0, 1, ')'), "first-moment decay"),
    field("train.beta2", &R::train, &T::beta2, within('[', 0, 1, ')'), "second-moment decay"),
    field("train.eps", &R::train, &T::eps, above(0.0), "optimizer epsilon"),
    field("train.grad_clip", &R::train, &T::grad_clip, at_least(0.0),
          "gradient-norm limit; 0: off"),
    field("train.optimizer", &R::train, &T::optimizer, one_of({"muon", "adamw"}),
          "muon: K3's groups (Muon matrices, AdamW the rest); adamw: AdamW everywhere"),
    field("train.muon_per_head", &R::train, &T::muon_per_head, on_off(),
          "muon: attention's projections orthogonalized head by head (Per-Head Muon); false: "
          "whole matrices"),
    field("train.optim_rules", &R::train, &T::optim_rules, any_text(),
          "extra parameter-group rules before the defaults: \"pattern=spec, ...\""),
    field("train.schedule", &R::train, &T::schedule, one_of({"cosine", "wsd", "constant"}),
          "learning-rate schedule after warmup"),
    field("train.decay_fraction", &R::train, &T::decay_fraction, within('(', 0, 1, ']'),
          "wsd: share of the steps spent decaying"),
    field("train.decay_shape", &R::train, &T::decay_shape, one_of({"linear", "sqrt", "exp"}),
          "wsd: shape of the decay"),
    field("train.threads", &R::train, &T::threads, at_least<I>(0), "worker threads; 0: all cores"),
    field("train.precision", &R::train, &T::precision, one_of({"fp32", "bf16"}),
          "matrix products: fp32, or bf16 with fp32 accumulation and fp32 master weights"),
    field("train.ns_precision", &R::train, &T::ns_precision, one_of({"auto", "fp32", "bf16"}),
          "Muon's Newton-Schulz products; auto: as train.precision"),
    field("eval.every", &R::eval, &E::every, at_least<I>(0), "steps between evaluations; 0: off"),
    field("eval.batches", &R::eval, &E::batches, above<I>(0), "validation batches per evaluation"),
    field("checkpoint.every", &R::checkpoint, &C::every, at_least<I>(0),
          "steps between checkpoints; 0: off"),
    field("checkpoint.keep_last", &R::checkpoint, &C::keep_last, at_least<I>(0),
          "checkpoints kept; 0: all"),
    field("sample.every", &R::sample, &S::every, at_least<I>(0), "steps between samples; 0: off"),
    field("sample.max_tokens", &R::sample, &S::max_tokens, above<I>(0),
          "tokens per sample; with the prompt, at most the model's context"),
    field("sample.temperature", &R::sample, &S::temperature, at_least(0.0), "0: greedy"),
    field("sample.top_k", &R::sample, &S::top_k, at_least<I>(0), "0: no top-k filter"),
    field("sample.top_p", &R::sample, &S::top_p, within('(', 0, 1, ']'), "1: no nucleus filter"),
    field("sample.prompt", &R::sample, &S::prompt, any_text(), "text the samples continue"),
    field("run.dir", &R::run, &N::dir, any_text(), "run directory; empty: runs/<name>"),
    field("run.name", &R::run, &N::name, any_text(), "empty: the TOML file's stem"),
    field("run.memory_limit_gib", &R::run, &N::memory_limit_gib, at_least(0.0),
          "refuse a run estimated above it; 0: the machine's"),
    field("parallel.dp", &R::parallel, &P::dp, above<I>(0), "data-parallel ranks"),
    field("parallel.tp", &R::parallel, &P::tp, above<I>(0), "tensor-parallel ranks"),
    field("parallel.pp", &R::parallel, &P::pp, above<I>(0), "pipeline-parallel ranks"),
    field("parallel.ep", &R::parallel, &P::ep, above<I>(0), "expert-parallel ranks"),
    field("parallel.cp", &R::parallel, &P::cp, above<I>(0), "context-parallel ranks"),
    field("parallel.zero", &R::parallel, &P::zero, within_int(0, 2),
          "0: replicated optimizer; 1: optimizer states sharded over dp; 2: gradients too"),
    field("parallel.bucket_mib", &R::parallel, &P::bucket_mib, above(0.0),
          "gradient-reduction bucket size (MiB)"),
    field("parallel.overlap", &R::parallel, &P::overlap, on_off(),
          "reduce gradient buckets during the backward (false: after it)"),
    field("parallel.sequence_parallel", &R::parallel, &P::sequence_parallel, on_off(),
          "split the residual stream's tokens over tp between the layers' regions"),
    field("parallel.moe_dispatch", &R::parallel, &P::moe_dispatch, one_of({"alltoall", "moonep"}),
          "under ep: alltoall sends each row to its expert's home rank; moonep balances every "
          "rank at exactly S·K rows with replicas"),
    field("parallel.moonep_slots", &R::parallel, &P::moonep_slots, at_least<I>(0),
          "MoonEP: replicas of other ranks' experts one rank may host per MoE layer"),
    field("parallel.vp", &R::parallel, &P::vp, above<I>(0),
          "pipeline: virtual stages (model chunks) per pp rank; above 1 interleaves"),
    field("parallel.pp_layers", &R::parallel, &P::pp_layers, any_text(),
          "pipeline: layers of each virtual stage, comma-separated (\"3,5\"); empty: even"),
    field("parallel.pp_schedule", &R::parallel, &P::pp_schedule,
          one_of({"auto", "gpipe", "1f1b", "interleaved", "zb"}),
          "pipeline: auto is interleaved when vp > 1, else 1f1b; zb splits each backward (ZB-H1)"),
    field("parallel.pp_fillers", &R::parallel, &P::pp_fillers,
          one_of({"bubbles", "before", "none"}),
          "pipeline, a model with a vision tower: its forward as filler nodes in rank 0's "
          "bubbles, all before the pipeline, or inside the first stage's forward"),
    field("parallel.pp_group", &R::parallel, &P::pp_group, at_least<I>(0),
          "pipeline, interleaved: micro-batches per group through each chunk; 0: pp"),
    field("activation.policy", &R::activation, &A::policy,
          one_of({"keep", "recompute", "fp8", "offload", "bf16"}),
          "how a saved activation is held unless a rule says otherwise"),
    field("activation.rules", &R::activation, &A::rules, policy_rules(),
          "per-class policies tried first: \"pattern=policy, ...\" on \"KIND.LAYER.ROLE\" "
          "(\"mla.*.self_attn.*=recompute\")"),
    field("activation.granularity", &R::activation, &A::granularity,
          one_of({"sublayer", "layer"}),
          "what a recompute re-runs: each half of a layer (mixer, feed-forward) or the layer"),
    field("activation.budget", &R::activation, &A::budget, byte_size_or_empty(),
          "activation memory per rank the policies are chosen to fit (\"2GiB\"); empty: off"),
    field("activation.offload_to", &R::activation, &A::offload_to, one_of({"host", "peer"}),
          "where offloaded tensors go: host memory, or a peer rank's (under MPI)"),
    field("activation.peer_mib", &R::activation, &A::peer_mib, above(0.0),
          "offload to a peer: the memory each rank lends its peer (MiB)"),
  };
  // clang-format on
  return table;
}

std::string section_of(const std::string& key) { return key.substr(0, key.find('.')); }

const RunField* find_field(const std::string& key) {
  for (const RunField& f : fields())
    if (f.key == key) return &f;
  return nullptr;
}

// "steps, batch_size, ..." for one section, or the section names when SECTION is empty.
std::string known_names(const std::string& section) {
  std::string names, previous;
  for (const RunField& f : fields()) {
    std::string name = section.empty() ? section_of(f.key) : f.key.substr(f.key.find('.') + 1);
    if ((!section.empty() && section_of(f.key) != section) || name == previous) continue;
    names += (names.empty() ? "" : ", ") + name;
    previous = name;
  }
  return names;
}

// Why KEY ("section.name" or "section") names no field, listing those that exist.
std::string unknown_message(const std::string& key) {
  const std::string section = section_of(key), names = known_names(section);
  if (names.empty()) return "unknown section; expected one of: " + known_names("");
  return "unknown key; [" + section + "] has: " + names;
}

std::string at_line(const toml::node& node) {
  auto line = node.source().begin.line;
  return line > 0 ? "line " + std::to_string(line) + ": " : "";
}

constexpr const char* kCurriculum = "curriculum";

// The sections a curriculum phase may set keys of: its data, its evaluation (data without a
// validation split, or long windows that are costly to evaluate), how activations are held, the
// layout. Not data.seq_len (the phase's own seq_len), data.seed (the phase's order derives from
// it) nor data.tokenizer (what the model's ids mean).
bool phase_may_set(const std::string& key) {
  const std::string section = section_of(key);
  return (section == "data" || section == "eval" || section == "activation" ||
          section == "parallel") &&
         key != "data.seq_len" && key != "data.seed" && key != "data.tokenizer";
}

// A phase's "section.key" settings: TOML's dotted keys (activation.policy = "recompute") arrive
// as nested tables; each value is checked by its field and kept as its field formats it.
void collect_settings(const toml::table& table, const std::string& prefix, CurriculumPhase& phase,
                      const std::string& origin, const std::string& where) {
  for (auto&& [name, value] : table) {
    const std::string key = prefix + std::string(name.str());
    if (const toml::table* inner = value.as_table()) {
      collect_settings(*inner, key + ".", phase, origin, where);
      continue;
    }
    const RunField* f = find_field(key);
    K3_CHECK_CTX(f && phase_may_set(key), (ErrorContext{origin, where + "." + key, -1}),
                 at_line(value),
                 f ? "a phase sets share, seq_len, and keys of [data] (not seq_len, seed, "
                     "tokenizer), [eval], [activation] and [parallel]"
                   : unknown_message(key));
    RunConfig scratch;
    try {
      f->set(scratch, value);
    } catch (const Error& e) {
      throw Error(at_line(value) + e.message(), ErrorContext{origin, where + "." + key, -1});
    }
    phase.settings.emplace_back(key, f->format(scratch));
  }
}

std::vector<CurriculumPhase> parse_curriculum(const toml::node& node, const std::string& origin) {
  const toml::array* phases = node.as_array();
  K3_CHECK_CTX(phases && !phases->empty() && phases->is_array_of_tables(),
               (ErrorContext{origin, kCurriculum, -1}), at_line(node),
               "expected one or more [[curriculum]] tables, found ", describe(node));
  std::vector<CurriculumPhase> out;
  for (const toml::node& item : *phases) {
    const std::string where = std::string(kCurriculum) + "[" + std::to_string(out.size()) + "]";
    CurriculumPhase phase;
    toml::table rest = *item.as_table();
    auto take = [&](const char* name, auto read) {
      const toml::node* v = rest.get(name);
      K3_CHECK_CTX(v, (ErrorContext{origin, where + "." + name, -1}), at_line(item),
                   "missing: every phase has a share and a seq_len");
      try {
        read(*v);
      } catch (const Error& e) {
        throw Error(at_line(*v) + e.message(), ErrorContext{origin, where + "." + name, -1});
      }
      rest.erase(name);
    };
    take("share", [&](const toml::node& v) {
      phase.share = from_node<double>(v);
      K3_CHECK(phase.share > 0 && phase.share <= 1, "expected a value in (0, 1], got ",
               format_value(phase.share));
    });
    take("seq_len", [&](const toml::node& v) {
      phase.seq_len = from_node<int64_t>(v);
      K3_CHECK(phase.seq_len > 0, "expected a value > 0, got ", phase.seq_len);
    });
    collect_settings(rest, "", phase, origin, where);
    out.push_back(std::move(phase));
  }
  return out;
}

std::string curriculum_toml(const std::vector<CurriculumPhase>& phases) {
  std::string out;
  for (const CurriculumPhase& p : phases) {
    out += "\n[[" + std::string(kCurriculum) + "]]\nshare = " + format_value(p.share) +
           "\nseq_len = " + format_value(p.seq_len) + "\n";
    for (const auto& [key, value] : p.settings) out += key + " = " + value + "\n";
  }
  return out;
}

}  // namespace

int64_t TrainSection::warmup() const {
  int64_t w = warmup_fraction > 0 ? std::llround(warmup_fraction * static_cast<double>(steps))
                                  : warmup_steps;
  return std::min(w, steps);
}

optim::Schedule TrainSection::lr_schedule() const {
  return {.kind = optim::parse_schedule_kind(schedule),
          .peak_lr = static_cast<float>(lr),
          .total_steps = steps,
          .warmup_steps = warmup(),
          .min_lr_ratio = static_cast<float>(min_lr_ratio),
          .decay_fraction = decay_fraction,
          .decay_shape = optim::parse_decay_shape(decay_shape)};
}

RunConfig parse_run_config(const std::string& toml_text, const std::string& origin) {
  toml::table root;
  try {
    root = toml::parse(std::string_view(toml_text), std::string_view(origin));
  } catch (const toml::parse_error& e) {
    throw Error("TOML syntax error at line " + std::to_string(e.source().begin.line) + ", column " +
                    std::to_string(e.source().begin.column) + ": " + std::string(e.description()),
                ErrorContext{origin, "", -1});
  }
  RunConfig config;
  for (auto&& [section_key, section_node] : root) {
    const std::string section(section_key.str());
    if (section == kCurriculum) {
      config.curriculum = parse_curriculum(section_node, origin);
      continue;
    }
    K3_CHECK_CTX(!known_names(section).empty(), (ErrorContext{origin, section, -1}),
                 at_line(section_node), unknown_message(section));
    const toml::table* table = section_node.as_table();
    K3_CHECK_CTX(table, (ErrorContext{origin, section, -1}), at_line(section_node),
                 "expected a table [", section, "], found ", describe(section_node));
    for (auto&& [name, value] : *table) {
      const std::string key = section + "." + std::string(name.str());
      const RunField* f = find_field(key);
      K3_CHECK_CTX(f, (ErrorContext{origin, key, -1}), at_line(value), unknown_message(key));
      try {
        f->set(config, value);
      } catch (const Error& e) {
        throw Error(at_line(value) + e.message(), ErrorContext{origin, key, -1});
      }
    }
  }
  return config;
}

void apply_override(RunConfig& config, const std::string& assignment) {
  const size_t eq = assignment.find('=');
  K3_CHECK_CTX(eq != std::string::npos, (ErrorContext{"", assignment, -1}),
               "expected --set section.key=value, e.g. train.lr=1e-3");
  const std::string key = trim(std::string_view(assignment).substr(0, eq));
  const std::string text = trim(std::string_view(assignment).substr(eq + 1));
  const RunField* f = find_field(key);
  K3_CHECK_CTX(f, (ErrorContext{"", key, -1}), "--set ", assignment, ": ", unknown_message(key));
  // The value is read as TOML; other text (and any non-string, for a string field) as a string.
  toml::table parsed;
  try {
    parsed = toml::parse(std::string_view("value = " + text));
  } catch (const toml::parse_error&) {
    // not TOML: taken as text below
  }
  const toml::node* value = parsed.get("value");
  const toml::value<std::string> raw(text);
  if (!value || (f->type == type_name<std::string>() && !value->is_string())) value = &raw;
  try {
    f->set(config, *value);
  } catch (const Error& e) {
    throw Error("--set " + assignment + ": " + e.message(), ErrorContext{"", key, -1});
  }
}

RunConfig load_run_config(const std::string& toml_path, const std::vector<std::string>& overrides,
                          const RunConfig* base) {
  RunConfig config = !toml_path.empty() ? parse_run_config(read_file(toml_path), toml_path)
                     : base             ? *base
                                        : RunConfig{};
  for (const std::string& assignment : overrides) apply_override(config, assignment);
  try {  // what no single field shows: the schedule as a whole (e.g. an exp decay to a 0 floor)
    config.train.lr_schedule().validate();
  } catch (const Error& e) {
    throw Error(e.message(), ErrorContext{toml_path, "train." + e.context().field, -1});
  }
  if (config.run.name.empty())
    config.run.name = toml_path.empty() ? "run" : fs::path(toml_path).stem().string();
  if (config.run.dir.empty()) config.run.dir = (fs::path("runs") / config.run.name).string();

  SearchDirs dirs;
  if (!toml_path.empty()) dirs.push_back(fs::absolute(toml_path).parent_path());
  if (dirs.empty() || dirs[0] != fs::current_path()) dirs.push_back(fs::current_path());
  for (const RunField& f : fields()) {
    if (!f.resolve || (base && f.format(config) == f.format(*base))) continue;
    try {
      f.resolve(config, dirs);
    } catch (const Error& e) {
      throw Error(e.message(), ErrorContext{toml_path, f.key, -1});
    }
  }
  if (!base || config.curriculum != base->curriculum)
    for (size_t i = 0; i < config.curriculum.size(); ++i)
      for (auto& [key, value] : config.curriculum[i].settings) {
        const RunField* f = find_field(key);
        if (!f->resolve) continue;
        RunConfig scratch;
        apply_override(scratch, key + "=" + value);
        try {
          f->resolve(scratch, dirs);
        } catch (const Error& e) {
          throw Error(e.message(),
                      ErrorContext{toml_path, "curriculum[" + std::to_string(i) + "]." + key, -1});
        }
        value = f->format(scratch);
      }
  try {
    check_curriculum(config);
  } catch (const Error& e) {
    throw Error(e.message(), ErrorContext{toml_path, e.context().field, -1});
  }
  return config;
}

std::vector<FieldChange> changed_fields(const RunConfig& from, const RunConfig& to) {
  std::vector<FieldChange> changes;
  for (const RunField& f : fields())
    if (f.format(from) != f.format(to)) changes.push_back({f.key, f.format(from), f.format(to)});
  if (from.curriculum != to.curriculum)
    changes.push_back(
        {kCurriculum, curriculum_toml(from.curriculum), curriculum_toml(to.curriculum)});
  return changes;
}

std::vector<FieldDoc> run_config_fields() {
  const RunConfig defaults;
  std::vector<FieldDoc> out;
  for (const RunField& f : fields())
    out.push_back({f.key, f.type, f.format(defaults), f.expected, f.doc});
  return out;
}

std::string to_toml(const RunConfig& config) {
  std::string out = "# k3lab run configuration, fully resolved\n", section;
  for (const RunField& f : fields()) {
    if (section_of(f.key) != section) {
      section = section_of(f.key);
      out += "\n[" + section + "]\n";
    }
    std::string line = f.key.substr(section.size() + 1) + " = " + f.format(config);
    line.resize(std::max<size_t>(line.size() + 2, 40), ' ');
    out += line + "# " + f.doc + "\n";
  }
  return out + curriculum_toml(config.curriculum);
}

}  // namespace k3::train
