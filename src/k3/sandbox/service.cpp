#include "k3/sandbox/service.h"

#include <arpa/inet.h>

#include <cmath>
#include <regex>
#include <utility>
#include <vector>

#include "k3/base/checksum.h"
#include "k3/base/error.h"
#include "k3/data/tokenizer/tokenizer_files.h"
#include "k3/data/tokenizer/utf8.h"
#include "k3/sandbox/http_server.h"

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

// Compared through their digests, so that neither the bytes nor the length of the token can be
// learnt from response times.
bool same_secret(const std::string& a, const std::string& b) {
  const std::string x = sha256_hex(a), y = sha256_hex(b);
  unsigned char diff = 0;
  for (size_t i = 0; i < x.size(); ++i) diff |= static_cast<unsigned char>(x[i] ^ y[i]);
  return diff == 0;
}

// The most a request body may hold: a file put in one request fits in one agent frame.
constexpr size_t kMaxBody = wire::kMaxFrame / 2;

// What is wrong with how REQ frames its body, or "" (looked at before the body is read, so a
// refused body is never read: the connection closes after an error).
std::pair<int, std::string> body_refusal(const httplib::Request& req) {
  const std::string& m = req.method;
  if (m != "GET" && m != "HEAD" && m != "POST" && m != "PUT" && m != "DELETE")
    return {405, "method " + m + " is not supported"};
  if (req.has_header("Transfer-Encoding"))
    return {411, "a request body needs a Content-Length (Transfer-Encoding is not accepted)"};
  const size_t lengths = req.get_header_value_count("Content-Length");
  if (lengths == 0)
    return (m == "POST" || m == "PUT")
               ? std::pair{411, "a " + m + " request needs a Content-Length"}
               : std::pair{0, std::string()};
  const std::string length = req.get_header_value("Content-Length");
  if (lengths > 1 || length.empty() || length.size() > 18 ||
      length.find_first_not_of("0123456789") != std::string::npos)
    return {400, "the Content-Length header is not one byte count"};
  if (std::stoull(length) > kMaxBody)
    return {413, "the body of " + length + " bytes exceeds the limit of " +
                     std::to_string(kMaxBody) + " bytes"};
  return {0, ""};
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
    : store_(store),
      options_(std::move(options)),
      server_(std::make_unique<BoundedHttpServer>(HttpLimits{})) {
  K3_CHECK(is_loopback_address(options_.host), "the sandbox service listens on loopback only; '",
           options_.host, "' is not a loopback address");
  K3_CHECK(options_.port >= 0 && options_.port <= 65535, "port ", options_.port,
           " is not in 1..65535 (or 0: any free port)");
  K3_CHECK(options_.max_sandboxes >= 1, "at least one sandbox must be allowed (max_sandboxes 0)");
  K3_CHECK(options_.token.size() >= 16,
           "the sandbox service's token must have at least 16 characters");
  routes();
  server_->set_payload_max_length(kMaxBody);
  port_ = options_.port == 0
              ? server_->bind_to_any_port(options_.host)
              : (server_->bind_to_port(options_.host, options_.port) ? options_.port : -1);
  K3_CHECK(port_ > 0, "cannot listen on ", options_.host, ":", options_.port);
  server_->widen_backlog();
}

Service::~Service() {
  stop();
  std::unordered_map<std::string, PoolEntry> pools;
  {
    std::lock_guard lock(mutex_);
    sandboxes_.clear();
    pools.swap(pools_);
  }
  // Outside the lock: a pool's threads may be asking for room (which takes it) as it stops them.
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
  if (it == sandboxes_.end()) throw NotFound("no sandbox '" + printable(id) + "'");
  return it->second;
}

size_t Service::alive_locked(bool with_asks) const {
  size_t n = sandboxes_.size() + admitted_ + retiring_;
  for (const auto& [key, entry] : pools_)
    n += entry.pool->held() - (with_asks ? 0 : entry.pool->asking());
  return n;
}

Service::Admitted::Admitted(Admitted&& o) noexcept
    : service(std::exchange(o.service, nullptr)),
      sandbox(std::move(o.sandbox)),
      pool(std::move(o.pool)) {}

Service::Admitted::~Admitted() {
  if (!service) return;                                    // moved from
  if (sandbox && pool) pool->release(std::move(sandbox));  // reset or destroyed in the background
  sandbox.reset();
  std::lock_guard lock(service->mutex_);
  --service->admitted_;
}

Service::Admitted Service::start(const std::string& image_ref, BackendKind kind,
                                 const Limits& limits, bool pooled) {
  const Image image = store_.resolve(image_ref);  // a bad name is the request's fault first
  Backend& b = backend(kind);
  if (const std::string why = b.unavailable_reason(); !why.empty())
    throw Error(std::string("backend ") + backend_name(kind) + " is unavailable: " + why);
  const size_t cap = options_.max_sandboxes;
  std::shared_ptr<Pool> pool;
  std::vector<std::shared_ptr<Pool>> dropped;  // destroyed below, outside the lock
  size_t dropped_held = 0;
  bool claimed = false;
  {
    std::lock_guard lock(mutex_);
    const auto too_many = [&] {
      const size_t users = sandboxes_.size() + admitted_;
      return TooMany("too many sandboxes: " + std::to_string(cap) + " may live, " +
                     std::to_string(users) + " are users', " +
                     std::to_string(alive_locked() - users) + " warm, resetting or ending");
    };
    if (sandboxes_.size() + admitted_ >= cap) throw too_many();
    const std::string key = std::string(backend_name(kind)) + "/" + image.digest;
    if (pooled && options_.warm > 0) {
      PoolEntry& e = pools_[key];
      if (!e.pool)
        e.pool = std::make_shared<Pool>(b, image, limits, options_.warm, 2, Pool::kDefaultMaxUses,
                                        [this, cap](const std::function<void()>& starting) {
                                          std::lock_guard room_lock(mutex_);
                                          if (alive_locked(true) > cap)
                                            return false;  // this ask counted
                                          starting();
                                          return true;
                                        });
      e.last_use = ++uses_;
      pool = e.pool;
    }
    // Room for one more: a sandbox of this image's own pool, idle or starting, claimed for this
    // user is room enough (acquiring it starts none); else the other pools, least recently used
    // first, are dropped. The pools' background starts still asking for room do not count: each
    // is refused after this. A dropped pool's sandboxes count (as retiring) until destroyed,
    // which happens before this one starts.
    claimed = pool && pool->claim();
    while (!claimed && alive_locked() - dropped_held >= cap) {
      auto lru = pools_.end();
      for (auto it = pools_.begin(); it != pools_.end(); ++it)
        if (it->second.pool != pool &&
            (lru == pools_.end() || it->second.last_use < lru->second.last_use))
          lru = it;
      if (lru == pools_.end()) throw too_many();
      const size_t held = lru->second.pool->held();
      dropped_held += held;
      retiring_ += held;
      dropped.push_back(std::move(lru->second.pool));
      pools_.erase(lru);
    }
    ++admitted_;
  }
  Admitted a(this, pool);
  for (auto& p : dropped) p->stop();  // destroys its sandboxes, though a user may still hold it
  dropped.clear();
  if (dropped_held > 0) {
    std::lock_guard lock(mutex_);
    retiring_ -= dropped_held;
  }
  a.sandbox = pool ? pool->acquire(claimed) : b.create(image, limits);
  return a;
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
  // Every request, whatever its route and method: the token first (exactly one Authorization
  // header, exactly "Bearer TOKEN"), then its body's framing, before cpp-httplib reads the body.
  srv.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (req.get_header_value_count("Authorization") != 1 ||
        !same_secret(req.get_header_value("Authorization"), "Bearer " + options_.token)) {
      reply(res, 401, {{"error", "missing or wrong bearer token"}});
      return httplib::Server::HandlerResponse::Handled;
    }
    const auto [status, why] = body_refusal(req);
    if (status == 0) return httplib::Server::HandlerResponse::Unhandled;
    reply(res, status, {{"error", why}});
    return httplib::Server::HandlerResponse::Handled;
  });
  // Which methods each route takes: a known path asked with another method is a 405.
  auto methods = std::make_shared<std::vector<std::pair<std::regex, std::string>>>();
  auto route = [&srv, methods](const std::string& method, const std::string& pattern,
                               httplib::Server::Handler handler) {
    if (method == "GET") srv.Get(pattern, std::move(handler));
    if (method == "POST") srv.Post(pattern, std::move(handler));
    if (method == "PUT") srv.Put(pattern, std::move(handler));
    if (method == "DELETE") srv.Delete(pattern, std::move(handler));
    methods->emplace_back(std::regex(pattern), method);
  };
  // Every error status has a JSON body: those that cpp-httplib answers itself get one here.
  srv.set_error_handler(httplib::Server::HandlerWithResponse(
      [methods](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        std::string allowed;
        for (const auto& [pattern, method] : *methods)
          if (std::regex_match(req.path, pattern))
            allowed += (allowed.empty() ? "" : ", ") + method;
        std::string why = "the request failed (HTTP " + std::to_string(res.status) + ")";
        if (res.status == 404 && !allowed.empty()) {
          res.status = 405;
          why = "method " + req.method + " is not allowed on " + printable(req.path) +
                " (it takes " + allowed + ")";
        } else if (res.status == 404) {
          why = "no such route: " + printable(req.path);
        } else if (res.status == 400) {
          why = "the request is not valid HTTP";
        } else if (res.status == 414) {
          why = "the request target is too long";
        } else if (res.status == 416) {
          why = "the Range header is not valid";
        }
        reply(res, res.status, {{"error", why}});
        return httplib::Server::HandlerResponse::Unhandled;  // Handled would apply Range headers
      }));
  srv.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
        reply(res, 500, {{"error", "internal error"}});
      });
  // Every handler: one JSON reply, errors as {"error": "one line"}.
  auto handle = [this](auto&& body) {
    return [this, body](const httplib::Request& req, httplib::Response& res) {
      try {
        body(req, res);
      } catch (const DamagedStore& e) {
        reply(res, 500, {{"error", e.message()}});
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
  route("GET", "/v1/health", handle([this](const httplib::Request&, httplib::Response& res) {
          std::lock_guard lock(mutex_);
          reply(res, 200,
                {{"ok", true},
                 {"sandboxes", sandboxes_.size()},  // kept by id
                 {"alive", alive_locked()},         // every live one, the pools' included
                 {"pools", pools_.size()},
                 {"max_sandboxes", options_.max_sandboxes}});
        }));
  route("GET", "/v1/images", handle([this](const httplib::Request&, httplib::Response& res) {
          json out = json::array();
          for (const auto& [name, digest] : store_.names())
            out.push_back({{"name", name}, {"digest", digest}});
          reply(res, 200, out);
        }));
  route("POST", "/v1/sandboxes",
        handle([this](const httplib::Request& req, httplib::Response& res) {
          const json body = parse_body(req);
          check_keys(body, {"image", "backend", "limits"});
          const BackendKind kind = parse_backend(text(body, "backend", "namespaces"));
          const Limits limits = body.contains("limits")
                                    ? limits_from_json(body["limits"], options_.limits)
                                    : options_.limits;
          // A sandbox that lives on is never released to a pool: one of its own when limits are
          // asked for, else taken from the pool for good.
          Admitted a = start(text(body, "image", "host"), kind, limits, !body.contains("limits"));
          const std::string id = a.sandbox->id();
          {
            std::lock_guard lock(mutex_);
            sandboxes_[id] = std::move(a.sandbox);
          }
          reply(res, 201, {{"id", id}});
        }));
  route("POST", R"(/v1/sandboxes/([^/]+)/exec)",
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
  route("PUT", R"(/v1/sandboxes/([^/]+)/files)",
        handle([this](const httplib::Request& req, httplib::Response& res) {
          auto s = find(req.matches[1]);
          K3_CHECK(req.has_param("path"), "the query parameter 'path' is missing");
          unsigned mode = 0644;
          if (req.has_param("mode")) {
            const std::string m = req.get_param_value("mode");
            K3_CHECK(
                !m.empty() && m.size() <= 4 && m.find_first_not_of("01234567") == std::string::npos,
                "'mode' must be octal (e.g. 755), got '", m, "'");
            mode = unsigned(std::stoul(m, nullptr, 8));
          }
          s->put(req.get_param_value("path"), req.body, mode);
          reply(res, 200, {{"written", req.body.size()}});
        }));
  route("GET", R"(/v1/sandboxes/([^/]+)/files)",
        handle([this](const httplib::Request& req, httplib::Response& res) {
          auto s = find(req.matches[1]);
          K3_CHECK(req.has_param("path"), "the query parameter 'path' is missing");
          res.set_content(s->get(req.get_param_value("path")), "application/octet-stream");
        }));
  route("POST", R"(/v1/sandboxes/([^/]+)/snapshot)",
        handle([this](const httplib::Request& req, httplib::Response& res) {
          auto s = find(req.matches[1]);
          const json body = parse_body(req);
          check_keys(body, {"name"});
          reply(res, 201, {{"digest", s->snapshot(text(body, "name", ""))}});
        }));
  route("DELETE", R"(/v1/sandboxes/([^/]+))",
        handle([this](const httplib::Request& req, httplib::Response& res) {
          std::shared_ptr<Sandbox> s = find(req.matches[1]);
          {
            std::lock_guard lock(mutex_);
            sandboxes_.erase(s->id());
            ++retiring_;  // counted until destroyed
          }
          s->destroy();
          {
            std::lock_guard lock(mutex_);
            --retiring_;
          }
          reply(res, 200, {{"destroyed", s->id()}});
        }));
  // One command in a clean sandbox (from the pool), released after: the common RL step.
  route("POST", "/v1/run", handle([this](const httplib::Request& req, httplib::Response& res) {
          json body = parse_body(req);
          const std::string image = text(body, "image", "host");
          const BackendKind kind = parse_backend(text(body, "backend", "namespaces"));
          body.erase("image");
          body.erase("backend");
          const Admitted a = start(image, kind, options_.limits, true);
          reply(res, 200, exec(*a.sandbox, body));  // released to its pool after the reply
        }));
}

}  // namespace k3::sandbox
