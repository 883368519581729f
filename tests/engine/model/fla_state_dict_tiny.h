// fla's state_dict of the tiny models (d 256, 4 heads, vocab 1000, 2 layers; fla bc3b101d,
// transformers 5.17): name, shape, dtype, mean, std, min, max of every tensor after fla's
// initialisation (fla's state_dict of a tiny model, as printed by transformers 5.17).
#pragma once

namespace lt::test {

inline constexpr const char* kFlaStateDictTiny = R"LISTING(KDAForCausalLM
model.embeddings.weight (1000, 256) float32 -2.841e-05 0.02001 -0.09504 0.09263
model.layers.0.attn_norm.weight (256,) float32 1 0 1 1
model.layers.0.attn.A_log (4,) float32 1.902 0.9187 0.6132 2.749
model.layers.0.attn.dt_bias (256,) float32 -4.654 1.401 -6.902 -2.265
model.layers.0.attn.q_proj.weight (256, 256) float32 -1.824e-05 0.02 -0.08457 0.08658
model.layers.0.attn.k_proj.weight (256, 256) float32 0.0001329 0.02004 -0.08212 0.08109
model.layers.0.attn.v_proj.weight (256, 256) float32 6.427e-05 0.02006 -0.08265 0.0783
model.layers.0.attn.q_conv1d.weight (256, 1, 4) float32 -0.0006218 0.01963 -0.05797 0.06094
model.layers.0.attn.k_conv1d.weight (256, 1, 4) float32 0.0003285 0.0204 -0.0693 0.06605
model.layers.0.attn.v_conv1d.weight (256, 1, 4) float32 0.0002819 0.02055 -0.05996 0.06207
model.layers.0.attn.f_proj.0.weight (64, 256) float32 6.003e-05 0.01991 -0.07708 0.07581
model.layers.0.attn.f_proj.1.weight (256, 64) float32 -0.0001044 0.02 -0.07809 0.07137
model.layers.0.attn.b_proj.weight (4, 256) float32 0.0006683 0.02008 -0.05679 0.06315
model.layers.0.attn.g_proj.0.weight (64, 256) float32 -3.971e-05 0.01994 -0.07789 0.07322
model.layers.0.attn.g_proj.1.weight (256, 64) float32 -0.0002112 0.01997 -0.07788 0.07565
model.layers.0.attn.g_proj.1.bias (256,) float32 0 0 0 0
model.layers.0.attn.o_norm.weight (64,) float32 1 0 1 1
model.layers.0.attn.o_proj.weight (256, 256) float32 2.409e-05 0.02008 -0.08616 0.08813
model.layers.0.mlp_norm.weight (256,) float32 1 0 1 1
model.layers.0.mlp.gate_proj.weight (768, 256) float32 -6.515e-05 0.02002 -0.09118 0.09376
model.layers.0.mlp.up_proj.weight (768, 256) float32 -7.77e-05 0.01993 -0.09483 0.09207
model.layers.0.mlp.down_proj.weight (256, 768) float32 6.734e-05 0.02 -0.08459 0.0963
model.layers.1.attn_norm.weight (256,) float32 1 0 1 1
model.layers.1.attn.A_log (4,) float32 2.101 0.5987 1.314 2.576
model.layers.1.attn.dt_bias (256,) float32 -4.649 1.269 -6.885 -2.275
model.layers.1.attn.q_proj.weight (256, 256) float32 0.0001832 0.02009 -0.08351 0.0782
model.layers.1.attn.k_proj.weight (256, 256) float32 -0.0001736 0.01999 -0.08751 0.08438
model.layers.1.attn.v_proj.weight (256, 256) float32 -0.0001134 0.01998 -0.0804 0.09202
model.layers.1.attn.q_conv1d.weight (256, 1, 4) float32 0.0008296 0.01995 -0.06495 0.06429
model.layers.1.attn.k_conv1d.weight (256, 1, 4) float32 0.0006306 0.01938 -0.06319 0.0609
model.layers.1.attn.v_conv1d.weight (256, 1, 4) float32 -0.0002361 0.02055 -0.06849 0.05916
model.layers.1.attn.f_proj.0.weight (64, 256) float32 2.329e-05 0.02023 -0.079 0.08777
model.layers.1.attn.f_proj.1.weight (256, 64) float32 0.000173 0.01993 -0.07266 0.07627
model.layers.1.attn.b_proj.weight (4, 256) float32 -0.00144 0.02003 -0.07577 0.05566
model.layers.1.attn.g_proj.0.weight (64, 256) float32 -9.861e-06 0.01993 -0.07584 0.08079
model.layers.1.attn.g_proj.1.weight (256, 64) float32 2.362e-05 0.01976 -0.07969 0.07979
model.layers.1.attn.g_proj.1.bias (256,) float32 0 0 0 0
model.layers.1.attn.o_norm.weight (64,) float32 1 0 1 1
model.layers.1.attn.o_proj.weight (256, 256) float32 -1.025e-05 0.02004 -0.07826 0.08061
model.layers.1.mlp_norm.weight (256,) float32 1 0 1 1
model.layers.1.mlp.gate_proj.weight (768, 256) float32 4.933e-05 0.02002 -0.08551 0.08991
model.layers.1.mlp.up_proj.weight (768, 256) float32 1.366e-05 0.01997 -0.0861 0.09048
model.layers.1.mlp.down_proj.weight (256, 768) float32 6.051e-05 0.02 -0.08482 0.09126
model.norm.weight (256,) float32 1 0 1 1
lm_head.weight (1000, 256) float32 4.992e-05 0.01997 -0.08622 0.1013
RWKV6ForCausalLM
model.embeddings.weight (1000, 256) float32 -5.415e-05 0.01995 -0.08554 0.09376
model.layers.0.pre_norm.weight (256,) float32 1 0 1 1
model.layers.0.pre_norm.bias (256,) float32 0 0 0 0
model.layers.0.attn_norm.weight (256,) float32 1 0 1 1
model.layers.0.attn_norm.bias (256,) float32 0 0 0 0
model.layers.0.attn.x_bias (5, 256) float32 0 0 0 0
model.layers.0.attn.bonus (4, 32) float32 0 0 0 0
model.layers.0.attn.x_proj.0.mu (256,) float32 0 0 0 0
model.layers.0.attn.x_proj.0.linear.weight (160, 256) float32 1.398e-05 0.01225 -0.02123 0.02123
model.layers.0.attn.x_proj.2.weight (256, 160) float32 -7.363e-05 0.01226 -0.02123 0.02123
model.layers.0.attn.r_proj.linear.weight (128, 256) float32 7.95e-06 0.0127 -0.0221 0.0221
model.layers.0.attn.w_proj.linear.lora.0.weight (64, 256) float32 0 0 0 0
model.layers.0.attn.w_proj.linear.lora.2.weight (128, 64) float32 7.906e-06 0.008839 -0.03053 0.03547
model.layers.0.attn.w_proj.linear.lora.2.bias (128,) float32 0 0 0 0
model.layers.0.attn.k_proj.linear.weight (128, 256) float32 -8.128e-06 0.01278 -0.0221 0.02209
model.layers.0.attn.v_proj.linear.weight (256, 256) float32 1.844e-05 0.01106 -0.01914 0.01914
model.layers.0.attn.g_proj.linear.weight (256, 256) float32 -1.859e-05 0.01104 -0.01913 0.01914
model.layers.0.attn.g_norm.weight (256,) float32 1 0 1 1
model.layers.0.attn.g_norm.bias (256,) float32 0 0 0 0
model.layers.0.attn.o_proj.weight (256, 256) float32 2.031e-06 0.01104 -0.01914 0.01914
model.layers.0.ffn_norm.weight (256,) float32 1 0 1 1
model.layers.0.ffn_norm.bias (256,) float32 0 0 0 0
model.layers.0.ffn.key.mu (256,) float32 0 0 0 0
model.layers.0.ffn.key.linear.weight (896, 256) float32 4.612e-05 0.01996 -0.09483 0.08498
model.layers.0.ffn.value.weight (256, 896) float32 1.897e-05 0.02005 -0.08751 0.09443
model.layers.0.ffn.receptance.mu (256,) float32 0 0 0 0
model.layers.0.ffn.receptance.linear.weight (256, 256) float32 -3.029e-05 0.01998 -0.08185 0.08241
model.layers.1.attn_norm.weight (256,) float32 1 0 1 1
model.layers.1.attn_norm.bias (256,) float32 0 0 0 0
model.layers.1.attn.x_bias (5, 256) float32 0 0 0 0
model.layers.1.attn.bonus (4, 32) float32 0 0 0 0
model.layers.1.attn.x_proj.0.mu (256,) float32 0 0 0 0
model.layers.1.attn.x_proj.0.linear.weight (160, 256) float32 -8.393e-05 0.01227 -0.02123 0.02123
model.layers.1.attn.x_proj.2.weight (256, 160) float32 -2.65e-05 0.01229 -0.02123 0.02123
model.layers.1.attn.r_proj.linear.weight (128, 256) float32 0.0001504 0.01281 -0.0221 0.0221
model.layers.1.attn.w_proj.linear.lora.0.weight (64, 256) float32 0 0 0 0
model.layers.1.attn.w_proj.linear.lora.2.weight (128, 64) float32 -1.972e-05 0.008839 -0.03274 0.03478
model.layers.1.attn.w_proj.linear.lora.2.bias (128,) float32 0 0 0 0
model.layers.1.attn.k_proj.linear.weight (128, 256) float32 9.3e-05 0.01279 -0.0221 0.0221
model.layers.1.attn.v_proj.linear.weight (256, 256) float32 2.078e-06 0.01106 -0.01914 0.01914
model.layers.1.attn.g_proj.linear.weight (256, 256) float32 1.387e-05 0.01106 -0.01914 0.01914
model.layers.1.attn.g_norm.weight (256,) float32 1 0 1 1
model.layers.1.attn.g_norm.bias (256,) float32 0 0 0 0
model.layers.1.attn.o_proj.weight (256, 256) float32 2.16e-05 0.01106 -0.01913 0.01914
model.layers.1.ffn_norm.weight (256,) float32 1 0 1 1
model.layers.1.ffn_norm.bias (256,) float32 0 0 0 0
model.layers.1.ffn.key.mu (256,) float32 0 0 0 0
model.layers.1.ffn.key.linear.weight (896, 256) float32 3.375e-05 0.02003 -0.08551 0.08991
model.layers.1.ffn.value.weight (256, 896) float32 2.031e-05 0.01999 -0.0861 0.09048
model.layers.1.ffn.receptance.mu (256,) float32 0 0 0 0
model.layers.1.ffn.receptance.linear.weight (256, 256) float32 0.0001939 0.02003 -0.08471 0.0783
model.norm.weight (256,) float32 1 0 1 1
model.norm.bias (256,) float32 0 0 0 0
lm_head.weight (1000, 256) float32 7.083e-05 0.01998 -0.0856 0.1013
)LISTING";

}  // namespace lt::test
