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
  size_t max_sandboxes = 256;      // alive at once, the pools' warm and resetting ones included
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
  // A sandbox admitted under max_sandboxes: counted as a user's from admission until this ends,
  // by which time it is kept by id, handed back to its pool or destroyed.
  struct Admitted {
    Admitted(Service* s, std::shared_ptr<Pool> from) : service(s), pool(std::move(from)) {}
    Admitted(Admitted&& other) noexcept;
    Admitted& operator=(Admitted&&) = delete;
    ~Admitted();  // releases a sandbox still held, then uncounts it
    Service* service;
    std::unique_ptr<Sandbox> sandbox;
    std::shared_ptr<Pool> pool;  // where it came from, or null
  };
  // A new sandbox; POOLED: from the pool of its backend and image when the service keeps one.
  // Room under the cap is made by dropping the least recently used other pools; without room, a
  // TooMany error.
  Admitted start(const std::string& image, BackendKind kind, const Limits& limits, bool pooled);
  // Every live sandbox: users', pools', retiring ones; WITH_ASKS: and the pools' starts still
  // asking for room (none alive yet, each refused if the answer would pass the cap).
  size_t alive_locked(bool with_asks = false) const;
  nlohmann::json exec(Sandbox& s, const nlohmann::json& body);

  ImageStore& store_;
  ServiceOptions options_;
  std::unique_ptr<BoundedHttpServer> server_;
  int port_ = 0;
  std::mutex mutex_;
  std::unique_ptr<Backend> backends_[2];
  struct PoolEntry {
    std::shared_ptr<Pool> pool;
    uint64_t last_use;
  };
  std::unordered_map<std::string, PoolEntry> pools_;  // by "backend/image digest"
  uint64_t uses_ = 0;
  std::unordered_map<std::string, std::shared_ptr<Sandbox>> sandboxes_;
  size_t admitted_ = 0;  // users' sandboxes between admission and their Admitted's end
  size_t retiring_ = 0;  // sandboxes of dropped pools and deleted ones not yet destroyed
};

}  // namespace k3::sandbox
