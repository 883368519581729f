// The training step as a CUDA graph (train.cuda_graph, engine/train/step_graph.h): a run that
// replays the captured step equals the same run with every step eager, bit for bit (every
// logged loss and gradient norm, the final weights and AdamW moments), for both models in
// bf16, with one micro-batch and with two, and with timed (eager) steps interleaved among the
// replays. Runs only with a GPU (the cuda test main exits 77 otherwise).
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "engine/io/safetensors.h"
#include "tests/engine/train/trainer_test_util.h"

namespace fs = std::filesystem;
using lt::traintest::run_trainer;
using lt::traintest::TempDir;
using lt::traintest::write_text;

namespace {

struct RunRecord {
  std::vector<double> loss, grad_norm;
};
RunRecord records(const std::string& metrics) {
  RunRecord r;
  for (const auto& j : lt::traintest::train_records(metrics)) {
    r.loss.push_back(j["loss"].get<double>());
    r.grad_norm.push_back(j["grad_norm"].get<double>());
  }
  return r;
}

}  // namespace

TEST_CASE("trainer cuda: steps replayed from the CUDA graph equal eager steps bit for bit", "[trainer][graph][cuda]") {
  TempDir tmp;
  const std::string config = R"({"description": "test: CUDA graph vs eager", "device": "cuda:0",
      "model": {"vocab_size": 256, "hidden_size": 128, "num_layers": 2, "num_heads": 2, "head_dim": 64,
                "precision": "bf16", "chunk": 32},
      "data": {"source": "synthetic", "task": "mqar", "mqar_pairs": 8},
      "train": {"batch_size": 4, "seq_len": 128, "steps": 12, "lr": 2e-3, "warmup_steps": 2, "seed": 5,
                "eval_every": 0, "checkpoint_every": 0, "log_every": 1}})";
  write_text(tmp / "cfg.json", config);
  // kda-ops: KDA in fp32 at head_dim 32, which runs the mixer's ops path (the fused kernels
  // take 64 and 128): its padding masks are built on the device, so it is captured too.
  for (const std::string variant : {"kda", "rwkv6", "kda-ops"})
    for (const char* accum : {"1", "2"}) {
      const std::string arch = variant == "rwkv6" ? "rwkv6" : "kda";
      std::vector<std::string> extra;
      if (variant == "kda-ops")
        extra = {"--set", "model.precision=fp32", "--set", "model.head_dim=32", "--set", "model.num_heads=4"};
      DYNAMIC_SECTION(variant << " grad_accum " << accum) {
        auto run = [&](const std::string& tag, bool graph, const std::string& timers) {
          const std::string out = tmp / tag;
          std::vector<std::string> args = {"--config", tmp / "cfg.json",
                                           "--out",    out,
                                           "--resume", "none",
                                           "--set",    "model.arch=" + arch,
                                           "--set",    std::string("train.grad_accum=") + accum,
                                           "--set",    std::string("train.cuda_graph=") + (graph ? "true" : "false"),
                                           "--timers", timers};
          args.insert(args.end(), extra.begin(), extra.end());
          auto r = run_trainer(args, tmp.path.string(), tag);
          INFO(r.err);
          REQUIRE(r.rc == 0);
          return r;
        };
        const std::string eager_tag = "eager-" + variant + accum;
        const std::string graph_tag = "graph-" + variant + accum;
        run(eager_tag, false, "off");
        // Every fourth step is timed, so eager steps run between the replays.
        auto rg = run(graph_tag, true, "step%4");
        CHECK_THAT(rg.err, Catch::Contains("train.cuda_graph: step") && Catch::Contains("captured"));
        const RunRecord e = records(tmp / (eager_tag + "/metrics.jsonl"));
        const RunRecord g = records(tmp / (graph_tag + "/metrics.jsonl"));
        REQUIRE(e.loss.size() == 12);
        REQUIRE(g.loss.size() == 12);
        for (size_t i = 0; i < 12; ++i) {
          INFO("step " << i + 1);
          CHECK(g.loss[i] == e.loss[i]);
          CHECK(g.grad_norm[i] == e.grad_norm[i]);
        }
        const std::string ckpt = "/step-00000012/";
        CHECK(lt::traintest::read_text(tmp / (eager_tag + ckpt + "model.safetensors")) ==
              lt::traintest::read_text(tmp / (graph_tag + ckpt + "model.safetensors")));
        // The state file: the same moments and loop state; its config differs in train.cuda_graph
        // and the output folder alone.
        const lt::io::SafetensorsFile se = lt::io::read_safetensors(tmp / (eager_tag + ckpt + "state.safetensors"));
        const lt::io::SafetensorsFile sg = lt::io::read_safetensors(tmp / (graph_tag + ckpt + "state.safetensors"));
        CHECK(se.names == sg.names);
        CHECK(se.data == sg.data);
        CHECK(se.metadata.at("lintrain_state") == sg.metadata.at("lintrain_state"));
        nlohmann::json ce = nlohmann::json::parse(se.metadata.at("lintrain_config"));
        nlohmann::json cg = nlohmann::json::parse(sg.metadata.at("lintrain_config"));
        CHECK(ce["train"]["cuda_graph"] == false);
        CHECK(cg["train"]["cuda_graph"] == true);
        for (nlohmann::json* c : {&ce, &cg}) {
          (*c)["train"].erase("cuda_graph");
          c->erase("out");
        }
        CHECK(ce == cg);
      }
    }
}
