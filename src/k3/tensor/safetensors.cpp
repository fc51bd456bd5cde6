#include "k3/tensor/safetensors.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "k3/base/error.h"
#include "k3/base/fs.h"

namespace k3 {

using nlohmann::json;

namespace {

constexpr const char* kMetadataKey = "__metadata__";

bool one_line(const std::string& s) {
  return std::none_of(s.begin(), s.end(),
                      [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; });
}

// A name from a header as it can appear in a one-line message: JSON-quoted when it holds control
// characters (the parser has already refused invalid UTF-8).
std::string printable(const std::string& name) { return one_line(name) ? name : json(name).dump(); }

// A header value for a message, shortened when long (at a UTF-8 character boundary).
std::string shown(const json& v) {
  std::string s = v.dump();
  if (s.size() <= 40) return s;
  size_t cut = 37;
  while ((s[cut] & 0xC0) == 0x80) --cut;
  return s.substr(0, cut) + "...";
}

// Parses the header text, refusing a key given twice in any object: the JSON parser would keep
// the last one silently, so a second entry could replace a tensor (or one of its fields) unseen.
json parse_header(const std::string& text, const std::string& origin) {
  std::vector<std::set<std::string>> keys;  // seen in each object being parsed, outermost first
  std::string tensor;                       // the latest top-level key, to name in errors
  auto refuse_repeated_keys = [&](int, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) keys.emplace_back();
    if (event == json::parse_event_t::object_end) keys.pop_back();
    if (event == json::parse_event_t::key) {
      const auto& key = parsed.get_ref<const std::string&>();
      if (keys.size() == 1) tensor = key;
      K3_CHECK_CTX(keys.back().insert(key).second, (ErrorContext{origin, printable(tensor), -1}),
                   keys.size() == 1 ? std::string("name given twice in the header")
                                    : detail::concat("key '", printable(key), "' given twice"));
    }
    return true;
  };
  try {
    return json::parse(text, refuse_repeated_keys);
  } catch (const json::exception& e) {
    throw Error(std::string("invalid safetensors header: ") + e.what(),
                {origin, printable(tensor), -1});
  }
}

uint64_t non_negative_integer(const json& v, const char* what) {
  K3_CHECK(v.is_number_unsigned(), what, " must be non-negative integers, found ", shown(v));
  return v.get<uint64_t>();
}

const json& field(const json& entry, const char* key) {
  auto it = entry.find(key);
  K3_CHECK(it != entry.end(), "tensor entry lacks '", key, "'");
  return *it;
}

SafetensorsEntry read_entry(const std::string& name, const json& entry, size_t data_size) {
  K3_CHECK(entry.is_object(),
           "a tensor entry must be {\"dtype\", \"shape\", \"data_offsets\"}, found ", shown(entry));
  for (auto& [key, value] : entry.items())
    K3_CHECK(key == "dtype" || key == "shape" || key == "data_offsets", "unknown key '",
             printable(key), "' in a tensor entry (expected dtype, shape, data_offsets)");
  const json& dtype = field(entry, "dtype");
  // parse_dtype repeats an unknown name in its message, which must stay on one line.
  K3_CHECK(dtype.is_string() && one_line(dtype.get_ref<const std::string&>()),
           "dtype must be the name of a type, found ", shown(dtype));
  SafetensorsEntry e{name, parse_dtype(dtype.get<std::string>()), {}, 0, 0};

  const json& shape = field(entry, "shape");
  K3_CHECK(shape.is_array(), "shape must be a list of dimensions, found ", shown(shape));
  // shape_numel multiplies the dimensions in this order unchecked, so every partial product must
  // fit, even when a later dimension is 0.
  int64_t numel = 1;
  for (const json& d : shape) {
    uint64_t dim = non_negative_integer(d, "dimensions");
    K3_CHECK(dim <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) &&
                 !__builtin_mul_overflow(numel, static_cast<int64_t>(dim), &numel),
             "shape ", shown(shape), " has too many elements to count in 64 bits");
    e.shape.push_back(static_cast<int64_t>(dim));
  }
  size_t nbytes;
  K3_CHECK(!__builtin_mul_overflow(static_cast<size_t>(numel), dtype_size(e.dtype), &nbytes),
           dtype_name(e.dtype), " ", shape_str(e.shape), " has too many bytes to count in 64 bits");

  const json& offsets = field(entry, "data_offsets");
  K3_CHECK(offsets.is_array() && offsets.size() == 2, "data_offsets must be [begin, end], found ",
           shown(offsets));
  e.begin = non_negative_integer(offsets[0], "data_offsets");
  e.end = non_negative_integer(offsets[1], "data_offsets");
  K3_CHECK(e.begin <= e.end && e.end <= data_size, "data_offsets [", e.begin, ", ", e.end,
           "] is not a range within the ", data_size, " bytes of data");
  K3_CHECK(e.end - e.begin == nbytes, "data_offsets [", e.begin, ", ", e.end, "] hold ",
           e.end - e.begin, " bytes, ", dtype_name(e.dtype), " ", shape_str(e.shape), " needs ",
           nbytes);
  return e;
}

std::map<std::string, std::string> read_metadata(const json& metadata) {
  K3_CHECK(metadata.is_object(), "__metadata__ must be an object of strings, found ",
           shown(metadata));
  std::map<std::string, std::string> out;
  for (auto& [key, value] : metadata.items()) {
    K3_CHECK(value.is_string() || !metadata.contains("data_offsets"),
             "a tensor may not be called __metadata__: the name is reserved for metadata");
    K3_CHECK(value.is_string(), "__metadata__ values must be strings, '", printable(key),
             "' holds ", shown(value));
    out[key] = value.get<std::string>();
  }
  return out;
}

// Sorts the entries by range (the header may list them in any order) and checks the ranges tile
// the data: an overlap would let two tensors share bytes, a gap or bytes after the last tensor
// would be data no tensor accounts for.
void check_tiling(std::vector<SafetensorsEntry>& entries, size_t data_size,
                  const std::string& origin) {
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  size_t covered = 0;                 // bytes [0, covered) belong to the tensors so far
  const std::string* last = nullptr;  // the tensor ending at `covered`
  for (const auto& e : entries) {
    ErrorContext ctx{origin, printable(e.name), -1};
    K3_CHECK_CTX(e.begin >= covered, ctx, "its bytes [", e.begin, ", ", e.end, ") overlap tensor ",
                 printable(*last), ", which ends at ", covered);
    K3_CHECK_CTX(e.begin == covered, ctx, "bytes [", covered, ", ", e.begin,
                 ") before it belong to no tensor");
    covered = e.end;
    last = &e.name;
  }
  K3_CHECK_CTX(covered == data_size, (ErrorContext{origin, last ? printable(*last) : "", -1}),
               "bytes [", covered, ", ", data_size, ") at the end of the data belong to no tensor");
}

// Reads and checks the header of a file of FILE_SIZE bytes, which READ copies out, against the
// file's size.
SafetensorsLayout read_layout(uint64_t file_size,
                              const std::function<void(uint64_t at, char* out, size_t n)>& read,
                              const std::string& origin) {
  const ErrorContext ctx{origin, "", -1};
  K3_CHECK_CTX(file_size >= 8, ctx, "not a safetensors file: ", file_size,
               " bytes, fewer than the 8 of the header length");
  uint64_t header_size;
  read(0, reinterpret_cast<char*>(&header_size), 8);
  K3_CHECK_CTX(header_size <= file_size - 8, ctx, "header length ", header_size, " exceeds the ",
               file_size - 8, " bytes after it");
  std::string text(header_size, '\0');
  read(8, text.data(), header_size);
  K3_CHECK_CTX(header_size > 0 && text[0] == '{', ctx, "the header does not start with '{'");
  json header = parse_header(text, origin);

  SafetensorsLayout layout;
  layout.data_begin = 8 + header_size;
  const size_t data_size = file_size - layout.data_begin;
  for (auto& [name, entry] : header.items()) {
    try {
      if (name == kMetadataKey)
        layout.metadata = read_metadata(entry);
      else
        layout.entries.push_back(read_entry(name, entry, data_size));
    } catch (const Error& e) {
      throw e.with_file(origin).with_field(printable(name));
    }
  }
  check_tiling(layout.entries, data_size, origin);
  return layout;
}

// Refuses tensor NAME when it is missing (SHAPE null) or not DTYPE EXPECTED.
void check_found(const std::string& origin, const std::string& name, const Shape* shape,
                 DType dtype, const Shape& expected, DType expected_dtype) {
  K3_CHECK_CTX(shape, ErrorContext({origin, name, -1}), "tensor is missing");
  K3_CHECK_CTX(*shape == expected && dtype == expected_dtype, ErrorContext({origin, name, -1}),
               "expected ", dtype_name(expected_dtype), " ", shape_str(expected), ", found ",
               dtype_name(dtype), " ", shape_str(*shape));
}

}  // namespace

const Tensor* Safetensors::find(const std::string& name) const {
  for (auto& [n, t] : tensors)
    if (n == name) return &t;
  return nullptr;
}

const Tensor& Safetensors::get(const std::string& name, const Shape& shape, DType dtype) const {
  const Tensor* t = find(name);
  check_found("", name, t ? &t->shape() : nullptr, t ? t->dtype() : dtype, shape, dtype);
  return *t;
}

std::string encode_safetensors_header(std::vector<SafetensorsEntry>& entries,
                                      const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  size_t offset = 0;
  for (SafetensorsEntry& e : entries) {
    ErrorContext ctx{"", e.name, -1};
    K3_CHECK_CTX(e.name != kMetadataKey, ctx, "the name __metadata__ is reserved for metadata");
    K3_CHECK_CTX(!header.contains(e.name), ctx, "two tensors have this name");
    e.begin = offset;
    e.end = offset + static_cast<size_t>(shape_numel(e.shape)) * dtype_size(e.dtype);
    header[e.name] = {
        {"dtype", dtype_name(e.dtype)}, {"shape", e.shape}, {"data_offsets", {e.begin, e.end}}};
    offset = e.end;
  }
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // keep the data 8-byte aligned
  std::string out(8, '\0');
  uint64_t n = h.size();
  std::memcpy(out.data(), &n, 8);
  return out + h;
}

std::string encode_safetensors(const Safetensors& st) {
  std::vector<SafetensorsEntry> entries;
  for (auto& [name, t] : st.tensors) entries.push_back({name, t.dtype(), t.shape(), 0, 0});
  std::string out = encode_safetensors_header(entries, st.metadata);
  out.reserve(out.size() + (entries.empty() ? 0 : entries.back().end));
  for (auto& [name, t] : st.tensors) out.append(static_cast<const char*>(t.data()), t.nbytes());
  return out;
}

SafetensorsLayout read_safetensors_layout(const std::string& bytes, const std::string& origin) {
  return read_layout(
      bytes.size(),
      [&](uint64_t at, char* out, size_t n) { std::memcpy(out, bytes.data() + at, n); }, origin);
}

Safetensors decode_safetensors(const std::string& bytes, const std::string& origin) {
  SafetensorsLayout layout = read_safetensors_layout(bytes, origin);
  Safetensors st;
  st.metadata = std::move(layout.metadata);
  for (auto& e : layout.entries) {
    Tensor t = Tensor::empty(e.shape, e.dtype);
    if (e.end > e.begin)
      std::memcpy(t.data(), bytes.data() + layout.data_begin + e.begin, e.end - e.begin);
    st.tensors.emplace_back(std::move(e.name), std::move(t));
  }
  return st;
}

void save_safetensors(const std::string& path, const Safetensors& st) {
  try {
    write_file_atomic(path, encode_safetensors(st));
  } catch (const Error& e) {
    throw e.with_file(path);
  }
}

Safetensors load_safetensors(const std::string& path) {
  return decode_safetensors(read_file(path), path);
}

SafetensorsWriter::SafetensorsWriter(std::string path, std::vector<SafetensorsEntry> entries,
                                     const std::map<std::string, std::string>& metadata)
    : file_(std::move(path)), entries_(std::move(entries)) {
  append(encode_safetensors_header(entries_, metadata));
}

void SafetensorsWriter::append(std::string_view bytes) {
  if (bytes.empty()) return;  // an empty tensor's data may be null
  file_.write(bytes);
  hash_.update(bytes);
  bytes_ += bytes.size();
}

void SafetensorsWriter::write(const void* data, size_t nbytes) {
  K3_CHECK_CTX(next_ < entries_.size(), (ErrorContext{file_.path(), "", -1}),
               "more tensors written than its header lists (", entries_.size(), ")");
  const SafetensorsEntry& e = entries_[next_];
  K3_CHECK_CTX(nbytes == e.nbytes(), (ErrorContext{file_.path(), e.name, -1}), nbytes,
               " bytes written, the header gives it ", e.nbytes());
  append({static_cast<const char*>(data), nbytes});
  ++next_;
}

SafetensorsWriter::Written SafetensorsWriter::finish() {
  K3_CHECK_CTX(
      next_ == entries_.size(),
      (ErrorContext{file_.path(), next_ < entries_.size() ? entries_[next_].name : "", -1}),
      "finished before this tensor was written");
  file_.finish();
  return {bytes_, hash_.hex_digest()};
}

TensorFile::TensorFile(FileReader file) : file_(std::move(file)) {
  layout_ = read_layout(
      file_->size(), [&](uint64_t at, char* out, size_t n) { file_->read(at, out, n); },
      file_->path());
  for (size_t i = 0; i < layout_.entries.size(); ++i) by_name_[layout_.entries[i].name] = i;
}

const std::string& TensorFile::path() const {
  static const std::string none;
  return file_ ? file_->path() : none;
}

const SafetensorsEntry* TensorFile::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &layout_.entries[it->second];
}

const SafetensorsEntry& TensorFile::get(const std::string& name, const Shape& shape,
                                        DType dtype) const {
  const SafetensorsEntry* e = find(name);
  check_found(path(), name, e ? &e->shape : nullptr, e ? e->dtype : dtype, shape, dtype);
  return *e;
}

void TensorFile::read_bytes(const SafetensorsEntry& entry, void* out) const {
  K3_CHECK_CTX(file_, (ErrorContext{"", entry.name, -1}), "read from no file");
  file_->read(layout_.data_begin + entry.begin, out, entry.nbytes());
}

void TensorFile::read(const SafetensorsEntry& entry, float* out) const {
  K3_CHECK_CTX(entry.dtype == DType::F32, (ErrorContext{path(), entry.name, -1}),
               "expected F32, found ", dtype_name(entry.dtype));
  read_bytes(entry, out);
}

Tensor TensorFile::tensor(const SafetensorsEntry& entry) const {
  Tensor t = Tensor::empty(entry.shape, entry.dtype);
  if (entry.nbytes() > 0) read_bytes(entry, t.data());
  return t;
}

}  // namespace k3
