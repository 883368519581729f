#include "engine/parallel/host_collective.h"

#include <cstring>
#include <stdexcept>

#include "kernels/half.h"

namespace lt::dist::detail {

const char* op_name(Op op) {
  switch (op) {
    case Op::all_reduce_sum: return "all_reduce_sum";
    case Op::reduce_scatter_sum: return "reduce_scatter_sum";
    case Op::all_gather: return "all_gather";
    case Op::broadcast: return "broadcast";
  }
  return "?";
}

std::string CallDesc::str() const {
  std::string s = std::string(dtype_name(dtype)) + " " + shape_str(shape);
  if (!shards.empty()) {
    s += " shards {";
    for (size_t r = 0; r < shards.size(); ++r)
      s += (r ? ", " : "") + std::to_string(shards[r].offset) + "+" + std::to_string(shards[r].count);
    s += "}";
  }
  if (root >= 0) s += " root " + std::to_string(root);
  return s;
}

bool CallDesc::same_call(const CallDesc& o) const {
  if (op != o.op || dtype != o.dtype || shape != o.shape || root != o.root || shards.size() != o.shards.size())
    return false;
  for (size_t r = 0; r < shards.size(); ++r)
    if (shards[r].offset != o.shards[r].offset || shards[r].count != o.shards[r].count) return false;
  return true;
}

CallDesc describe_call(Op op, const Tensor& t, const std::vector<Shard>* shards, int root, int rank, int world,
                       Device device) {
  CallDesc c;
  c.op = op;
  c.root = root;
  const std::string who = std::string(op_name(op)) + " (rank " + std::to_string(rank) + "): ";
  if (!t.defined()) {
    c.error = who + "the tensor is undefined";
    return c;
  }
  c.dtype = t.dtype();
  c.shape = t.shape();
  if (shards) c.shards = *shards;
  if (t.device() != device)
    c.error = who + "the tensor is on " + t.device().str() + ", the communicator on " + device.str();
  else if (!t.is_contiguous()) c.error = who + "the tensor " + shape_str(t.shape()) + " is not contiguous";
  else if (t.dtype() != DType::f32 && t.dtype() != DType::bf16 && t.dtype() != DType::f64)
    c.error = who + "dtype " + dtype_name(t.dtype()) + " is not supported (f32, bf16, f64)";
  else if (op == Op::broadcast && (root < 0 || root >= world))
    c.error = who + "root " + std::to_string(root) + " is not a rank of a world of " + std::to_string(world);
  if (!c.error.empty() || !shards) return c;
  if (static_cast<int>(shards->size()) != world) {
    c.error = who + std::to_string(shards->size()) + " shards for a world of " + std::to_string(world);
    return c;
  }
  const int64_t n = t.numel();
  int64_t end = 0;  // shards lie in rank order and do not overlap
  for (int r = 0; r < world; ++r) {
    const Shard& s = (*shards)[r];
    if (s.offset < end || s.count < 0 || s.offset + s.count > n) {
      c.error = who + "shard " + std::to_string(r) + " = [" + std::to_string(s.offset) + ", " +
                std::to_string(s.offset + s.count) + ") of " + shape_str(t.shape()) +
                (s.offset < end ? " overlaps the previous shard or is out of rank order" : " lies outside [0, n)");
      return c;
    }
    end = s.offset + s.count;
  }
  return c;
}

std::string check_agreement(const std::vector<CallDesc>& calls) {
  for (const CallDesc& c : calls)
    if (!c.error.empty()) return c.error;
  for (size_t r = 1; r < calls.size(); ++r) {
    const CallDesc &a = calls[0], &b = calls[r];
    if (a.op != b.op)
      return std::string("collective mismatch: rank 0 calls ") + op_name(a.op) + ", rank " + std::to_string(r) +
             " calls " + op_name(b.op) + " (every rank must make the same calls in the same order)";
    if (!a.same_call(b))
      return std::string(op_name(a.op)) + ": rank " + std::to_string(r) + " has " + b.str() + ", rank 0 has " +
             a.str() + " (every rank must pass the same dtype, shape, shards and root)";
  }
  return "";
}

namespace {

template <class T, class Acc, class Load, class Store>
void sum_loop(int64_t count, const std::vector<const void*>& srcs, void* dst, Load load, Store store) {
  T* out = static_cast<T*>(dst);
  for (int64_t i = 0; i < count; ++i) {
    Acc acc = load(static_cast<const T*>(srcs[0])[i]);
    for (size_t r = 1; r < srcs.size(); ++r) acc += load(static_cast<const T*>(srcs[r])[i]);
    out[i] = store(acc);
  }
}

}  // namespace

void host_sum(DType dtype, int64_t count, const std::vector<const void*>& srcs, void* dst) {
  if (srcs.empty()) throw std::logic_error("host_sum: no sources");
  switch (dtype) {
    case DType::f32:
      sum_loop<float, float>(
          count, srcs, dst, [](float x) { return x; }, [](float a) { return a; });
      return;
    case DType::f64:
      sum_loop<double, double>(
          count, srcs, dst, [](double x) { return x; }, [](double a) { return a; });
      return;
    case DType::bf16:
      sum_loop<uint16_t, float>(
          count, srcs, dst, [](uint16_t h) { return bf16_bits_to_float(h); },
          [](float a) { return float_to_bf16_bits(a); });
      return;
    default: throw std::invalid_argument(std::string("host_sum: dtype ") + dtype_name(dtype) + " is not supported");
  }
}

namespace {

template <class T>
void put(std::string& s, T v) {
  s.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

struct Reader {
  const std::string& s;
  const std::string& from;
  size_t pos = 0;
  template <class T>
  T get() {
    if (pos + sizeof(T) > s.size()) throw std::runtime_error("tcp: malformed call description from " + from);
    T v;
    std::memcpy(&v, s.data() + pos, sizeof(T));
    pos += sizeof(T);
    return v;
  }
};

}  // namespace

std::string encode_call(const CallDesc& c) {
  std::string s;
  put<uint8_t>(s, static_cast<uint8_t>(c.op));
  put<uint8_t>(s, static_cast<uint8_t>(c.dtype));
  put<int32_t>(s, c.root);
  put<uint32_t>(s, static_cast<uint32_t>(c.shape.size()));
  for (int64_t d : c.shape) put<int64_t>(s, d);
  put<uint32_t>(s, static_cast<uint32_t>(c.shards.size()));
  for (const Shard& sh : c.shards) {
    put<int64_t>(s, sh.offset);
    put<int64_t>(s, sh.count);
  }
  put<uint32_t>(s, static_cast<uint32_t>(c.error.size()));
  s += c.error;
  return s;
}

CallDesc decode_call(const std::string& bytes, const std::string& from) {
  Reader r{bytes, from};
  CallDesc c;
  const auto op = r.get<uint8_t>();
  const auto dt = r.get<uint8_t>();
  if (op > static_cast<uint8_t>(Op::broadcast) || dt >= kNumDTypes)
    throw std::runtime_error("tcp: malformed call description from " + from);
  c.op = static_cast<Op>(op);
  c.dtype = static_cast<DType>(dt);
  c.root = r.get<int32_t>();
  const uint32_t ndim = r.get<uint32_t>();
  if (ndim > 8) throw std::runtime_error("tcp: malformed call description from " + from);
  for (uint32_t d = 0; d < ndim; ++d) c.shape.push_back(r.get<int64_t>());
  const uint32_t nshards = r.get<uint32_t>();
  if (nshards > (bytes.size() - r.pos) / 16) throw std::runtime_error("tcp: malformed call description from " + from);
  for (uint32_t i = 0; i < nshards; ++i) {
    Shard sh;
    sh.offset = r.get<int64_t>();
    sh.count = r.get<int64_t>();
    c.shards.push_back(sh);
  }
  const uint32_t elen = r.get<uint32_t>();
  if (r.pos + elen != bytes.size()) throw std::runtime_error("tcp: malformed call description from " + from);
  c.error = bytes.substr(r.pos, elen);
  return c;
}

}  // namespace lt::dist::detail
