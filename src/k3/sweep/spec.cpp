#include "k3/sweep/spec.h"

#include <toml++/toml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <set>
#include <sstream>

#include "k3/base/error.h"
#include "k3/base/fs.h"

namespace k3::sweep {
namespace {

namespace fs = std::filesystem;

ErrorContext at(const std::string& path, const std::string& key) { return {path, key, -1}; }

// A TOML value as `--set` reads it back.
std::string as_setting(const toml::node& v, const std::string& path, const std::string& key) {
  if (const auto* s = v.as_string()) {
    std::string out = "\"";
    for (char c : s->get()) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    return out + "\"";
  }
  if (const auto* b = v.as_boolean()) return b->get() ? "true" : "false";
  if (const auto* i = v.as_integer()) return std::to_string(i->get());
  if (const auto* f = v.as_floating_point()) {
    char buf[32];
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, f->get());
    std::string s(buf, end);
    if (s.find_first_of(".en") == std::string::npos) s += ".0";
    return s;
  }
  throw Error("expected a string, number or boolean", at(path, key));
}

// A table of run-config settings, flattened: `data.seq_len = 64` (a dotted key, i.e. a nested
// table) and `"data.seq_len" = 64` (one quoted key) both give "data.seq_len".
void flatten(const toml::table& t, const std::string& prefix, const std::string& path,
             std::vector<std::pair<std::string, std::string>>& out) {
  for (const auto& [k, v] : t) {
    const std::string key =
        prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
    if (const auto* sub = v.as_table())
      flatten(*sub, key, path, out);
    else
      out.emplace_back(key, as_setting(v, path, key));
  }
}

double positive_number(const toml::node& v, const std::string& path, const std::string& key) {
  std::optional<double> x = v.value<double>();
  K3_CHECK_CTX(x && std::isfinite(*x) && *x > 0, at(path, key),
               "expected a positive number, found ", v.type());
  return *x;
}

template <typename T>
std::vector<T> list_of(const toml::table& t, const std::string& name, const std::string& path,
                       const std::string& section) {
  const std::string key = section + "." + name;
  const toml::node* n = t.get(name);
  if (!n) return {};
  std::vector<T> out;
  auto take = [&](const toml::node& v) {
    if constexpr (std::is_same_v<T, double>) {
      out.push_back(positive_number(v, path, key));
    } else {
      std::optional<int64_t> i = v.value<int64_t>();
      K3_CHECK_CTX(v.is_integer() && i && *i >= 0, at(path, key),
                   "expected a non-negative integer, found ", v.type());
      out.push_back(*i);
    }
  };
  if (const auto* a = n->as_array()) {
    K3_CHECK_CTX(!a->empty(), at(path, key), "an empty list");
    for (const auto& v : *a) take(v);
  } else {
    take(*n);
  }
  std::set<T> seen(out.begin(), out.end());
  K3_CHECK_CTX(seen.size() == out.size(), at(path, key), "a value listed twice");
  return out;
}

int64_t integer_at_least(const toml::table& t, const std::string& name, int64_t fallback,
                         int64_t least, const std::string& path) {
  const toml::node* n = t.get(name);
  if (!n) return fallback;
  K3_CHECK_CTX(n->is_integer() && n->as_integer()->get() >= least, at(path, "sweep." + name),
               "expected an integer >= ", least, ", found ", n->type());
  return n->as_integer()->get();
}

// A positive integer, or "auto" (also when absent): none.
std::optional<int64_t> positive_or_auto(const toml::table& t, const std::string& name,
                                        const std::string& path) {
  const std::string key = "sweep." + name;
  const toml::node* n = t.get(name);
  if (!n || n->value<std::string>() == "auto") return std::nullopt;
  if (n->is_integer() && n->as_integer()->get() >= 1) return n->as_integer()->get();
  std::ostringstream found;
  if (n->is_string() || n->is_number() || n->is_boolean())
    found << as_setting(*n, path, key);
  else
    found << n->type();
  throw Error("expected a positive integer or \"auto\", found " + found.str(), at(path, key));
}

std::string string_at(const toml::table& t, const std::string& name, const std::string& path,
                      const std::string& key) {
  const toml::node* n = t.get(name);
  if (!n) return "";
  K3_CHECK_CTX(n->is_string(), at(path, key), "expected a string, found ", n->type());
  return n->as_string()->get();
}

// A string or a list of strings.
std::vector<std::string> strings_at(const toml::table& t, const std::string& name,
                                    const std::string& path, const std::string& key) {
  const toml::node* n = t.get(name);
  if (!n) return {};
  if (n->is_string()) return {n->as_string()->get()};
  const toml::array* a = n->as_array();
  K3_CHECK_CTX(a && !a->empty(), at(path, key), "expected a string or a list of strings, found ",
               n->type());
  std::vector<std::string> out;
  for (const toml::node& v : *a) {
    K3_CHECK_CTX(v.is_string(), at(path, key), "expected strings, found ", v.type());
    out.push_back(v.as_string()->get());
  }
  return out;
}

// PATH as written, next to the sweep file, then in the working directory; must exist.
std::string find_input(const std::string& name, const std::string& sweep_path,
                       const std::string& key) {
  for (const fs::path& p : {fs::path(sweep_path).parent_path() / name, fs::path(name)})
    if (fs::exists(p)) return fs::absolute(p).lexically_normal().string();
  throw Error("no such file: " + name, at(sweep_path, key));
}

void check_keys(const toml::table& t, const std::set<std::string>& known, const std::string& path,
                const std::string& section) {
  for (const auto& [k, v] : t)
    K3_CHECK_CTX(known.count(std::string(k.str())), at(path, section + std::string(k.str())),
                 "unknown key");
}

}  // namespace

SweepSpec parse_sweep_spec(const std::string& toml_text, const std::string& path) {
  toml::table root;
  try {
    root = toml::parse(toml_text, path);
  } catch (const toml::parse_error& e) {
    throw Error(
        std::string(e.description()) + " (line " + std::to_string(e.source().begin.line) + ")",
        at(path, ""));
  }
  check_keys(root, {"sweep", "set", "arm"}, path, "");
  const toml::table* s = root["sweep"].as_table();
  K3_CHECK_CTX(s, at(path, "sweep"), "a [sweep] table is required");
  check_keys(*s,
             {"out", "parallel", "threads", "sizes", "tokens_per_param", "flops", "lr",
              "batch_size", "seeds", "seed_sizes", "evals", "config", "val_data", "val_batches"},
             path, "sweep.");

  SweepSpec spec;
  spec.path = path;
  spec.name = fs::path(path).stem().string();
  spec.out = string_at(*s, "out", path, "sweep.out");
  K3_CHECK_CTX(!spec.out.empty(), at(path, "sweep.out"), "the sweep directory is required");
  spec.parallel = positive_or_auto(*s, "parallel", path);
  spec.threads = positive_or_auto(*s, "threads", path);
  spec.evals = integer_at_least(*s, "evals", spec.evals, 1, path);
  spec.val_batches = integer_at_least(*s, "val_batches", spec.val_batches, 0, path);
  spec.sizes = list_of<double>(*s, "sizes", path, "sweep");
  K3_CHECK_CTX(!spec.sizes.empty(), at(path, "sweep.sizes"),
               "at least one target size is required");
  spec.tokens_per_param = list_of<double>(*s, "tokens_per_param", path, "sweep");
  spec.flops = list_of<double>(*s, "flops", path, "sweep");
  K3_CHECK_CTX(spec.tokens_per_param.empty() != spec.flops.empty(), at(path, "sweep.flops"),
               "give the token budgets as exactly one of sweep.tokens_per_param and sweep.flops");
  spec.lrs = list_of<double>(*s, "lr", path, "sweep");
  K3_CHECK_CTX(!spec.lrs.empty(), at(path, "sweep.lr"), "at least one learning rate is required");
  spec.batch_sizes = list_of<int64_t>(*s, "batch_size", path, "sweep");
  for (int64_t b : spec.batch_sizes)
    K3_CHECK_CTX(b > 0, at(path, "sweep.batch_size"), "a batch size must be positive");
  spec.seeds = list_of<int64_t>(*s, "seeds", path, "sweep");
  if (const std::string c = string_at(*s, "config", path, "sweep.config"); !c.empty())
    spec.base_config = find_input(c, path, "sweep.config");
  spec.seed_sizes = list_of<double>(*s, "seed_sizes", path, "sweep");
  K3_CHECK_CTX(spec.seed_sizes.empty() || spec.seeds.size() >= 2, at(path, "sweep.seed_sizes"),
               "names the sizes that run every seed: list two seeds or more in sweep.seeds");
  spec.val_data = strings_at(*s, "val_data", path, "sweep.val_data");
  std::set<std::string> columns;
  for (std::string& v : spec.val_data) {
    v = find_input(v, path, "sweep.val_data");
    const std::string stem = fs::path(v).stem().string();
    K3_CHECK_CTX(
        !stem.empty() &&
            stem.find_first_not_of("abcdefghijklmnopqrstuvwxyz"
                                   "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") == std::string::npos,
        at(path, "sweep.val_data"), v,
        ": its name (before the extension) names its results column, so it may hold "
        "only letters, digits, _ and -");
    K3_CHECK_CTX(columns.insert(stem).second, at(path, "sweep.val_data"), "two texts named ", stem,
                 ": their results columns would clash");
  }
  if (const toml::table* set = root["set"].as_table()) flatten(*set, "", path, spec.settings);

  const toml::array* arms = root["arm"].as_array();
  K3_CHECK_CTX(arms && !arms->empty(), at(path, "arm"),
               "at least one [[arm]] (a name and a preset model) is required");
  std::set<std::string> names;
  for (size_t i = 0; i < arms->size(); ++i) {
    const std::string key = "arm[" + std::to_string(i) + "]";
    const toml::table* a = (*arms)[i].as_table();
    K3_CHECK_CTX(a, at(path, key), "expected a table");
    check_keys(*a, {"name", "preset", "sizes", "lr", "set"}, path, key + ".");
    Arm arm;
    arm.name = string_at(*a, "name", path, key + ".name");
    K3_CHECK_CTX(!arm.name.empty() && arm.name.find_first_of(" ,/\"") == std::string::npos,
                 at(path, key + ".name"),
                 "a name without spaces, commas, quotes or slashes is required");
    K3_CHECK_CTX(names.insert(arm.name).second, at(path, key + ".name"), "the name ", arm.name,
                 " is used twice");
    const std::string preset = string_at(*a, "preset", path, key + ".preset");
    K3_CHECK_CTX(!preset.empty(), at(path, key + ".preset"), "a preset model config is required");
    arm.preset = find_input(preset, path, key + ".preset");
    arm.sizes = list_of<double>(*a, "sizes", path, key);
    arm.lrs = list_of<double>(*a, "lr", path, key);
    if (const toml::table* set = (*a)["set"].as_table()) flatten(*set, "", path, arm.settings);
    spec.arms.push_back(std::move(arm));
  }
  for (double size : spec.seed_sizes) {
    bool planned = std::find(spec.sizes.begin(), spec.sizes.end(), size) != spec.sizes.end();
    for (const Arm& arm : spec.arms)
      planned |= std::find(arm.sizes.begin(), arm.sizes.end(), size) != arm.sizes.end();
    K3_CHECK_CTX(planned, at(path, "sweep.seed_sizes"), size,
                 " is not one of sweep.sizes or an arm's sizes");
  }
  return spec;
}

std::string ood_column(const std::string& val_data_path) {
  return "ood_" + fs::path(val_data_path).stem().string();
}

SweepSpec load_sweep_spec(const std::string& path) {
  return parse_sweep_spec(read_file(path), path);
}

}  // namespace k3::sweep
