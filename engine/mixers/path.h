// The paths of a token mixer (KDA: engine/mixers/kda.h, RWKV6: engine/mixers/rwkv6.h), one
// enum for both:
//   naive  the CPU recurrence in float64 (ground truth)
//   ops    the chunk algorithm composed from runtime ops, CPU and CUDA
//   fused  the CUDA kernels; on CPU tensors their CPU twins
// The kernels' shared vocabulary (dims, scale, entry-point names) is kernels/mixer.h.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>

namespace lt::mixers {

enum class MixerPath : uint8_t { naive, ops, fused };
using KdaPath = MixerPath;
using Rwkv6Path = MixerPath;

inline const char* mixer_path_name(MixerPath p) {
  switch (p) {
    case MixerPath::naive: return "naive";
    case MixerPath::ops: return "ops";
    case MixerPath::fused: return "fused";
  }
  return "?";
}
// "naive" | "ops" | "fused"; throws std::invalid_argument naming the mixer and the name.
inline MixerPath parse_mixer_path(const std::string& mixer, const std::string& name) {
  for (MixerPath p : {MixerPath::naive, MixerPath::ops, MixerPath::fused})
    if (name == mixer_path_name(p)) return p;
  throw std::invalid_argument(mixer + ": unknown path '" + name + "' (naive | ops | fused)");
}

}  // namespace lt::mixers
