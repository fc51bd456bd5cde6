#include "k3/tensor/safetensors.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
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
json parse_header(const std::string& bytes, size_t size, const std::string& origin) {
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
    auto text = bytes.begin() + 8;
    return json::parse(text, text + static_cast<std::ptrdiff_t>(size), refuse_repeated_keys);
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

}  // namespace

const Tensor* Safetensors::find(const std::string& name) const {
  for (auto& [n, t] : tensors)
    if (n == name) return &t;
  return nullptr;
}

const Tensor& Safetensors::get(const std::string& name, const Shape& shape, DType dtype) const {
  const Tensor* t = find(name);
  K3_CHECK_CTX(t, ErrorContext({"", name, -1}), "tensor is missing");
  K3_CHECK_CTX(t->shape() == shape && t->dtype() == dtype, ErrorContext({"", name, -1}),
               "expected ", dtype_name(dtype), " ", shape_str(shape), ", found ",
               dtype_name(t->dtype()), " ", shape_str(t->shape()));
  return *t;
}

std::string encode_safetensors(const Safetensors& st) {
  json header = json::object();
  size_t offset = 0;
  for (auto& [name, t] : st.tensors) {
    ErrorContext ctx{"", name, -1};
    K3_CHECK_CTX(name != kMetadataKey, ctx, "the name __metadata__ is reserved for metadata");
    K3_CHECK_CTX(!header.contains(name), ctx, "two tensors have this name");
    header[name] = {{"dtype", dtype_name(t.dtype())},
                    {"shape", t.shape()},
                    {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  if (!st.metadata.empty()) header[kMetadataKey] = st.metadata;
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // keep the data 8-byte aligned
  std::string out(8, '\0');
  uint64_t n = h.size();
  std::memcpy(out.data(), &n, 8);
  out += h;
  out.reserve(out.size() + offset);
  for (auto& [name, t] : st.tensors) out.append(static_cast<const char*>(t.data()), t.nbytes());
  return out;
}

SafetensorsLayout read_safetensors_layout(const std::string& bytes, const std::string& origin) {
  const ErrorContext ctx{origin, "", -1};
  K3_CHECK_CTX(bytes.size() >= 8, ctx, "not a safetensors file: ", bytes.size(),
               " bytes, fewer than the 8 of the header length");
  uint64_t header_size;
  std::memcpy(&header_size, bytes.data(), 8);
  K3_CHECK_CTX(header_size <= bytes.size() - 8, ctx, "header length ", header_size, " exceeds the ",
               bytes.size() - 8, " bytes after it");
  K3_CHECK_CTX(header_size > 0 && bytes[8] == '{', ctx, "the header does not start with '{'");
  json header = parse_header(bytes, header_size, origin);

  SafetensorsLayout layout;
  layout.data_begin = 8 + header_size;
  const size_t data_size = bytes.size() - layout.data_begin;
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

}  // namespace k3
