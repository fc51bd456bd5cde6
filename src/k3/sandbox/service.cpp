#include "k3/sandbox/service.h"

#include <arpa/inet.h>
#include <httplib.h>

#include <cmath>

#include "k3/base/error.h"
#include "k3/data/tokenizer/tokenizer_files.h"
#include "k3/data/tokenizer/utf8.h"

namespace k3::sandbox {

using nlohmann::json;

bool is_loopback_address(const std::string& host) {
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  return inet_pton(AF_INET6, host.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

namespace {

// A number field of a request: present, a number, in [lo, hi].
double number(const json& j, const std::string& key, double lo, double hi) {
  K3_CHECK(j[key].is_number(), "'", key, "' must be a number");
  const double v = j[key].get<double>();
  K3_CHECK(std::isfinite(v) && v >= lo && v <= hi, "'", key, "' must be in [", lo, ", ", hi,
           "], got ", v);
  return v;
}

uint64_t lowered(const json& j, const std::string& key, uint64_t current, double unit) {
  if (!j.contains(key)) return current;
  const double cap = current ? double(current) / unit : 1e15;
  return uint64_t(std::llround(number(j, key, 1, cap) * unit));
}

std::string text(const json& j, const std::string& key, const std::string& fallback) {
  if (!j.contains(key)) return fallback;
  K3_CHECK(j[key].is_string(), "'", key, "' must be a string");
  return j[key].get<std::string>();
}

std::vector<std::string> strings(const json& j, const std::string& key) {
  if (!j.contains(key)) return {};
  K3_CHECK(j[key].is_array(), "'", key, "' must be an array of strings");
  std::vector<std::string> out;
  for (const auto& v : j[key]) {
    K3_CHECK(v.is_string(), "'", key, "' must be an array of strings");
    out.push_back(v.get<std::string>());
  }
  return out;
}

json parse_body(const httplib::Request& req) {
  if (req.body.empty()) return json::object();
  json j;
  try {
    j = json::parse(req.body);
  } catch (const json::exception&) {
    throw Error("the request body is not valid JSON");
  }
  K3_CHECK(j.is_object(), "the request body must be a JSON object");
  return j;
}

void check_keys(const json& j, std::initializer_list<const char*> known) {
  for (const auto& [key, value] : j.items()) {
    bool ok = false;
    for (const char* k : known) ok = ok || key == k;
    K3_CHECK(ok, "unknown field '", key, "'");
  }
}

void reply(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace) + "\n",
                  "application/json");
}

// Constant-time comparison, so the token cannot be guessed byte by byte from response times.
bool same_token(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i)
    diff |= static_cast<unsigned char>(a[i] ^ b[i % (b.size() ? b.size() : 1)]);
  return diff == 0;
}

struct NotFound : Error {
  using Error::Error;
};
struct TooMany : Error {
  using Error::Error;
};

}  // namespace

Limits limits_from_json(const json& j, const Limits& d) {
  K3_CHECK(j.is_object(), "'limits' must be an object");
  check_keys(j, {"memory_mb", "processes", "cpus", "cpu_seconds", "file_size_mb", "open_files",
                 "disk_mb", "output_bytes", "timeout_s"});
  Limits l = d;
  const double mb = 1 << 20;
  l.memory_bytes = lowered(j, "memory_mb", d.memory_bytes, mb);
  l.processes = lowered(j, "processes", d.processes, 1);
  if (j.contains("cpus")) l.cpus = number(j, "cpus", 0.01, d.cpus > 0 ? d.cpus : 1024);
  l.cpu_seconds = lowered(j, "cpu_seconds", d.cpu_seconds, 1);
  l.file_size_bytes = lowered(j, "file_size_mb", d.file_size_bytes, mb);
  l.open_files = lowered(j, "open_files", d.open_files, 1);
  l.disk_bytes = lowered(j, "disk_mb", d.disk_bytes, mb);
  l.output_bytes = lowered(j, "output_bytes", d.output_bytes, 1);
  if (j.contains("timeout_s")) l.timeout_s = number(j, "timeout_s", 0.001, d.timeout_s);
  return l;
}

Service::Service(ImageStore& store, ServiceOptions options)
    : store_(store), options_(std::move(options)), server_(std::make_unique<httplib::Server>()) {
  K3_CHECK(is_loopback_address(options_.host), "the sandbox service listens on loopback only; '",
           options_.host, "' is not a loopback address");
  K3_CHECK(options_.token.size() >= 16,
           "the sandbox service's token must have at least 16 characters");
  routes();
  server_->set_payload_max_length(wire::kMaxFrame / 2);
  port_ = options_.port == 0
              ? server_->bind_to_any_port(options_.host)
              : (server_->bind_to_port(options_.host, options_.port) ? options_.port : -1);
  K3_CHECK(port_ > 0, "cannot listen on ", options_.host, ":", options_.port);
}

Service::~Service() {
  stop();
  std::lock_guard lock(mutex_);
  sandboxes_.clear();
  pools_.clear();
}

void Service::serve() { server_->listen_after_bind(); }
void Service::stop() { server_->stop(); }

Backend& Service::backend(BackendKind kind) {
  std::lock_guard lock(mutex_);
  auto& b = backends_[int(kind)];
  if (!b) b = make_backend(kind, store_);
  return *b;
}

std::shared_ptr<Sandbox> Service::find(const std::string& id) {
  std::lock_guard lock(mutex_);
  const auto it = sandboxes_.find(id);
  if (it == sandboxes_.end()) throw NotFound("no sandbox '" + id + "'");
  return it->second;
}

std::unique_ptr<Sandbox> Service::start(const std::string& image_ref, BackendKind kind,
                                        const Limits& limits, Pool** from) {
  Backend& b = backend(kind);
  if (const std::string why = b.unavailable_reason(); !why.empty())
    throw Error(std::string("backend ") + backend_name(kind) + " is unavailable: " + why);
  const Image image = store_.resolve(image_ref);
  if (from) *from = nullptr;
  if (!from || options_.warm == 0) return b.create(image, limits);
  Pool* pool = nullptr;
  {
    std::lock_guard lock(mutex_);
    auto& p = pools_[std::string(backend_name(kind)) + "/" + image.digest];
    if (!p) p = std::make_unique<Pool>(b, image, limits, options_.warm, 2);
    pool = p.get();
  }
  *from = pool;
  return pool->acquire();
}

json Service::exec(Sandbox& s, const json& body) {
  check_keys(body, {"argv", "stdin", "env", "cwd", "timeout_s"});
  ExecRequest q;
  q.argv = strings(body, "argv");
  K3_CHECK(!q.argv.empty(), "'argv' must name a command");
  q.stdin_data = text(body, "stdin", "");
  q.env = strings(body, "env");
  q.cwd = text(body, "cwd", "/");
  if (body.contains("timeout_s"))
    q.timeout_ms =
        uint64_t(std::llround(number(body, "timeout_s", 0.001, options_.limits.timeout_s) * 1000));
  const ExecResult r = s.exec(q);
  json out = {{"exit_code", r.exit_code},
              {"signal", r.signal},
              {"timed_out", r.timed_out},
              {"stdout", r.stdout_data},
              {"stderr", r.stderr_data},
              {"stdout_truncated", r.stdout_truncated},
              {"stderr_truncated", r.stderr_truncated},
              {"wall_ms", r.wall_ms},
              {"error", r.error}};
  // JSON strings hold text: output that is not valid UTF-8 (binary) comes exactly as base64 too,
  // beside the text, where such bytes read as U+FFFD.
  for (const auto& [name, bytes] :
       {std::pair{"stdout", &r.stdout_data}, {"stderr", &r.stderr_data}})
    if (data::utf8_valid_run_end(*bytes, 0) != bytes->size())
      out[std::string(name) + "_base64"] = data::base64_encode(*bytes);
  return out;
}

void Service::routes() {
  auto& srv = *server_;
  // Every handler: the token first, then one JSON reply, errors as {"error": "one line"}.
  auto handle = [this](auto&& body) {
    return [this, body](const httplib::Request& req, httplib::Response& res) {
      if (!same_token(req.get_header_value("Authorization"), "Bearer " + options_.token)) {
        reply(res, 401, {{"error", "missing or wrong bearer token"}});
        return;
      }
      try {
        body(req, res);
      } catch (const NotFound& e) {
        reply(res, 404, {{"error", e.message()}});
      } catch (const TooMany& e) {
        reply(res, 429, {{"error", e.message()}});
      } catch (const Error& e) {
        reply(res, 400, {{"error", e.message()}});
      } catch (const std::exception& e) {
        reply(res, 500, {{"error", e.what()}});
      }
    };
  };
  srv.Get("/v1/health", handle([this](const httplib::Request&, httplib::Response& res) {
            std::lock_guard lock(mutex_);
            reply(res, 200, {{"ok", true}, {"sandboxes", sandboxes_.size()}});
          }));
  srv.Get("/v1/images", handle([this](const httplib::Request&, httplib::Response& res) {
            json out = json::array();
            for (const auto& [name, digest] : store_.names())
              out.push_back({{"name", name}, {"digest", digest}});
            reply(res, 200, out);
          }));
  srv.Post("/v1/sandboxes", handle([this](const httplib::Request& req, httplib::Response& res) {
             const json body = parse_body(req);
             check_keys(body, {"image", "backend", "limits"});
             const BackendKind kind = parse_backend(text(body, "backend", "namespaces"));
             const Limits limits = body.contains("limits")
                                       ? limits_from_json(body["limits"], options_.limits)
                                       : options_.limits;
             {
               std::lock_guard lock(mutex_);
               if (sandboxes_.size() >= options_.max_sandboxes)
                 throw TooMany("too many sandboxes (" + std::to_string(options_.max_sandboxes) +
                               " alive)");
             }
             Pool* pool = nullptr;  // a sandbox that lives on is never released to it
             std::shared_ptr<Sandbox> s = start(text(body, "image", "host"), kind, limits,
                                                body.contains("limits") ? nullptr : &pool);
             const std::string id = s->id();
             {
               std::lock_guard lock(mutex_);
               sandboxes_[id] = std::move(s);
             }
             reply(res, 201, {{"id", id}});
           }));
  srv.Post(R"(/v1/sandboxes/([^/]+)/exec)",
           handle([this](const httplib::Request& req, httplib::Response& res) {
             auto s = find(req.matches[1]);
             try {
               reply(res, 200, exec(*s, parse_body(req)));
             } catch (const Error&) {
               if (!s->alive()) {  // it broke: forget it
                 std::lock_guard lock(mutex_);
                 sandboxes_.erase(s->id());
               }
               throw;
             }
           }));
  srv.Put(R"(/v1/sandboxes/([^/]+)/files)",
          handle([this](const httplib::Request& req, httplib::Response& res) {
            auto s = find(req.matches[1]);
            K3_CHECK(req.has_param("path"), "the query parameter 'path' is missing");
            unsigned mode = 0644;
            if (req.has_param("mode")) {
              const std::string m = req.get_param_value("mode");
              K3_CHECK(!m.empty() && m.size() <= 4 &&
                           m.find_first_not_of("01234567") == std::string::npos,
                       "'mode' must be octal (e.g. 755), got '", m, "'");
              mode = unsigned(std::stoul(m, nullptr, 8));
            }
            s->put(req.get_param_value("path"), req.body, mode);
            reply(res, 200, {{"written", req.body.size()}});
          }));
  srv.Get(R"(/v1/sandboxes/([^/]+)/files)",
          handle([this](const httplib::Request& req, httplib::Response& res) {
            auto s = find(req.matches[1]);
            K3_CHECK(req.has_param("path"), "the query parameter 'path' is missing");
            res.set_content(s->get(req.get_param_value("path")), "application/octet-stream");
          }));
  srv.Post(R"(/v1/sandboxes/([^/]+)/snapshot)",
           handle([this](const httplib::Request& req, httplib::Response& res) {
             auto s = find(req.matches[1]);
             const json body = parse_body(req);
             check_keys(body, {"name"});
             reply(res, 201, {{"digest", s->snapshot(text(body, "name", ""))}});
           }));
  srv.Delete(R"(/v1/sandboxes/([^/]+))",
             handle([this](const httplib::Request& req, httplib::Response& res) {
               std::shared_ptr<Sandbox> s = find(req.matches[1]);
               {
                 std::lock_guard lock(mutex_);
                 sandboxes_.erase(s->id());
               }
               s->destroy();
               reply(res, 200, {{"destroyed", s->id()}});
             }));
  // One command in a clean sandbox (from the pool), released after: the common RL step.
  srv.Post("/v1/run", handle([this](const httplib::Request& req, httplib::Response& res) {
             json body = parse_body(req);
             const std::string image = text(body, "image", "host");
             const BackendKind kind = parse_backend(text(body, "backend", "namespaces"));
             body.erase("image");
             body.erase("backend");
             Pool* pool = nullptr;
             auto s = start(image, kind, options_.limits, &pool);
             reply(res, 200, exec(*s, body));
             if (pool)
               pool->release(std::move(s));  // reset or destroyed after the reply, not before
           }));
}

}  // namespace k3::sandbox
