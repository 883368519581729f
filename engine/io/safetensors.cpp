// safetensors writer and validating reader (engine/io/safetensors.h).
//
// Layout written:
//   bytes [0, 8)          N, the header length, uint64 little-endian
//   bytes [8, 8 + N)      JSON header, padded with spaces so 8 + N is a multiple of 8 (the
//                         data then starts 8-byte aligned, as the reference writer does)
//   bytes [8 + N, end)    the tensors' raw little-endian bytes, back to back in the order
//                         given; data_offsets are relative to byte 8 + N
// The reader accepts any file of this format whose tensors have the dtypes below: the
// offsets must tile the data exactly (first begin 0, each begin the previous end, the last
// end the data size), as the reference implementation requires.
#include "engine/io/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace lt::io {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; this reader and writer copy bytes as they are");

namespace {

// The reference implementation's bound on the header (100 MB); a larger length is corrupt.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct DTypeName {
  DType dtype;
  const char* name;
};
constexpr DTypeName kDTypeNames[] = {
    {DType::f64, "F64"}, {DType::f32, "F32"}, {DType::bf16, "BF16"}, {DType::f16, "F16"},
    {DType::i64, "I64"}, {DType::i32, "I32"}, {DType::u16, "U16"},
};

const char* safetensors_dtype_name(DType t) {
  for (const DTypeName& d : kDTypeNames)
    if (d.dtype == t) return d.name;
  throw std::invalid_argument(std::string("safetensors: dtype ") + dtype_name(t) + " has no safetensors name");
}

bool parse_safetensors_dtype(const std::string& name, DType* out) {
  for (const DTypeName& d : kDTypeNames)
    if (name == d.name) {
      *out = d.dtype;
      return true;
    }
  return false;
}

std::string errno_str() { return std::strerror(errno); }

// Writes all of [p, p + n) to fd; throws naming `path` on failure.
void write_all(int fd, const void* p, size_t n, const std::string& path) {
  const auto* bytes = static_cast<const uint8_t*>(p);
  while (n > 0) {
    const ssize_t w = ::write(fd, bytes, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error("safetensors: writing " + path + ": " + errno_str());
    }
    bytes += w;
    n -= static_cast<size_t>(w);
  }
}

// Closes the descriptor and removes the temporary file unless released.
struct TempFile {
  std::string path;
  int fd = -1;
  bool keep = false;
  ~TempFile() {
    if (fd >= 0) ::close(fd);
    if (!keep) ::unlink(path.c_str());
  }
};

void fsync_directory(const std::string& file_path) {
  std::filesystem::path dir = std::filesystem::path(file_path).parent_path();
  if (dir.empty()) dir = ".";
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd < 0) throw std::runtime_error("safetensors: opening directory " + dir.string() + ": " + errno_str());
  const int rc = ::fsync(dfd);
  const std::string err = rc != 0 ? errno_str() : "";
  ::close(dfd);
  if (rc != 0) throw std::runtime_error("safetensors: fsync of directory " + dir.string() + ": " + err);
}

// a * b, or false when it overflows uint64.
bool mul_u64(uint64_t a, uint64_t b, uint64_t* out) {
  if (a != 0 && b > std::numeric_limits<uint64_t>::max() / a) return false;
  *out = a * b;
  return true;
}

}  // namespace

void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  // Header, in the tensors' order (ordered_json keeps insertion order).
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    header["__metadata__"] = meta;
  }
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const NamedTensor& nt : tensors) {
    if (nt.name.empty() || nt.name == "__metadata__")
      throw std::invalid_argument("write_safetensors " + path + ": invalid tensor name '" + nt.name + "'");
    if (!seen.insert(nt.name).second)
      throw std::invalid_argument("write_safetensors " + path + ": tensor name '" + nt.name + "' given twice");
    if (!nt.tensor.defined())
      throw std::invalid_argument("write_safetensors " + path + ": tensor '" + nt.name + "' is undefined");
    const uint64_t bytes = nt.tensor.nbytes();
    nlohmann::ordered_json entry;
    entry["dtype"] = safetensors_dtype_name(nt.tensor.dtype());
    entry["shape"] = nt.tensor.shape();
    entry["data_offsets"] = {offset, offset + bytes};
    header[nt.name] = entry;
    offset += bytes;
  }
  std::string json = header.dump();
  json.append((8 - (8 + json.size()) % 8) % 8, ' ');
  const uint64_t header_len = json.size();

  TempFile tmp;
  tmp.path = path + ".tmp." + std::to_string(::getpid());
  tmp.fd = ::open(tmp.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (tmp.fd < 0) throw std::runtime_error("safetensors: creating " + tmp.path + ": " + errno_str());
  write_all(tmp.fd, &header_len, 8, tmp.path);
  write_all(tmp.fd, json.data(), json.size(), tmp.path);
  for (const NamedTensor& nt : tensors) {
    const Tensor host = nt.tensor.to(Device::cpu()).contiguous();
    if (host.numel() > 0) write_all(tmp.fd, host.data_ptr(), host.nbytes(), tmp.path);
  }
  if (::fsync(tmp.fd) != 0) throw std::runtime_error("safetensors: fsync of " + tmp.path + ": " + errno_str());
  const int rc = ::close(tmp.fd);
  tmp.fd = -1;
  if (rc != 0) throw std::runtime_error("safetensors: closing " + tmp.path + ": " + errno_str());
  if (::rename(tmp.path.c_str(), path.c_str()) != 0)
    throw std::runtime_error("safetensors: renaming " + tmp.path + " to " + path + ": " + errno_str());
  tmp.keep = true;
  fsync_directory(path);
}

bool SafetensorsFile::has(const std::string& name) const { return entries.count(name) != 0; }

Tensor SafetensorsFile::get(const std::string& name) const {
  const auto it = entries.find(name);
  if (it == entries.end())
    throw std::runtime_error("safetensors " + path + ": no tensor named '" + name + "' (the file has " +
                             std::to_string(entries.size()) + " tensors)");
  const Entry& e = it->second;
  Tensor t = Tensor::empty(e.shape, e.dtype, Device::cpu());
  if (e.end > e.begin) std::memcpy(t.data_ptr(), data.data() + e.begin, e.end - e.begin);
  return t;
}

SafetensorsFile read_safetensors(const std::string& path) {
  const std::string where = "safetensors " + path + ": ";
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(where + "cannot open the file: " + errno_str());
  in.seekg(0, std::ios::end);
  const std::streamoff size_signed = in.tellg();
  if (size_signed < 0) throw std::runtime_error(where + "cannot determine the file size");
  const uint64_t file_size = static_cast<uint64_t>(size_signed);
  in.seekg(0, std::ios::beg);
  if (file_size < 8)
    throw std::runtime_error(where + "truncated: " + std::to_string(file_size) +
                             " bytes, shorter than the 8-byte header length");
  uint64_t header_len = 0;
  in.read(reinterpret_cast<char*>(&header_len), 8);
  if (header_len > kMaxHeaderBytes)
    throw std::runtime_error(where + "corrupt header length " + std::to_string(header_len) + " (more than " +
                             std::to_string(kMaxHeaderBytes) + " bytes)");
  if (header_len > file_size - 8)
    throw std::runtime_error(where + "corrupt header length " + std::to_string(header_len) +
                             " or truncated file: only " + std::to_string(file_size - 8) +
                             " bytes follow the length field");
  if (header_len < 2)
    throw std::runtime_error(where + "header length " + std::to_string(header_len) + " is too short for a JSON object");
  std::string json_text(header_len, '\0');
  in.read(json_text.data(), static_cast<std::streamsize>(header_len));
  if (!in) throw std::runtime_error(where + "reading the header failed");
  if (json_text[0] != '{') throw std::runtime_error(where + "the header does not start with '{'");

  nlohmann::json header;
  try {
    header = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::parse_error& e) {
    throw std::runtime_error(where + "header is not valid JSON: " + e.what());
  }
  if (!header.is_object()) throw std::runtime_error(where + "header is not a JSON object");

  SafetensorsFile f;
  f.path = path;
  const uint64_t data_size = file_size - 8 - header_len;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) throw std::runtime_error(where + "__metadata__ is not an object");
      for (const auto& [k, v] : value.items()) {
        if (!v.is_string()) throw std::runtime_error(where + "__metadata__ value of '" + k + "' is not a string");
        f.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    const std::string tw = where + "tensor '" + name + "': ";
    if (!value.is_object()) throw std::runtime_error(tw + "entry is not an object");
    for (const auto& [k, v] : value.items()) {
      (void)v;
      if (k != "dtype" && k != "shape" && k != "data_offsets")
        throw std::runtime_error(tw + "unexpected key '" + k + "'");
    }
    if (!value.contains("dtype") || !value["dtype"].is_string())
      throw std::runtime_error(tw + "missing or non-string dtype");
    if (!value.contains("shape") || !value["shape"].is_array())
      throw std::runtime_error(tw + "missing or non-array shape");
    if (!value.contains("data_offsets") || !value["data_offsets"].is_array() || value["data_offsets"].size() != 2)
      throw std::runtime_error(tw + "data_offsets must be an array of two integers");
    SafetensorsFile::Entry e;
    const std::string dt = value["dtype"].get<std::string>();
    if (!parse_safetensors_dtype(dt, &e.dtype))
      throw std::runtime_error(tw + "unknown or unsupported dtype '" + dt +
                               "' (supported: F64 F32 BF16 F16 I64 I32 U16)");
    if (value["shape"].size() > static_cast<size_t>(kMaxDims))
      throw std::runtime_error(tw + "shape has " + std::to_string(value["shape"].size()) + " dims, more than " +
                               std::to_string(kMaxDims));
    uint64_t bytes = dtype_size(e.dtype);
    for (const auto& d : value["shape"]) {
      if (!d.is_number_unsigned())
        throw std::runtime_error(tw + "shape entry " + d.dump() + " is not a non-negative integer");
      const uint64_t extent = d.get<uint64_t>();
      if (extent > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) || !mul_u64(bytes, extent, &bytes))
        throw std::runtime_error(tw + "shape " + value["shape"].dump() + " overflows");
      e.shape.push_back(static_cast<int64_t>(extent));
    }
    for (const auto& o : value["data_offsets"])
      if (!o.is_number_unsigned())
        throw std::runtime_error(tw + "data_offsets entry " + o.dump() + " is not a non-negative integer");
    e.begin = value["data_offsets"][0].get<uint64_t>();
    e.end = value["data_offsets"][1].get<uint64_t>();
    if (e.begin > e.end)
      throw std::runtime_error(tw + "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                               "] are reversed");
    if (e.end - e.begin != bytes)
      throw std::runtime_error(tw + "data_offsets span " + std::to_string(e.end - e.begin) + " bytes but shape " +
                               shape_str(e.shape) + " of " + dt + " needs " + std::to_string(bytes));
    f.entries.emplace(name, e);
    f.names.push_back(name);
  }

  // A file cut short: the tensors' sizes add up to more than the bytes after the header.
  uint64_t needed = 0;  // saturates at 2^64 - 1
  for (const auto& [name, e] : f.entries) {
    const uint64_t span = e.end - e.begin;
    needed =
        span > std::numeric_limits<uint64_t>::max() - needed ? std::numeric_limits<uint64_t>::max() : needed + span;
  }
  if (needed > data_size)
    throw std::runtime_error(where + "truncated: the tensors need " + std::to_string(needed) +
                             " bytes of data but only " + std::to_string(data_size) + " follow the header");
  for (const auto& [name, e] : f.entries)
    if (e.end > data_size)
      throw std::runtime_error(where + "tensor '" + name + "': data_offsets [" + std::to_string(e.begin) + ", " +
                               std::to_string(e.end) + "] point past the end of the data (" +
                               std::to_string(data_size) + " bytes)");

  // File order = data order; the tensors must tile the data with no gap or overlap.
  std::stable_sort(f.names.begin(), f.names.end(), [&](const std::string& a, const std::string& b) {
    const auto& ea = f.entries.at(a);
    const auto& eb = f.entries.at(b);
    return ea.begin != eb.begin ? ea.begin < eb.begin : ea.end < eb.end;
  });
  uint64_t expect = 0;
  for (const std::string& n : f.names) {
    const auto& e = f.entries.at(n);
    if (e.begin != expect)
      throw std::runtime_error(where + "tensor '" + n + "' starts at data offset " + std::to_string(e.begin) +
                               ", expected " + std::to_string(expect) + " (tensors overlap or leave a gap)");
    expect = e.end;
  }
  if (expect != data_size)
    throw std::runtime_error(where + "the tensors cover " + std::to_string(expect) +
                             " bytes of data but the file holds " + std::to_string(data_size));

  f.data.resize(data_size);
  if (data_size > 0) in.read(reinterpret_cast<char*>(f.data.data()), static_cast<std::streamsize>(data_size));
  if (!in) throw std::runtime_error(where + "reading the data failed");
  return f;
}

}  // namespace lt::io
