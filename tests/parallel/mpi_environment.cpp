// Joins the MPI job when the test binary runs under mpirun (and stays a world of one without it).
#include <gtest/gtest.h>

#include <memory>

#include "k3/dist/runtime.h"

namespace {

class MpiEnvironment : public ::testing::Environment {
 public:
  void SetUp() override { runtime_ = std::make_unique<k3::dist::Runtime>(nullptr, nullptr); }
  void TearDown() override { runtime_.reset(); }

 private:
  std::unique_ptr<k3::dist::Runtime> runtime_;
};

[[maybe_unused]] ::testing::Environment* const kMpi =
    ::testing::AddGlobalTestEnvironment(new MpiEnvironment);

}  // namespace
