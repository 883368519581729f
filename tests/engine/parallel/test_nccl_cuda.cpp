// The "nccl" backend on the GPU (the cuda test main exits 77 = skipped without a device).
// Without NCCL (no nccl.h at build time, no libnccl.so.2 at run time) each test says so with
// a WARN and checks that make_nccl refuses with that reason. The GPU machines need
// NCCL_NVLS_ENABLE=0 in the environment.
//   one rank:        every collective (uneven shards too, f32 and bf16) on a created stream,
//                    through a loopback Rendezvous, against the expected result, bit for bit
//   every GPU (>=2): one thread per GPU, one Rendezvous each; sums against a host reference
//                    within the dtype's rounding (NCCL's order and bf16 rounding per step
//                    are its own), copies bit for bit
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

#include "engine/parallel/comm.h"
#include "tests/engine/engine_test_util.h"
#include "tests/engine/parallel/dist_test_util.h"

using namespace lt;
using dist::Shard;
using disttest::bytes_of;
using disttest::loopback_world;
using disttest::run_ranks;
using disttest::what;

namespace {

bool nccl_or_warn() {
  std::string why;
  if (dist::nccl_available(&why)) return true;
  WARN("skipped: NCCL is not usable here: " << why);
  dist::Rendezvous rv(loopback_world(0, 1, 0), 1.0);
  CHECK_THROWS_WITH(dist::make_nccl(rv, Device::cuda(0)), Catch::Contains(why));
  return false;
}

// Shards with gaps and an empty one: shard r = [3r + 1, 3r + 1 + (r + 2) % 3) of n = 3w + 4.
std::vector<Shard> gapped_shards(int world) {
  std::vector<Shard> s(world);
  for (int r = 0; r < world; ++r) s[r] = Shard{3 * r + 1, (r + 2) % 3};
  return s;
}

// What one rank ran and got back, on the host.
struct Results {
  Tensor all_reduce, scatter_even, scatter_gapped, gather_even, gather_gapped, bcast;
};

// Every collective on copies of the rank's inputs (host tensors in[0..5]) moved to `gpu`,
// enqueued on a created stream; results copied back after that stream is synchronised.
Results run_collectives(dist::Communicator& c, const std::vector<Tensor>& in, Device gpu) {
  const int w = c.world();
  const Stream s = Stream::create(gpu);
  std::vector<Tensor> t;
  {
    StreamGuard guard(s);  // allocated on s: no record_stream needed
    for (const Tensor& x : in) t.push_back(x.to(gpu));
  }
  c.all_reduce_sum(t[0], s);
  c.reduce_scatter_sum(t[1], dist::even_shards(t[1].numel(), w), s);
  c.reduce_scatter_sum(t[2], gapped_shards(w), s);
  c.all_gather(t[3], dist::even_shards(t[3].numel(), w), s);
  c.all_gather(t[4], gapped_shards(w), s);
  c.broadcast(t[5], w - 1, s);
  s.synchronize();
  StreamGuard guard(s);
  return {t[0].to(Device::cpu()), t[1].to(Device::cpu()), t[2].to(Device::cpu()),
          t[3].to(Device::cpu()), t[4].to(Device::cpu()), t[5].to(Device::cpu())};
}

std::vector<Tensor> make_inputs(int rank, int world, DType dt, uint64_t seed) {
  const int64_t gapped = 3 * world + 4;
  const std::vector<Shape> shapes = {{4, 33}, {1001}, {gapped}, {1001}, {gapped}, {5, 7}};
  std::vector<Tensor> in;
  for (size_t i = 0; i < shapes.size(); ++i) in.push_back(test::random_tensor(shapes[i], seed + 977 * rank + i, dt));
  return in;
}

// Largest |got - ref| / scale over elements [offset, offset + count): the error of a sum
// judged against the sum of its terms' magnitudes (what rounding in any order can cost).
double worst_scaled(const Tensor& got, const Tensor& ref, const Tensor& scale, int64_t offset, int64_t count) {
  const auto g = got.to_vector(), r = ref.to_vector(), s = scale.to_vector();
  double worst = 0;
  for (int64_t i = offset; i < offset + count; ++i) {
    const double e = std::fabs(g[i] - r[i]) / s[i];
    worst = std::isnan(e) ? INFINITY : std::max(worst, e);
  }
  return worst;
}

}  // namespace

TEST_CASE("nccl: every collective of a one-rank world, on a created stream", "[dist][cuda]") {
  if (!nccl_or_warn()) return;
  const Device gpu = Device::cuda(0);
  dist::Rendezvous rv(loopback_world(0, 1, disttest::free_loopback_port()), 10.0);
  auto comm = dist::make_nccl(rv, gpu);
  CHECK(std::string(comm->backend()) == "nccl");
  CHECK(comm->rank() == 0);
  CHECK(comm->world() == 1);
  CHECK(comm->device() == gpu);
  const uint64_t seed = disttest::test_seed();
  INFO("replay: LINTRAIN_TEST_SEED=" << seed);
  for (DType dt : {DType::f32, DType::bf16}) {
    INFO(dtype_name(dt));
    const auto in = make_inputs(0, 1, dt, seed);
    const Results got = run_collectives(*comm, in, gpu);
    // A sum over one rank is the rank's own values, bit for bit, in every shard.
    CHECK(bytes_of(got.all_reduce) == bytes_of(in[0]));
    CHECK(bytes_of(got.scatter_even) == bytes_of(in[1]));
    const Shard g = gapped_shards(1)[0];
    CHECK(bytes_of(got.scatter_gapped, g.offset, g.count) == bytes_of(in[2], g.offset, g.count));
    CHECK(bytes_of(got.gather_even) == bytes_of(in[3]));
    CHECK(bytes_of(got.gather_gapped) == bytes_of(in[4]));  // between shards: untouched
    CHECK(bytes_of(got.bcast) == bytes_of(in[5]));
  }
  // Arguments are checked before anything is enqueued.
  const Stream s = Stream::create(gpu);
  Tensor host = test::random_tensor({8}, 3);
  CHECK_THROWS_WITH(comm->all_reduce_sum(host, s), Catch::Contains("all_reduce_sum") && Catch::Contains("cpu"));
  Tensor ints = Tensor::zeros({8}, DType::i32, gpu);
  CHECK_THROWS_WITH(comm->broadcast(ints, 0, s), Catch::Contains("dtype i32 is not supported"));
  Tensor dev = test::random_tensor({8}, 3, DType::f32, gpu);
  CHECK_THROWS_WITH(comm->reduce_scatter_sum(dev, {Shard{2, 9}}, s), Catch::Contains("outside"));
  CHECK_THROWS_WITH(comm->all_reduce_sum(dev, Stream()), Catch::Contains("the stream is on cpu"));
  CHECK_THROWS_AS(dist::make_nccl(rv, Device::cpu()), std::invalid_argument);
}

TEST_CASE("nccl: a world of every GPU of this machine (up to 4), one thread each", "[dist][cuda]") {
  if (!nccl_or_warn()) return;
  const int w = std::min(cuda_device_count(), 4);
  if (w < 2) {
    WARN("skipped: a multi-rank NCCL world needs 2 GPUs, this machine has " << cuda_device_count());
    return;
  }
  const uint64_t seed = disttest::test_seed() + 5;
  INFO("replay: LINTRAIN_TEST_SEED=" << disttest::test_seed() << ", world " << w);
  const int port = disttest::free_loopback_port();
  for (DType dt : {DType::f32, DType::bf16}) {
    INFO(dtype_name(dt));
    std::vector<std::vector<Tensor>> in;
    for (int r = 0; r < w; ++r) in.push_back(make_inputs(r, w, dt, seed));
    std::vector<Results> got(w);
    auto errors = run_ranks(w, [&](int r) {
      const Device gpu = Device::cuda(r);
      set_device(gpu);
      dist::Rendezvous rv(loopback_world(r, w, port), 60.0);
      auto comm = dist::make_nccl(rv, gpu);
      got[r] = run_collectives(*comm, in[r], gpu);
      rv.barrier();  // every rank done before any communicator is destroyed
    });
    for (int r = 0; r < w; ++r) {
      INFO("rank " << r);
      REQUIRE(what(errors[r]) == "");
    }
    // Host reference sums in double; NCCL's order (and, for bf16, its rounding per step) is
    // its own, so a sum is compared relative to the sum of its terms' magnitudes.
    auto sum_of = [&](int i, bool magnitudes) {
      Tensor acc;
      for (int r = 0; r < w; ++r) {
        Tensor x = in[r][i].to(DType::f64);
        if (magnitudes) x = ops::abs(x);
        acc = r == 0 ? x : acc + x;
      }
      return acc;
    };
    // f32: w roundings of 2^-24; bf16: w - 1 roundings of 2^-8 (inputs are exact in bf16).
    const double tol = dt == DType::f32 ? 1e-6 : 2e-2;
    const auto even = dist::even_shards(1001, w);
    const auto gapped = gapped_shards(w);
    auto check_sum = [&](const Tensor& got, int i, Shard range) {
      return worst_scaled(got, sum_of(i, false), sum_of(i, true), range.offset, range.count);
    };
    for (int r = 0; r < w; ++r) {
      INFO("rank " << r);
      const Results& g = got[r];
      CHECK(check_sum(g.all_reduce, 0, Shard{0, g.all_reduce.numel()}) <= tol);
      CHECK(check_sum(g.scatter_even, 1, even[r]) <= tol);
      CHECK(check_sum(g.scatter_gapped, 2, gapped[r]) <= tol);
      for (int q = 0; q < w; ++q) {
        CHECK(bytes_of(g.gather_even, even[q].offset, even[q].count) ==
              bytes_of(in[q][3], even[q].offset, even[q].count));
        CHECK(bytes_of(g.gather_gapped, gapped[q].offset, gapped[q].count) ==
              bytes_of(in[q][4], gapped[q].offset, gapped[q].count));
      }
      CHECK(bytes_of(g.bcast) == bytes_of(in[w - 1][5]));
    }
  }
}
