#include "k3/train/observe/history.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>

#include "k3/base/error.h"

namespace k3::train {

void append_history(const std::string& run_dir, nlohmann::json event) {
  char stamp[32];
  const std::time_t now = std::time(nullptr);
  std::tm utc;
  gmtime_r(&now, &utc);
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", &utc);
  event["time"] = stamp;
  const std::string path = run_dir + "/history.jsonl", line = event.dump() + "\n";
  // One write of a whole line in append mode: a crash never leaves half a record behind another.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  K3_CHECK_CTX(fd >= 0, (ErrorContext{path, "", -1}), "cannot open: ", std::strerror(errno));
  const bool written = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  const int err = errno;
  ::fsync(fd);
  ::close(fd);
  K3_CHECK_CTX(written, (ErrorContext{path, "", -1}), "cannot write: ", std::strerror(err));
}

}  // namespace k3::train
