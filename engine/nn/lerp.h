// RWKV6's token-shift interpolations, fused: the token shift with its static lerps (the
// time-mix's mu_x, the channel-mix's mu_k and mu_r) and the time-mix's five data-dependent
// lerps, forward beside backward (math and layouts: kernels/lerp.h). Activations share one
// dtype (f32, bf16; f64 on the CPU); mu and the bias are in its compute type (f32; f64 for
// f64), as the model keeps them. Gradients are written (=), parameter gradients returned.
#pragma once
#include <vector>

#include "engine/tensor.h"

namespace lt::nn {

// a [B, T, d], mus: 1 or 2 tensors [d]. delta = shift(a) - a, out[j] = a + delta mu_j.
struct ShiftMixOut {
  Tensor delta;             // [B, T, d]
  std::vector<Tensor> out;  // [B, T, d] each
};
// positions (packed documents, optional): [B*T] i32, each token's position in its document
// (mixers::Segments::positions): the shift reads 0 where it is 0.
ShiftMixOut shift_mix_forward(const Tensor& a, const std::vector<Tensor>& mus, const Tensor& positions = Tensor());
// dout[j] = d loss / d out[j]; ddelta_in, da_in (optional, undefined = 0): gradients
// reaching delta and a by other paths. Returns da; dmu[j] (= sum over tokens of
// dout[j] delta, [d] in mu's dtype) is accumulated (+=) into the tensors of `dmus`.
Tensor shift_mix_backward(const std::vector<Tensor>& douts, const Tensor& delta, const std::vector<Tensor>& mus,
                          const Tensor& ddelta_in, const Tensor& da_in, std::vector<Tensor*> dmus,
                          const Tensor& positions = Tensor());

// a, delta [B, T, d]; mraw [5, B*T, d] (the lerp projections without bias); bias [5, d].
// m = mraw + bias (written over mraw when mraw is contiguous and may be reused: in_place),
// xl[k] = a + delta m[k].
struct Lerp5Out {
  Tensor m;   // [5, B*T, d]
  Tensor xl;  // [5, B*T, d]; slice k viewed [B, T, d] is xl_k
};
Lerp5Out lerp5_forward(const Tensor& a, const Tensor& delta, Tensor mraw, const Tensor& bias, bool in_place);
// dxl: 5 tensors [B, T, d]. da = sum dxl_k, ddelta = sum dxl_k m_k, dm [5, B*T, d].
struct Lerp5Grads {
  Tensor da, ddelta, dm;
};
Lerp5Grads lerp5_backward(const std::vector<Tensor>& dxl, const Tensor& delta, const Tensor& m);

}  // namespace lt::nn
