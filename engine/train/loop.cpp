// The pieces the trainer's subcommands share: the device of a run, evaluation on validation
// batches, a model from a checkpoint. The training run itself is engine/train/trainer.cpp.
#include "engine/train/loop.h"

#include <cstring>

#include "engine/data/loader.h"
#include "kernels/launch.h"

namespace lt::train {
Device resolve_device(const std::string& spec) {
  if (spec == "auto") return default_device();
  Device d;
  try {
    d = Device::parse(spec);
  } catch (const std::exception&) { throw ConfigError("device '" + spec + "': expected auto, cpu, cuda or cuda:N"); }
  if (d.is_cuda()) {
    if (!cuda_available())
      throw ConfigError("device '" + spec + "': CUDA is not usable here (see the line above); use cpu or auto");
    if (d.index >= cuda_device_count())
      throw ConfigError("device '" + spec + "': only " + std::to_string(cuda_device_count()) + " CUDA device(s)");
  }
  return d;
}

Device resolve_run_device(const RunConfig& rc) {
  if (rc.model.precision != model::Precision::fp64) return resolve_device(rc.device);
  if (rc.device == "auto") return Device::cpu();
  Device d = resolve_device(rc.device);
  if (d.is_cuda())
    throw ConfigError("config keys 'model.precision' fp64 and 'device' " + rc.device +
                      ": the fp64 mode runs on the CPU only (use device cpu or auto)");
  return d;
}

std::optional<mixers::Segments> batch_segments(const data::Batch& batch, const data::DataConfig& dc, Device device) {
  const int64_t eot = dc.reset_token();
  if (eot < 0) return std::nullopt;
  const int64_t n = batch.B * batch.T;
  const int32_t* tok = batch.token_data();
  std::vector<uint8_t> starts(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) starts[i] = tok[i] == eot ? 1 : 0;
  mixers::Segments seg(std::move(starts), batch.B, batch.T, device);
  if (!seg.any()) return std::nullopt;
  return seg;
}

EvalResult evaluate(model::Model& m, const RunConfig& rc, int64_t batches) {
  StageScope stage("eval");
  const int64_t B = rc.train.batch_size, T = rc.train.seq_len;
  data::Loader val(rc.data, data::Split::val, B, T, rc.train.seed);
  std::vector<data::Batch> bs;
  int64_t valid = 0;
  for (int64_t i = 0; i < batches; ++i) {
    bs.push_back(val.next());
    valid += bs.back().valid_targets;
  }
  EvalResult r;
  if (valid == 0) return r;
  Device dev = m.device();
  Tensor loss = Tensor::zeros({}, m.arenas().params.dtype(), dev);  // f32 (f64 in the fp64 mode)
  int64_t correct = 0;
  for (const auto& b : bs) {
    Tensor tokens =
        Tensor::from_vector(std::vector<int64_t>(b.tokens.begin(), b.tokens.end()), {B, T}, DType::i32, dev);
    Tensor targets =
        Tensor::from_vector(std::vector<int64_t>(b.targets.begin(), b.targets.end()), {B, T}, DType::i32, dev);
    Tensor flags = Tensor::full({B * T}, -1.0, DType::i32, dev);
    const std::optional<mixers::Segments> seg = batch_segments(b, rc.data, dev);
    m.evaluate(tokens, targets, 1.0 / static_cast<double>(valid), loss, flags, seg ? &*seg : nullptr);
    for (double f : flags.to_vector()) correct += f > 0.5 ? 1 : 0;
  }
  r.loss = loss.item();
  r.targets = valid;
  r.accuracy = static_cast<double>(correct) / static_cast<double>(valid);
  return r;
}

LoadedModel load_model_from_checkpoint(const std::string& dir, const std::string& device_spec, bool need_data) {
  LoadedModel lm;
  try {
    lm.checkpoint = checkpoint_load(dir);
  } catch (const std::exception& e) { throw ConfigError(e.what()); }
  // export and sample need no data files: the run's data may have moved.
  lm.config = config_resolve(lm.checkpoint.config, need_data);
  RunConfig on = lm.config;
  on.device = device_spec;
  Device dev = resolve_run_device(on);
  lm.model = std::make_unique<model::Model>(lm.config.model, dev);
  lm.model->load_params(lm.checkpoint.model);
  lm.model->refresh_shadow();
  return lm;
}

}  // namespace lt::train
