#include "k3/tensor/safetensors.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "k3/base/error.h"
#include "k3/base/fs.h"

namespace k3 {

using nlohmann::json;

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
    header[name] = {{"dtype", dtype_name(t.dtype())},
                    {"shape", t.shape()},
                    {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  if (!st.metadata.empty()) header["__metadata__"] = st.metadata;
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

Safetensors decode_safetensors(const std::string& bytes, const std::string& origin) {
  ErrorContext ctx{origin, "", -1};
  K3_CHECK_CTX(bytes.size() >= 8, ctx, "not a safetensors file: ", bytes.size(), " bytes");
  uint64_t hlen;
  std::memcpy(&hlen, bytes.data(), 8);
  K3_CHECK_CTX(hlen <= bytes.size() - 8, ctx, "header length ", hlen, " exceeds file size ",
               bytes.size());
  json header;
  try {
    header = json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<int64_t>(hlen));
  } catch (const json::exception& e) {
    throw Error(std::string("invalid safetensors header: ") + e.what(), ctx);
  }
  K3_CHECK_CTX(header.is_object(), ctx, "safetensors header is not a JSON object");
  const size_t data_begin = 8 + hlen, data_size = bytes.size() - data_begin;
  Safetensors st;
  struct Entry { size_t begin, end; std::string name; Tensor t; };
  std::vector<Entry> entries;
  for (auto& [name, entry] : header.items()) {
    ErrorContext tctx{origin, name, -1};
    if (name == "__metadata__") {
      K3_CHECK_CTX(entry.is_object(), tctx, "metadata must be an object");
      for (auto& [k, v] : entry.items()) {
        K3_CHECK_CTX(v.is_string(), tctx, "metadata value '", k, "' is not a string");
        st.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    try {
      DType dt = parse_dtype(entry.at("dtype").get<std::string>());
      Shape shape = entry.at("shape").get<Shape>();
      auto off = entry.at("data_offsets").get<std::vector<uint64_t>>();
      K3_CHECK(off.size() == 2 && off[0] <= off[1] && off[1] <= data_size, "data_offsets out of range");
      for (int64_t d : shape) K3_CHECK(d >= 0, "negative dimension");
      size_t expect = static_cast<size_t>(shape_numel(shape)) * dtype_size(dt);
      K3_CHECK(off[1] - off[0] == expect, "holds ", off[1] - off[0], " bytes, shape ",
               shape_str(shape), " needs ", expect);
      Tensor t = Tensor::empty(shape, dt);
      if (expect) std::memcpy(t.data(), bytes.data() + data_begin + off[0], expect);
      entries.push_back({off[0], off[1], name, std::move(t)});
    } catch (const json::exception& e) {
      throw Error(std::string("malformed tensor entry: ") + e.what(), tctx);
    } catch (const Error& e) {
      throw e.with_file(origin).with_field(name);
    }
  }
  // File order (by offset), so a round trip is byte-identical; no two tensors may overlap.
  std::sort(entries.begin(), entries.end(), [](auto& a, auto& b) { return a.begin < b.begin; });
  for (size_t i = 0; i < entries.size(); ++i) {
    if (i > 0)
      K3_CHECK_CTX(entries[i].begin >= entries[i - 1].end, (ErrorContext{origin, entries[i].name, -1}),
                   "overlaps tensor ", entries[i - 1].name);
    st.tensors.emplace_back(std::move(entries[i].name), std::move(entries[i].t));
  }
  return st;
}

void save_safetensors(const std::string& path, const Safetensors& st) {
  write_file_atomic(path, encode_safetensors(st));
}

Safetensors load_safetensors(const std::string& path) { return decode_safetensors(read_file(path), path); }

}  // namespace k3
