// A fuzzer of the agent's wire protocol (wire.h): frames made from valid ones by mutation, fed to
// the decoders in this process and to a live agent inside a sandbox. Nothing may crash: a
// malformed message is a WireError here, and an error reply from the agent, which answers on.
// Deterministic (a fixed seed); a fixed count here, and as long as $K3LAB_FUZZ_SECONDS says when
// it is set (bench/sandbox_fuzz.sh).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <random>

#include "fixture.h"
#include "k3/sandbox/wire.h"

namespace k3::sandbox::testing::wire_fuzz {
namespace {

// Whether another round fits: COUNT rounds, or until $K3LAB_FUZZ_SECONDS have passed.
class FuzzBudget {
 public:
  explicit FuzzBudget(size_t count) : count_(count) {
    if (const char* s = std::getenv("K3LAB_FUZZ_SECONDS")) seconds_ = std::atof(s);
  }
  bool another() {
    ++done_;
    if (seconds_ <= 0) return done_ <= count_;
    return std::chrono::steady_clock::now() - start_ < std::chrono::duration<double>(seconds_);
  }
  size_t done() const { return done_ - 1; }

 private:
  size_t count_, done_ = 0;
  double seconds_ = 0;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// Valid requests of every kind, to mutate.
std::vector<std::string> seed_requests() {
  wire::ExecRequest exec;
  exec.argv = {"/bin/echo", "fuzz"};
  exec.env = {"PATH=/bin"};
  exec.timeout_ms = 2000;
  exec.output_cap_bytes = 4096;
  std::vector<std::string> seeds = {wire::encode(exec)};
  const auto op = [](wire::Op o) {
    wire::Writer w;
    w.u64(uint64_t(o));
    return w;
  };
  seeds.push_back(op(wire::Op::kPing).bytes());
  wire::Writer put = op(wire::Op::kPut);
  put.str("/tmp/fuzz/file");
  put.str("contents");
  put.u64(0644);
  seeds.push_back(put.bytes());
  wire::Writer get = op(wire::Op::kGet);
  get.str("/etc/hostname");
  seeds.push_back(get.bytes());
  seeds.push_back(op(wire::Op::kLayer).bytes());
  wire::Writer reset = op(wire::Op::kReset);
  reset.str("nonce");
  reset.strs({"tmp/fuzz"});
  seeds.push_back(reset.bytes());
  return seeds;
}

// Values that break length and count fields (an overflow when multiplied, the frame limit).
constexpr uint64_t kEdgeValues[] = {0,          1,          7,          8,
                                    255,        1ull << 31, 1ull << 32, 1ull << 61,
                                    1ull << 63, ~0ull,      ~0ull - 7,  wire::kMaxFrame};

// One mutation of BYTES: flipped bytes, an edge value written over an 8-byte field, a cut, an
// insertion, or random bytes appended.
std::string mutate(std::string bytes, std::mt19937_64& rng) {
  const size_t rounds = 1 + rng() % 4;
  for (size_t i = 0; i < rounds; ++i) {
    const size_t at = bytes.empty() ? 0 : rng() % bytes.size();
    switch (rng() % 5) {
      case 0:
        if (!bytes.empty()) bytes[at] = char(rng());
        break;
      case 1: {
        wire::Writer edge;
        edge.u64(kEdgeValues[rng() % std::size(kEdgeValues)]);
        const size_t field = at / 8 * 8;
        if (field + 8 <= bytes.size()) bytes.replace(field, 8, edge.bytes());
        break;
      }
      case 2:
        bytes.resize(at);
        break;
      case 3:
        bytes.insert(at, std::string(1 + rng() % 16, char(rng())));
        break;
      default:
        for (size_t n = rng() % 32; n > 0; --n) bytes.push_back(char(rng()));
    }
  }
  return bytes;
}

// Decodes BYTES every way k3lab or the agent would; false (with a failure) if anything but a
// WireError came out.
bool decode_every_way(const std::string& bytes) {
  const std::function<void()> decoders[] = {[&] {
                                              wire::Reader in(bytes);
                                              in.u64();
                                              wire::decode_exec_request(in);
                                            },
                                            [&] { wire::decode_exec_result(bytes); },
                                            [&] { wire::decode_tree(bytes); },
                                            [&] {
                                              wire::Reader in(bytes);
                                              in.u64();
                                              in.str();
                                              in.strs();
                                            }};
  for (const auto& decode : decoders) {
    try {
      decode();
    } catch (const wire::WireError&) {
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not a WireError: " << e.what();
      return false;
    }
  }
  return true;
}

TEST(SandboxWire, MutatedMessagesAreDecodedOrRefusedWithAWireError) {
  std::mt19937_64 rng(41);
  std::vector<std::string> seeds = seed_requests();
  wire::ExecResult result;
  result.stdout_data = "out";
  result.error = "why";
  seeds.push_back(wire::encode(result));
  seeds.push_back(wire::encode(
      std::vector<wire::TreeEntry>{{"a", 040755, "", true}, {"a/b", 0100644, "bytes", false}}));
  FuzzBudget budget(20000);
  while (budget.another())
    if (!decode_every_way(mutate(seeds[rng() % seeds.size()], rng))) break;
  // A frame's length past the limit is refused before anything is allocated.
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  wire::Writer huge;
  huge.u64(~0ull);
  ASSERT_EQ(write(fds[1], huge.bytes().data(), 8), 8);
  close(fds[1]);
  EXPECT_THROW(wire::read_frame(fds[0]), wire::WireError);
  close(fds[0]);
}

// The replies in OUT (frames), as (failed, error) pairs; stops at a cut frame.
std::vector<std::pair<bool, std::string>> replies_in(const std::string& out) {
  std::vector<std::pair<bool, std::string>> replies;
  wire::Reader frames(out);
  try {
    for (;;) {
      wire::Reader reply(frames.str());  // a frame is a length and its bytes, as a string is
      const bool failed = reply.u64() != 0;
      replies.emplace_back(failed, reply.str());
    }
  } catch (const wire::WireError&) {
  }
  return replies;
}

// A second agent, started as a command of a sandbox, is sent batches of mutated requests on its
// stdin and answers each on its stdout; a malformed request and a ping end each batch.
TEST_F(SandboxTest, AnAgentAnswersMutatedRequestsAndStaysUp) {
  std::mt19937_64 rng(41);
  const std::vector<std::string> seeds = seed_requests();
  wire::Writer ping, malformed;
  ping.u64(uint64_t(wire::Op::kPing));
  malformed.u64(uint64_t(wire::Op::kExec));  // an exec request with none of its fields
  FuzzBudget budget(300);
  auto s = make();
  for (bool more = true; more;) {
    std::vector<std::string> sent;
    while (sent.size() < 100 && (more = budget.another()))
      sent.push_back(mutate(seeds[rng() % seeds.size()], rng));
    sent.insert(sent.end(), {malformed.bytes(), ping.bytes()});
    ExecRequest q;
    q.argv = {"/.k3lab-agent", "--stdio"};  // no shell: a request may remove /bin
    for (const auto& payload : sent) {
      wire::Writer frame;
      frame.str(payload);
      q.stdin_data += frame.bytes();
    }
    q.output_cap_bytes = 64 << 20;
    const ExecResult r = s->exec(q);
    ASSERT_EQ(r.exit_code, 0) << "signal " << r.signal << ": " << r.error << r.stderr_data;
    const auto replies = replies_in(r.stdout_data);
    ASSERT_EQ(replies.size(), sent.size() + 1) << "the ready message and a reply to each";
    EXPECT_EQ(replies[replies.size() - 2],
              std::make_pair(true, std::string("malformed request: truncated message")));
    EXPECT_EQ(replies.back(), std::make_pair(false, std::string()));
  }
  EXPECT_GE(budget.done(), 300u);
  s->put("/still-answering", "yes");
  EXPECT_EQ(s->get("/still-answering"), "yes") << "the sandbox's own agent answers too";
}

}  // namespace
}  // namespace k3::sandbox::testing::wire_fuzz
