#include "k3/data/shards/input_documents.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "k3/base/error.h"

namespace k3::data::shards {

namespace fs = std::filesystem;

namespace {

bool has_extension(const fs::path& p) {
  return p.extension() == ".txt" || p.extension() == ".jsonl";
}

bool blank(const std::string& line) { return line.find_first_not_of(" \t\r") == std::string::npos; }

}  // namespace

InputDocuments::InputDocuments(std::string path)
    : path_(std::move(path)), buffer_(size_t{1} << 20) {
  const ErrorContext ctx{path_, "", -1};
  std::error_code ec;
  const fs::file_status status = fs::status(path_, ec);
  K3_CHECK_CTX(fs::exists(status), ctx, "no such file or directory");
  if (fs::is_directory(status)) {
    for (const fs::directory_entry& e : fs::directory_iterator(path_, ec))
      if (e.is_regular_file() && has_extension(e.path())) files_.push_back(e.path().string());
    std::sort(files_.begin(), files_.end());
    K3_CHECK_CTX(!files_.empty(), ctx, "a directory without .txt or .jsonl files");
  } else {
    K3_CHECK_CTX(has_extension(path_), ctx,
                 "expected a .txt file (documents separated by blank lines), a .jsonl file (a "
                 "\"text\" per line) or a directory of them");
    files_.push_back(path_);
  }
  for (const std::string& f : files_) total_bytes_ += fs::file_size(f, ec);
}

InputDocuments::~InputDocuments() {
  if (file_) std::fclose(file_);
}

void InputDocuments::rewind() {
  if (file_) close_file();
  file_index_ = 0;
  done_bytes_ = 0;
}

bool InputDocuments::open_next_file() {
  if (file_index_ == files_.size()) return false;
  const std::string& f = files_[file_index_++];
  file_ = std::fopen(f.c_str(), "rb");
  K3_CHECK_CTX(file_, (ErrorContext{f, "", -1}), "cannot open: ", std::strerror(errno));
  jsonl_ = fs::path(f).extension() == ".jsonl";
  line_number_ = 0;
  line_end_ = 0;
  begin_ = end_ = 0;
  return true;
}

void InputDocuments::close_file() {
  std::fclose(file_);
  file_ = nullptr;
  done_bytes_ += line_end_;
  line_end_ = 0;
}

bool InputDocuments::next_line(std::string& line) {
  line.clear();
  for (;;) {
    if (begin_ == end_) {
      begin_ = 0;
      end_ = std::fread(buffer_.data(), 1, buffer_.size(), file_);
      K3_CHECK_CTX(!std::ferror(file_), (ErrorContext{files_[file_index_ - 1], "", -1}),
                   "read failed at byte ", line_end_, ": ", std::strerror(errno));
      if (end_ == 0) {
        if (line.empty()) return false;
        break;  // a last line without "\n"
      }
    }
    const char* start = buffer_.data() + begin_;
    const char* nl = static_cast<const char*>(std::memchr(start, '\n', end_ - begin_));
    const size_t n = nl ? static_cast<size_t>(nl - start) : end_ - begin_;
    line.append(start, n);
    begin_ += n + (nl ? 1 : 0);
    line_end_ += n + (nl ? 1 : 0);
    if (nl) break;
  }
  ++line_number_;
  return true;
}

bool InputDocuments::next(std::string& out) {
  out.clear();
  for (;;) {
    if (!file_ && !open_next_file()) return false;
    if (jsonl_ ? next_json(out) : next_text(out)) return true;
    close_file();  // a document never runs on into the next file
  }
}

bool InputDocuments::next_text(std::string& out) {
  std::string line;
  while (next_line(line)) {
    if (blank(line)) {
      if (!out.empty()) return true;
      continue;
    }
    if (!out.empty()) out += '\n';
    out += line;
  }
  return !out.empty();
}

bool InputDocuments::next_json(std::string& out) {
  std::string line;
  while (next_line(line)) {
    if (blank(line)) continue;
    const std::string& f = files_[file_index_ - 1];
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw Error("line " + std::to_string(line_number_) + ": malformed JSON (" + e.what() + ")",
                  ErrorContext{f, "", -1});
    }
    K3_CHECK_CTX(j.is_object() && j.contains("text") && j["text"].is_string(),
                 (ErrorContext{f, "", -1}), "line ", line_number_,
                 ": expected an object with a \"text\" string");
    out = j["text"].get<std::string>();
    if (!out.empty()) return true;
  }
  return false;
}

}  // namespace k3::data::shards
