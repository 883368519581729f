// The data path on CUDA: a staging loader (pinned slots written by the prefetch thread,
// few slots so they are reused while copies may be in flight) uploaded asynchronously on a
// non-default stream delivers, step after step, exactly the batches of a plain CPU loader;
// the device tensors are poisoned with NaN-bytes first (allocator poison mode), so a copy
// that did not land shows. A device -> host copy into pinned staging is read once ready.
// The AdamW step gate (engine/optim/adamw.h) gives the CPU's skip codes and report on CUDA.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>

#include "allocator/caching_allocator.h"
#include "engine/data/loader.h"
#include "engine/ops.h"
#include "engine/optim/adamw.h"
#include "engine/staging.h"
#include "kernels/adamw.h"
#include "tests/engine/engine_test_util.h"

using namespace lt;
using lt::test::PoisonScope;

namespace {

const Device kGpu = Device::cuda(0);

data::DataConfig mqar(int prefetch) {
  data::DataConfig c;
  c.source = "synthetic";
  c.task = "mqar";
  c.vocab_size = 128;
  c.mqar_pairs = 8;
  c.prefetch = prefetch;
  return c;
}

}  // namespace

TEST_CASE("staging cuda: asynchronous uploads from reused pinned slots deliver the CPU batches",
          "[data][staging][cuda]") {
  PoisonScope poison;
  const Stream stream = Stream::create(kGpu);
  StreamGuard guard(stream);
  for (int prefetch : {0, 2}) {
    INFO("prefetch " << prefetch);
    const int64_t B = 4, T = 256;
    data::Loader plain(mqar(prefetch), data::Split::train, B, T, 3);
    data::Loader staged(mqar(prefetch), data::Split::train, B, T, 3, data::Staging{kGpu, 2});
    std::vector<data::DeviceBatch> on_device;
    std::vector<data::Batch> want;
    // Several steps of two micro-batches; every upload is enqueued before any is checked,
    // and a large enough kernel between them keeps the copies queued behind device work.
    Tensor busy = ops::randn({1024, 1024}, 1, 0, DType::f32, kGpu);
    for (int step = 0; step < 8; ++step) {
      for (int micro = 0; micro < 2; ++micro) {
        data::Batch b = staged.next();
        REQUIRE(b.staged);
        on_device.push_back(data::upload(b, kGpu));
        CHECK_FALSE(b.staged);
        want.push_back(plain.next());
      }
      busy = ops::matmul(busy, busy) * (1.0 / 1024.0);
    }
    stream.synchronize();
    for (size_t i = 0; i < want.size(); ++i) {
      INFO("batch " << i);
      REQUIRE(on_device[i].tokens.device() == kGpu);
      const std::vector<double> tok = on_device[i].tokens.to_vector(), tgt = on_device[i].targets.to_vector();
      CHECK(std::equal(tok.begin(), tok.end(), want[i].tokens.begin()));
      CHECK(std::equal(tgt.begin(), tgt.end(), want[i].targets.begin()));
    }
    const auto st = staged.staging()->stats();
    CHECK(st.acquires >= 16);  // the prefetch thread may have taken slots for the next batches
    INFO("slots " << st.slots << ", waits " << st.waits << ", grown " << st.grown);
    CHECK(st.slots <= 2 + prefetch + 1);
  }
}

TEST_CASE("staging cuda: a device -> host copy into pinned memory is there once ready", "[staging][cuda]") {
  HostStaging staging(kGpu, 4096, 2);
  const Stream stream = Stream::create(kGpu);
  StreamGuard guard(stream);
  for (int round = 0; round < 5; ++round) {
    Tensor src = ops::randn({1000}, 10 + static_cast<uint64_t>(round), 0, DType::f32, kGpu);
    HostStaging::Lease l = staging.acquire();
    std::memset(l.data(), 0xFF, l.bytes());
    copy_to_host_async(l, src);
    l.wait();
    CHECK(l.ready());
    const std::vector<double> want = src.to_vector();
    const float* got = static_cast<const float*>(l.data());
    int bad = 0;
    for (size_t i = 0; i < want.size(); ++i) bad += static_cast<double>(got[i]) != want[i];
    CHECK(bad == 0);
  }
  CHECK_THROWS_WITH(
      [&] {
        HostStaging::Lease l = staging.acquire();
        copy_to_host_async(l, Tensor::zeros({2000}, DType::f32, kGpu));
      }(),
      Catch::Contains("exceed the slot's 4096 bytes"));
}

TEST_CASE("staging cuda: the AdamW step gate skips and reports as on the CPU", "[optim][adamw][cuda]") {
  const int64_t P = 1003;
  struct Case {
    double loss;
    bool nan_grad;
    bool spike;
    kern::SkipCode want;
  };
  const double nan = std::nan("");
  const Case cases[] = {{2.5, false, false, kern::SkipCode::applied},
                        {nan, false, false, kern::SkipCode::nonfinite_loss},
                        {INFINITY, true, false, kern::SkipCode::nonfinite_loss},
                        {2.5, true, false, kern::SkipCode::nonfinite_norm},
                        {9.0, false, true, kern::SkipCode::loss_spike},
                        {2.6, false, true, kern::SkipCode::applied}};
  for (const Case& c : cases) {
    INFO("loss " << c.loss << " nan_grad " << c.nan_grad << " spike " << c.spike);
    std::vector<double> reports[2];
    std::vector<double> params[2];
    int k = 0;
    for (Device dev : {Device::cpu(), kGpu}) {
      optim::AdamWArenas a;
      a.params = ops::randn({P}, 1, 0, DType::f32, dev);
      a.grads = ops::randn({P}, 2, 0, DType::f32, dev);
      if (c.nan_grad) a.grads.narrow(0, 500, 1).fill_(nan);
      a.m = Tensor::zeros({P}, DType::f32, dev);
      a.v = Tensor::zeros({P}, DType::f32, dev);
      a.decay_end = 600;
      Tensor norm = optim::grad_norm(a.grads);
      Tensor skipped = Tensor::zeros({}, DType::i32, dev);
      optim::StepGate gate;
      gate.loss = Tensor::full({}, c.loss, DType::f32, dev);
      gate.report = Tensor::full({3}, -7.0, DType::f64, dev);
      gate.spike_test = c.spike;
      gate.spike_mean = 2.5;
      gate.spike_sd = 0.1;
      gate.spike_zscore = 3.0;
      optim::adamw_step(a, optim::AdamWConfig{}, 1e-2, 1, norm, skipped, &gate);
      reports[k] = gate.report.to_vector();
      params[k] = a.params.to_vector();
      CHECK(skipped.item() == (c.want == kern::SkipCode::applied ? 0.0 : 1.0));
      ++k;
    }
    CHECK(reports[1][2] == static_cast<double>(static_cast<int32_t>(c.want)));
    CHECK(reports[0][2] == reports[1][2]);
    CHECK(std::isnan(reports[0][0]) == std::isnan(reports[1][0]));
    if (!std::isnan(reports[0][0])) CHECK(reports[0][0] == reports[1][0]);
    CHECK(std::isfinite(reports[1][1]) == !c.nan_grad);
    if (c.want != kern::SkipCode::applied) {
      const std::vector<double> before = ops::randn({P}, 1, 0, DType::f32, Device::cpu()).to_vector();
      CHECK(params[1] == before);
    }
  }
}
