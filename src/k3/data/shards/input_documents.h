// The documents of one prepare input, streamed in bounded memory (one read buffer and the
// document at hand):
//   - a .txt file: documents separated by blank lines (lines of nothing but spaces, tabs or a
//     carriage return); a document is its lines joined by "\n";
//   - a .jsonl file: one JSON object per line, its "text" string the document (blank lines
//     skipped);
//   - a directory: its own .txt and .jsonl files (not its subdirectories), in byte order of
//     their names, one after the other.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace k3::data::shards {

class InputDocuments {
 public:
  // Throws a k3::Error naming PATH when it is missing, neither a .txt nor a .jsonl file, or a
  // directory holding none.
  explicit InputDocuments(std::string path);
  ~InputDocuments();
  InputDocuments(const InputDocuments&) = delete;
  InputDocuments& operator=(const InputDocuments&) = delete;

  // The next document (never empty) into OUT; false after the last. A malformed .jsonl line is a
  // k3::Error naming the file and the line.
  bool next(std::string& out);
  void rewind();  // back to the first document

  const std::string& path() const { return path_; }
  uint64_t total_bytes() const { return total_bytes_; }            // of all its files
  uint64_t bytes_read() const { return done_bytes_ + line_end_; }  // in this pass

 private:
  bool open_next_file();  // false after the last
  void close_file();
  bool next_line(std::string& line);  // false at the end of the open file
  bool next_text(std::string& out);
  bool next_json(std::string& out);

  std::string path_;
  std::vector<std::string> files_;
  uint64_t total_bytes_ = 0;
  size_t file_index_ = 0;  // of the open file + 1; 0 before the first
  std::FILE* file_ = nullptr;
  bool jsonl_ = false;
  int64_t line_number_ = 0;  // in the open file
  uint64_t done_bytes_ = 0;  // of the files before the open one
  uint64_t line_end_ = 0;    // bytes of the open file consumed
  std::vector<char> buffer_;
  size_t begin_ = 0, end_ = 0;  // unread bytes of buffer_
};

}  // namespace k3::data::shards
