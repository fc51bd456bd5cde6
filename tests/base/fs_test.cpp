#include "k3/base/fs.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace k3::fs_test {

class AtomicWrite : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/k3-fs-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(AtomicWrite, ASecretIsWrittenWithItsModeWhateverTheUmask) {
  const mode_t old = umask(0);  // the mode asked for, not a permissive umask, decides
  write_file_atomic(dir_ + "/token", "secret\n", 0600);
  umask(old);
  struct stat st {};
  ASSERT_EQ(stat((dir_ + "/token").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(read_file(dir_ + "/token"), "secret\n");
}

TEST_F(AtomicWrite, ASymlinkPlantedAtTheTemporaryNameIsNotFollowed) {
  const std::string victim = dir_ + "/victim", path = dir_ + "/token";
  write_file_atomic(victim, "precious\n");
  std::filesystem::create_symlink(victim, path + ".tmp." + std::to_string(getpid()));
  write_file_atomic(path, "secret\n", 0600);
  EXPECT_EQ(read_file(victim), "precious\n");
  EXPECT_EQ(read_file(path), "secret\n");
  EXPECT_FALSE(std::filesystem::is_symlink(path));
}

}  // namespace k3::fs_test
