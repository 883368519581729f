// Pickle protocol 2 writer, see pickle.h. Opcode values are those of CPython's
// Lib/pickle.py; integers are little-endian, BINFLOAT is big-endian IEEE 754.
#include "allocator/pickle.h"

#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace lt::alloc {
namespace {

constexpr char PROTO = '\x80';
constexpr char STOP = '.';
constexpr char NONE = 'N';
constexpr char NEWTRUE = '\x88';
constexpr char NEWFALSE = '\x89';
constexpr char BININT = 'J';    // 4-byte signed
constexpr char BININT1 = 'K';   // 1-byte unsigned
constexpr char BININT2 = 'M';   // 2-byte unsigned
constexpr char LONG1 = '\x8a';  // n-byte two's complement, n < 256
constexpr char BINFLOAT = 'G';
constexpr char BINUNICODE = 'X';
constexpr char EMPTY_DICT = '}';
constexpr char EMPTY_LIST = ']';
constexpr char MARK = '(';
constexpr char SETITEMS = 'u';
constexpr char APPENDS = 'e';
constexpr size_t kBatch = 1000;  // items per MARK ... SETITEMS/APPENDS, as CPython writes

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

// LONG1: minimal two's-complement little-endian bytes of a 65-bit value (sign + magnitude).
void put_long1(std::string& out, bool negative, uint64_t magnitude) {
  // Two's complement over 9 bytes, then trim redundant sign bytes like CPython's encode_long.
  unsigned char bytes[9];
  uint64_t v = negative ? (~magnitude + 1) : magnitude;
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<unsigned char>((v >> (8 * i)) & 0xFF);
  bytes[8] = negative ? 0xFF : 0x00;
  int n = 9;
  while (n > 1) {
    unsigned char top = bytes[n - 1], below = bytes[n - 2];
    if ((top == 0x00 && !(below & 0x80)) || (top == 0xFF && (below & 0x80))) --n;
    else break;
  }
  out.push_back(LONG1);
  out.push_back(static_cast<char>(n));
  out.append(reinterpret_cast<const char*>(bytes), static_cast<size_t>(n));
}

void put_int(std::string& out, bool negative, uint64_t magnitude) {
  if (!negative && magnitude < 256) {
    out.push_back(BININT1);
    out.push_back(static_cast<char>(magnitude));
  } else if (!negative && magnitude < 65536) {
    out.push_back(BININT2);
    out.push_back(static_cast<char>(magnitude & 0xFF));
    out.push_back(static_cast<char>(magnitude >> 8));
  } else if ((!negative && magnitude <= 0x7FFFFFFFull) || (negative && magnitude <= 0x80000000ull)) {
    out.push_back(BININT);
    put_u32(out, static_cast<uint32_t>(negative ? (~magnitude + 1) : magnitude));
  } else {
    put_long1(out, negative, magnitude);
  }
}

void put_str(std::string& out, const std::string& s) {
  if (s.size() > 0xFFFFFFFFull) throw std::length_error("pickle: string too long");
  out.push_back(BINUNICODE);
  put_u32(out, static_cast<uint32_t>(s.size()));
  out.append(s);
}

void put_value(std::string& out, const nlohmann::json& v) {
  using T = nlohmann::json::value_t;
  switch (v.type()) {
    case T::null: out.push_back(NONE); break;
    case T::boolean: out.push_back(v.get<bool>() ? NEWTRUE : NEWFALSE); break;
    case T::number_integer: {
      int64_t i = v.get<int64_t>();
      bool neg = i < 0;
      uint64_t mag = neg ? (~static_cast<uint64_t>(i) + 1) : static_cast<uint64_t>(i);
      put_int(out, neg, mag);
      break;
    }
    case T::number_unsigned: put_int(out, false, v.get<uint64_t>()); break;
    case T::number_float: {
      double d = v.get<double>();
      uint64_t bits;
      std::memcpy(&bits, &d, sizeof bits);
      out.push_back(BINFLOAT);
      for (int i = 7; i >= 0; --i) out.push_back(static_cast<char>((bits >> (8 * i)) & 0xFF));
      break;
    }
    case T::string: put_str(out, v.get_ref<const std::string&>()); break;
    case T::array: {
      out.push_back(EMPTY_LIST);
      for (auto it = v.begin(); it != v.end();) {
        out.push_back(MARK);
        for (size_t n = 0; n < kBatch && it != v.end(); ++n, ++it) put_value(out, *it);
        out.push_back(APPENDS);
      }
      break;
    }
    case T::object: {
      out.push_back(EMPTY_DICT);
      for (auto it = v.begin(); it != v.end();) {
        out.push_back(MARK);
        for (size_t n = 0; n < kBatch && it != v.end(); ++n, ++it) {
          put_str(out, it.key());
          put_value(out, it.value());
        }
        out.push_back(SETITEMS);
      }
      break;
    }
    case T::binary:
    case T::discarded: throw std::invalid_argument("pickle: unsupported JSON value type");
  }
}

}  // namespace

std::string pickle_dumps(const nlohmann::json& value) {
  std::string out;
  out.push_back(PROTO);
  out.push_back('\x02');
  put_value(out, value);
  out.push_back(STOP);
  return out;
}

}  // namespace lt::alloc
