// main() of the test binaries that also run under mpirun: MPI starts before the tests (a world
// of one without a launcher), and a test that fails on one rank ends the whole job at once, so
// the other ranks never wait forever in a collective that rank skipped.
#include <gtest/gtest.h>

#include "k3/dist/runtime.h"

namespace {

class EndJobOnFailure : public testing::EmptyTestEventListener {
  void OnTestEnd(const testing::TestInfo& info) override {
    if (info.result()->Failed() && k3::dist::Runtime::world_size() > 1)
      k3::dist::fail(std::string("test ") + info.test_suite_name() + "." + info.name() + " failed");
  }
};

}  // namespace

int main(int argc, char** argv) {
  k3::dist::Runtime mpi(&argc, &argv);
  testing::InitGoogleTest(&argc, argv);
  testing::UnitTest::GetInstance()->listeners().Append(new EndJobOnFailure);
  return RUN_ALL_TESTS();
}
