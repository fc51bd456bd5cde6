// `k3lab sandbox serve`: sandboxes over an HTTP JSON API on the loopback interface, for RL and
// evaluation loops (docs/sandbox.md has the API). Every request carries the bearer token; every
// bad request gets one clear error line; no sandbox's behaviour can take the service down (a
// sandbox that breaks is destroyed and its request fails).
#pragma once

#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>

#include "k3/sandbox/pool.h"
#include "k3/sandbox/sandbox.h"

namespace k3::sandbox {

class BoundedHttpServer;

struct ServiceOptions {
  std::string host = "127.0.0.1";  // must be a loopback address
  int port = 0;                    // 1..65535, or 0: any free port (see Service::port)
  std::string token;               // required, at least 16 characters
  Limits limits;                   // each sandbox's, and the most a request may ask for
  size_t warm = 4;                 // warm sandboxes per (image, backend) pool; 0: no pools
  size_t max_sandboxes = 256;      // alive at once
};

// True for 127.0.0.0/8 and ::1 (as text).
bool is_loopback_address(const std::string& host);

// Limits from a request's "limits" object over DEFAULTS; each may only be lowered. Bad keys or
// values: an Error naming them.
Limits limits_from_json(const nlohmann::json& j, const Limits& defaults);

class Service {
 public:
  Service(ImageStore& store, ServiceOptions options);
  ~Service();
  int port() const { return port_; }  // bound in the constructor
  void serve();                       // blocks until stop()
  void stop();

 private:
  void routes();
  Backend& backend(BackendKind kind);
  std::shared_ptr<Sandbox> find(const std::string& id);
  // A new sandbox; with POOL, from the pool of its backend and image when the service keeps one
  // (*POOL is then that pool, else null).
  std::unique_ptr<Sandbox> start(const std::string& image, BackendKind kind, const Limits& limits,
                                 Pool** pool = nullptr);
  nlohmann::json exec(Sandbox& s, const nlohmann::json& body);

  ImageStore& store_;
  ServiceOptions options_;
  std::unique_ptr<BoundedHttpServer> server_;
  int port_ = 0;
  std::mutex mutex_;
  std::unique_ptr<Backend> backends_[2];
  std::unordered_map<std::string, std::unique_ptr<Pool>> pools_;  // "backend/image digest"
  std::unordered_map<std::string, std::shared_ptr<Sandbox>> sandboxes_;
};

}  // namespace k3::sandbox
