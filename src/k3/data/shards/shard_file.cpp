#include "k3/data/shards/shard_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>
#include <utility>

#include "k3/base/error.h"

namespace k3::data::shards {

ShardFile::ShardFile(std::string path) : path_(std::move(path)) {
  const ErrorContext ctx{path_, "", -1};
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  K3_CHECK_CTX(fd >= 0, ctx, "cannot open: ", std::strerror(errno));
  struct stat st {};
  const bool sized = ::fstat(fd, &st) == 0;
  map_bytes_ = sized ? static_cast<uint64_t>(st.st_size) : 0;
  if (map_bytes_ > 0) {
    void* m = ::mmap(nullptr, map_bytes_, PROT_READ, MAP_SHARED, fd, 0);
    map_ = m == MAP_FAILED ? nullptr : static_cast<const char*>(m);
  }
  const int saved = errno;
  ::close(fd);
  K3_CHECK_CTX(sized && (map_bytes_ == 0 || map_), ctx, "cannot map: ", std::strerror(saved));
  try {
    header_ =
        decode_shard_header(std::string_view(map_ ? map_ : "", map_bytes_), map_bytes_, path_);
    const std::span<const uint64_t> ends = document_ends();
    uint64_t previous = 0;
    for (size_t i = 0; i < ends.size(); ++i) {
      K3_CHECK_CTX(ends[i] > previous && ends[i] <= header_.tokens, ctx, "document end ", ends[i],
                   " at byte ", header_.index_offset() + 8 * i, " is out of order (after ",
                   previous, ", at most ", header_.tokens, " tokens)");
      previous = ends[i];
    }
    K3_CHECK_CTX(previous == header_.tokens, ctx, "the document index ends at token ", previous,
                 " (byte ", header_.index_offset() + 8 * (ends.empty() ? 0 : ends.size() - 1),
                 "), not at the shard's ", header_.tokens, " tokens");
  } catch (...) {
    if (map_) ::munmap(const_cast<char*>(map_), map_bytes_);
    throw;
  }
}

ShardFile::~ShardFile() {
  if (map_) ::munmap(const_cast<char*>(map_), map_bytes_);
}

ShardFile::ShardFile(ShardFile&& other) noexcept
    : path_(std::move(other.path_)),
      header_(std::move(other.header_)),
      map_(std::exchange(other.map_, nullptr)),
      map_bytes_(std::exchange(other.map_bytes_, 0)) {}

const void* ShardFile::token_data() const { return map_ + kShardHeaderBytes; }

void ShardFile::append_to(TokenView& view) const {
  view.append(token_data(), static_cast<int64_t>(header_.tokens),
              static_cast<int>(header_.token_bytes));
}

std::span<const uint64_t> ShardFile::document_ends() const {
  return {reinterpret_cast<const uint64_t*>(map_ + header_.index_offset()),
          static_cast<size_t>(header_.documents)};
}

}  // namespace k3::data::shards
