// safetensors files (https://huggingface.co/docs/safetensors): an 8-byte little-endian
// header length, a JSON header {"name": {"dtype": "F32", "shape": [..], "data_offsets":
// [begin, end]}, ..., "__metadata__": {string: string}}, then the raw little-endian data.
// Used for weights (fla's parameter names, so fla's models load them), for the training
// state of checkpoints and for the gradient dumps of the equivalence check.
//
// Writing is atomic: the file is written to "<path>.tmp.<pid>", fsynced, renamed over
// `path`, and the directory is fsynced; a crash leaves the old file or the new one, never
// a mix. Reading validates everything (header length within the file, JSON well formed,
// known dtypes, offsets in order, inside the data and matching shape * itemsize) and
// throws std::runtime_error naming the file and what is wrong.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/tensor.h"

namespace lt::io {

// Tensors to write (any device; copied to the host), in this order.
struct NamedTensor {
  std::string name;
  Tensor tensor;
};
void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

struct SafetensorsFile {
  std::string path;
  std::map<std::string, std::string> metadata;
  std::vector<std::string> names;  // in file order
  // The named tensor as a CPU tensor in its stored dtype; throws naming the file and the
  // tensor when it is absent.
  Tensor get(const std::string& name) const;
  bool has(const std::string& name) const;
  // implementation detail: the raw bytes and each tensor's entry
  struct Entry {
    DType dtype;
    Shape shape;
    uint64_t begin = 0, end = 0;
  };
  std::map<std::string, Entry> entries;
  std::vector<uint8_t> data;
};
SafetensorsFile read_safetensors(const std::string& path);

}  // namespace lt::io
