// trainer: train, resume, export, sample and evaluate lintrain's depth-2 KDA / RWKV6 models.
// CLI parsing only; the work is in engine/train (config, loop, checkpoint).
// Exit codes: 0 done (also after SIGINT / SIGTERM with a checkpoint written); 2 bad input
// (command line, config, data files, checkpoint that does not fit; nothing written);
// 3 stopped after train.max_consecutive_skips skipped updates; 1 any other failure.
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "engine/io/safetensors.h"
#include "engine/log.h"
#include "engine/model/sampling.h"
#include "engine/parallel/comm.h"
#include "engine/parallel/job.h"
#include "engine/parallel/launch.h"
#include "engine/train/bench.h"
#include "engine/train/checkpoint.h"
#include "engine/train/config.h"
#include "engine/train/eval_text.h"
#include "engine/train/instrument.h"
#include "engine/train/kernel_trace.h"
#include "engine/train/loop.h"
#include "engine/train/prompt.h"
#include "engine/train/timers.h"
#include "kernels/launch.h"

namespace {

namespace fs = std::filesystem;
using lt::train::ConfigError;

constexpr const char* kExamples = R"(
Examples:
  trainer --config configs/quick.json                      train the quick CPU job (resumes if run again)
  trainer --config configs/night.json --device cuda:0      the long GPU run
  trainer --config configs/quick.json --set train.lr=1e-3 --set model.hidden_size=128
  trainer --config configs/quick.json --print-config       the effective config as JSON
  trainer --config configs/quick.json --resume none        start over (removes old checkpoints of --out)
  trainer export --checkpoint runs/quick/step-00000200 --out fla-model
  trainer sample --checkpoint runs/text/step-00002000 --prompt "Once upon" --tokens 200 --temperature 0.8 --top-k 40
  trainer eval   --checkpoint runs/quick/step-00000200
  trainer eval   --checkpoint runs/text/step-00002000 --data book.txt   loss, perplexity, bits per byte of a file
  trainer --config configs/night.json --timers step%50     per-stage ms/step table every 50th step
  trainer --config configs/bench-step-kda.json --bench 200 --timers step%50 --bench-out a.json
  trainer --config configs/bench-step-kda.json --bench 200 --timers step%50 --kernel-trace k.jsonl
                                                           CUPTI's kernels of the timed steps, per stage
  trainer bench-compare a.json b.json                      per-stage ratios, verdicts beyond the runs' spread
  trainer --config configs/quick.json --alloc-trace runs/alloc.json   allocator trace of the first steps
  trainer --config configs/night.json --nproc 8 --set train.batch_size=64
                                                           data parallel: 8 ranks (GPUs) of this host, 8 rows each
  torchrun-style: RANK=0 WORLD_SIZE=16 LOCAL_RANK=0 MASTER_ADDR=node0 MASTER_PORT=29500 trainer --config F
                                                           one rank of a multi-node job (README: two nodes)

Exit codes: 0 done (also after SIGINT/SIGTERM: a checkpoint is written first); 2 bad input
(nothing written); 3 stopped after too many skipped updates; 1 other failure.

Config keys (JSON sections "model", "data", "train"; override any with --set key.path=value):
)";

// A CLI11 check that a whole-number option is at least `lo`, with a message that says so
// (CLI11's own range checks print the whole range, up to all 309 digits of the largest double).
CLI::Validator at_least(int64_t lo) {
  return CLI::Validator(
      [lo](std::string& text) -> std::string {
        size_t used = 0;
        long long v = 0;
        try {
          v = std::stoll(text, &used);
        } catch (const std::exception&) { used = 0; }
        if (used == 0 || used != text.size()) return "expected a whole number, got '" + text + "'";
        if (v < lo) return "must be " + std::to_string(lo) + " or more, got " + text;
        return "";
      },
      ">=" + std::to_string(lo));
}

// Builds the effective config: file, then --set overrides, then the dedicated flags.
lt::train::RunConfig build_config(const std::string& path, const std::vector<std::string>& sets,
                                  const std::string& device, int64_t steps, const std::string& out, int64_t seed,
                                  const std::string& init_from) {
  nlohmann::ordered_json j = lt::train::config_load_file(path);
  for (const auto& s : sets) lt::train::config_apply_override(j, s);
  if (!device.empty()) lt::train::config_apply_override(j, "device=" + device);
  if (steps >= 0) lt::train::config_apply_override(j, "train.steps=" + std::to_string(steps));
  if (!out.empty()) lt::train::config_apply_override(j, "out=" + out);
  if (seed >= 0) lt::train::config_apply_override(j, "train.seed=" + std::to_string(seed));
  if (!init_from.empty()) lt::train::config_apply_override(j, "train.init_from=" + init_from);
  return lt::train::config_resolve(j);
}

int run_export(const std::string& checkpoint, const std::string& out) {
  auto lm = lt::train::load_model_from_checkpoint(checkpoint, "cpu", false);
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) throw ConfigError("export --out '" + out + "': cannot create the folder (" + ec.message() + ")");
  {
    std::string tmp = (fs::path(out) / "config.json.tmp").string();
    std::ofstream f(tmp, std::ios::trunc);
    if (!f) throw ConfigError("export --out '" + out + "': folder cannot be written");
    f << lm.model->fla_config().dump(2) << "\n";
    f.close();
    fs::rename(tmp, fs::path(out) / "config.json");
  }
  lt::io::write_safetensors((fs::path(out) / "model.safetensors").string(), lm.model->named_params(),
                            {{"format", "pt"}});
  spdlog::info(
      "exported {} (step {}) to {}: config.json + model.safetensors; load with "
      "transformers.AutoModelForCausalLM.from_pretrained('{}') after `import fla`",
      checkpoint, lm.checkpoint.step, out, out);
  return 0;
}

int run_sample(const std::string& checkpoint, const std::string& prompt, int64_t tokens, double temperature,
               int64_t top_k, uint64_t seed, const std::string& device) {
  auto lm = lt::train::load_model_from_checkpoint(checkpoint, device, false);
  std::vector<int32_t> ids = lt::train::encode_prompt(lm.config, prompt);
  if (lm.config.data.source == "tokens") {
    std::string tok = (fs::path(lm.config.data.path).parent_path() / "tokenizer.json").string();
    if (fs::exists(tok)) spdlog::info("encoding and decoding with {}", tok);
    else spdlog::info("no tokenizer.json beside the run's token data: prompt and output are token ids");
  }
  auto out = lt::model::sample_tokens(*lm.model, ids, tokens, temperature, top_k, seed);
  std::vector<int32_t> all = ids;
  all.insert(all.end(), out.begin(), out.end());
  std::cout << lt::train::decode_tokens(lm.config, all) << std::endl;
  return 0;
}

int run_eval(const std::string& checkpoint, int64_t batches, const std::string& device, const std::string& data) {
  if (!data.empty()) {
    if (batches > 0)
      throw ConfigError("eval --batches " + std::to_string(batches) +
                        " draws random validation batches of the run's data, "
                        "but --data scores every window of '" +
                        data + "': give one of them");
    auto lm = lt::train::load_model_from_checkpoint(checkpoint, device, false);
    const lt::train::EvalDocuments in = lt::train::load_eval_documents(lm.config, data);
    if (!in.tokenizer.empty()) spdlog::info("encoding and measuring bytes with {}", in.tokenizer);
    if (in.token_bytes.empty())
      spdlog::warn("bits_per_byte is null: no tokenizer.json beside the run's token shards gives the tokens' bytes");
    auto r = lt::train::evaluate_documents(*lm.model, lm.config, in.documents, in.token_bytes,
                                           lt::train::stderr_progress_printer());
    nlohmann::ordered_json j;
    j["checkpoint"] = checkpoint;
    j["step"] = lm.checkpoint.step;
    j["data"] = data;
    j["documents"] = r.documents;
    j["tokens"] = r.tokens;
    j["targets"] = r.targets;
    j["bytes"] = r.bytes >= 0 ? nlohmann::ordered_json(r.bytes) : nlohmann::ordered_json(nullptr);
    j["loss"] = r.loss;
    j["perplexity"] = r.perplexity;
    j["bits_per_token"] = r.bits_per_token;
    j["bits_per_byte"] = r.bits_per_byte;  // NaN (unknown bytes) is written as null
    j["accuracy"] = r.accuracy;
    std::cout << j.dump() << std::endl;
    return 0;
  }
  auto lm = lt::train::load_model_from_checkpoint(checkpoint, device, true);
  if (batches <= 0) batches = lm.config.train.eval_batches;
  auto r = lt::train::evaluate(*lm.model, lm.config, batches);
  bool mqar = lm.config.data.source == "synthetic" && lm.config.data.task == "mqar";
  nlohmann::ordered_json j;
  j["checkpoint"] = checkpoint;
  j["step"] = lm.checkpoint.step;
  j["val_loss"] = r.loss;
  j[mqar ? "mqar_accuracy" : "val_accuracy"] = r.accuracy;
  j["val_targets"] = r.targets;
  std::cout << j.dump() << std::endl;
  return 0;
}

}  // namespace

int run_bench_compare(const std::string& a, const std::string& b) {
  auto load = [](const std::string& path) {
    std::ifstream f(path);
    if (!f) throw ConfigError("bench-compare: cannot read '" + path + "'");
    try {
      return nlohmann::json::parse(f);
    } catch (const nlohmann::json::exception& e) {
      throw ConfigError("bench-compare: '" + path + "' is not JSON: " + e.what());
    }
  };
  const nlohmann::json ja = load(a), jb = load(b);
  try {
    std::cout << lt::train::bench_compare(ja, jb, a, b);
  } catch (const std::runtime_error& e) { throw ConfigError(e.what()); }
  return 0;
}

int main(int argc, char** argv) {
  // Log lines and progress go to stderr: stdout carries only results (--print-config,
  // `eval`'s JSON line, `sample`'s text).
  spdlog::set_default_logger(spdlog::stderr_color_mt("lintrain"));
  lt::log_init();
  CLI::App app{
      "trainer: train depth-2 KDA / RWKV6 language models (lintrain).\n"
      "Runs on CUDA when a GPU is present, else on the CPU. Writes <out>/config.json, <out>/metrics.jsonl\n"
      "and checkpoints <out>/step-NNNNNNNN/; running the same command again resumes."};
  app.footer(std::string(kExamples) + lt::train::config_schema_help());
  app.require_subcommand(0, 1);

  std::string config_path, device, out, init_from, resume = "auto";
  std::vector<std::string> sets;
  int64_t steps = -1, seed = -1;
  bool print_config = false;
  app.add_option("--config", config_path, "JSON config file, e.g. configs/quick.json (keys: see below)");
  app.add_option("--set", sets, "override one config key, typed by the schema: --set train.lr=1e-3 (repeatable)");
  app.add_option("--device", device, "auto | cpu | cuda | cuda:N (config key 'device'), e.g. --device cpu");
  app.add_option("--steps", steps, "total optimizer steps (config key train.steps), e.g. --steps 50")
      ->check(at_least(1));
  app.add_option("--resume", resume,
                 "auto: continue from the newest checkpoint in --out that verifies (default); none: start over "
                 "(removes old checkpoints); or a checkpoint folder, e.g. --resume runs/quick/step-00000200");
  app.add_option("--out", out, "output folder (config key 'out'), e.g. --out runs/try1");
  app.add_option("--seed", seed, "seed of the weights and the data order (config key train.seed), e.g. --seed 7")
      ->check(at_least(0));
  app.add_option("--init-from", init_from,
                 "start from the weights in this folder (fla's config.json + model.safetensors, e.g. from trainer "
                 "export; config key train.init_from); the model keys must match it, AdamW starts fresh");
  app.add_flag("--print-config", print_config,
               "print the effective config (file + overrides + defaults) as JSON and exit");
  int nproc = 0;
  app.add_option("--nproc", nproc,
                 "data parallel on this host: start N ranks (one process per GPU, cuda:0..N-1; on the CPU N "
                 "processes), train.batch_size split over them; keys dist.* tune it. A launcher's RANK / WORLD_SIZE "
                 "/ LOCAL_RANK / MASTER_ADDR / MASTER_PORT (or SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID) make "
                 "this process one rank of such a job instead. e.g. --nproc 8")
      ->check(at_least(1));
  std::string timers = "off", timers_trace, kernel_trace, bench_out, alloc_trace, dump_trajectory;
  int64_t bench = 0, bench_warmup = 10, alloc_trace_steps = 3, alloc_snapshot_at = 0;
  app.add_option("--timers", timers,
                 std::string("per-stage CUDA-event timers (steady clock on the CPU): ") + lt::train::kTimerGrammar +
                     "; steps count from 0, the first after warm-up; e.g. --timers step%50");
  app.add_option("--timers-trace", timers_trace,
                 "write the timed steps as a Chrome / Perfetto trace, e.g. runs/t.json");
  app.add_option("--kernel-trace", kernel_trace,
                 "with --timers on CUDA: record the timed steps' kernels with CUPTI (libcupti loaded at run time; "
                 "$LINTRAIN_CUPTI_LIB names it) and write one JSON line per timed step, each kernel tagged with its "
                 "stages; compare with scripts/timer_fidelity.py. e.g. --timers step%50 --kernel-trace runs/k.jsonl");
  app.add_option("--bench", bench,
                 "the quiet-card arm: run --bench-warmup steps, then N measured steps (no eval, no checkpoints; "
                 "output in <out>/bench), write the result JSON; e.g. --bench 200 --timers step%50")
      ->check(at_least(0));
  app.add_option("--bench-warmup", bench_warmup, "warm-up steps before --bench's measured steps (default 10)")
      ->check(at_least(0));
  app.add_option("--bench-out", bench_out, "the --bench result JSON (default <out>/bench/bench.json)");
  app.add_option("--alloc-trace", alloc_trace,
                 "record the caching allocator's events of the first --alloc-trace-steps steps and write the "
                 "PyTorch-schema snapshot FILE (+ .pickle) and a Chrome trace (.trace.json); also written on OOM");
  app.add_option("--alloc-trace-steps", alloc_trace_steps, "steps traced by --alloc-trace (default 3)")
      ->check(at_least(1));
  app.add_option("--alloc-snapshot-at", alloc_snapshot_at, "write an allocator snapshot after this step (1-based)")
      ->check(at_least(0));
  app.add_option("--dump-trajectory", dump_trajectory,
                 "write the run's initial weights, batches and per-step loss / grad norm / lr to DIR, for "
                 "scripts/fla_trajectory.py (one process), e.g. --dump-trajectory runs/t/trajectory");

  std::string ck, ex_out, prompt, s_device = "auto", e_device = "auto";
  int64_t n_tokens = 64, top_k = 0, batches = 0;
  double temperature = 0.0;
  uint64_t s_seed = 1;
  CLI::App* ex = app.add_subcommand(
      "export",
      "write config.json + model.safetensors that fla's KDAForCausalLM / "
      "RWKV6ForCausalLM load.\n  e.g. trainer export --checkpoint runs/quick/step-00000200 --out fla-model");
  ex->add_option("--checkpoint", ck, "checkpoint folder (step-NNNNNNNN)")->required();
  ex->add_option("--out", ex_out, "output folder for config.json and model.safetensors")->required();
  CLI::App* sa = app.add_subcommand("sample",
                                    "generate text from a checkpoint (token ids for token data without a "
                                    "tokenizer.json).\n"
                                    "  e.g. trainer sample --checkpoint runs/text/step-00002000 --prompt \"The \" "
                                    "--tokens 200 --temperature 0.8 --top-k 40");
  sa->add_option("--checkpoint", ck, "checkpoint folder (step-NNNNNNNN)")->required();
  sa->add_option("--prompt", prompt,
                 "prompt text, for byte and BPE models alike (BPE: encoded with the tokenizer.json beside the "
                 "run's token shards); token data without a tokenizer.json: token ids \"12 7 99\"")
      ->required();
  sa->add_option("--tokens", n_tokens, "tokens to generate (default 64)");
  sa->add_option("--temperature", temperature, "softmax temperature; 0 = greedy (default 0)");
  sa->add_option("--top-k", top_k, "sample among the k most likely tokens; 0 = all (default 0)");
  sa->add_option("--seed", s_seed, "sampling seed (default 1)");
  sa->add_option("--device", s_device, "auto | cpu | cuda[:N] (default auto)");
  std::string cmp_a, cmp_b;
  CLI::App* bc = app.add_subcommand("bench-compare",
                                    "compare two --bench results: per-stage median ratios B/A, with a verdict only "
                                    "where the medians lie outside each other's p10-p90 spread. On a shared card, "
                                    "run A and B interleaved (A B A B ...) in one sitting");
  bc->add_option("A", cmp_a, "the baseline result JSON")->required();
  bc->add_option("B", cmp_b, "the result JSON to compare")->required();
  std::string e_data;
  CLI::App* ev = app.add_subcommand(
      "eval",
      "loss of a checkpoint as one JSON line: without --data, validation loss and accuracy (MQAR accuracy on the "
      "synthetic task) over random validation batches of the run's data; with --data, every token of a text or "
      "token file scored once.\n"
      "  e.g. trainer eval --checkpoint runs/quick/step-00000200\n"
      "       trainer eval --checkpoint runs/text/step-00002000 --data book.txt");
  ev->add_option("--checkpoint", ck, "checkpoint folder (step-NNNNNNNN)")->required();
  ev->add_option("--batches", batches, "validation batches (default: the run's train.eval_batches); not with --data");
  ev->add_option("--data", e_data,
                 "score every token of PATH, read as the run reads its data: byte runs (data.source text, synthetic "
                 "bytes): a text file or a folder of text files; token runs: llm.c token shards (a file or a glob) or "
                 "text encoded with the tokenizer.json beside the run's shards; not MQAR runs. Each file is one "
                 "document, cut into windows of train.seq_len targets (overlapping by one token, never crossing "
                 "files), train.batch_size windows at a time; the recurrent state restarts at every window. Progress "
                 "on stderr; on stdout {checkpoint, step, data, documents, tokens, targets, bytes, loss (nats per "
                 "target), perplexity, bits_per_token, bits_per_byte (nats / ln 2 / bytes of the targets; null for "
                 "shards without a tokenizer.json), accuracy}. e.g. --data book.txt")
      ->type_name("PATH");
  ev->add_option("--device", e_device, "auto | cpu | cuda[:N] (default auto)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }

  try {
    if (ex->parsed()) return run_export(ck, ex_out);
    if (sa->parsed()) return run_sample(ck, prompt, n_tokens, temperature, top_k, s_seed, s_device);
    if (ev->parsed()) return run_eval(ck, batches, e_device, e_data);
    if (bc->parsed()) return run_bench_compare(cmp_a, cmp_b);
    if (config_path.empty()) {
      std::fprintf(stderr,
                   "trainer: --config FILE is required (e.g. trainer --config configs/quick.json); see --help\n");
      return 2;
    }
    lt::train::RunConfig rc = build_config(config_path, sets, device, steps, out, seed, init_from);
    if (print_config) {
      std::cout << rc.effective.dump(2) << std::endl;
      return 0;
    }
    std::optional<lt::dist::WorldInfo> world;
    try {
      world = lt::dist::world_from_env();
    } catch (const std::invalid_argument& e) { throw ConfigError(e.what()); }
    if (nproc > 0) {
      if (world)
        throw ConfigError("--nproc starts its own ranks, but this process already is rank " +
                          std::to_string(world->rank) + " of " + std::to_string(world->world) +
                          " (RANK / WORLD_SIZE or SLURM_PROCID are set): drop --nproc or unset them");
      if (rc.train.batch_size % nproc != 0)
        throw ConfigError("config key 'train.batch_size': " + std::to_string(rc.train.batch_size) +
                          " rows cannot be split evenly over --nproc " + std::to_string(nproc));
      // Refuse here, once, what every rank would refuse.
      try {
        lt::dist::WorldInfo probe;
        probe.world = nproc;
        probe.local_rank = nproc - 1;
        const lt::Device d = lt::dist::rank_device(probe, rc.device);
        std::string why;
        if (d.is_cuda() && !lt::dist::nccl_available(&why)) throw ConfigError("--nproc on CUDA: " + why);
      } catch (const std::invalid_argument& e) { throw ConfigError(std::string("--nproc: ") + e.what()); }
      std::vector<std::string> args;
      for (int i = 0; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--nproc") {
          ++i;
          continue;
        }
        if (a.rfind("--nproc=", 0) == 0) continue;
        args.push_back(a);
      }
      return lt::dist::launch_local(nproc, args);
    }
    std::unique_ptr<lt::dist::Job> job;
    if (world) {
      const std::string tag = "[lintrain] [rank " + std::to_string(world->rank) + "] [%l] %v";
      spdlog::set_pattern(tag);
      // The other ranks say only what goes wrong; rank 0 speaks for the job.
      if (world->rank != 0 && !std::getenv("LINTRAIN_LOG_LEVEL")) spdlog::set_level(spdlog::level::warn);
      try {
        job = std::make_unique<lt::dist::Job>(*world, rc.device, rc.dist.rendezvous_timeout_s, rc.dist.timeout_s);
      } catch (const std::invalid_argument& e) { throw ConfigError(e.what()); }
    }
    lt::train::InstrumentOptions io;
    try {
      io.timers = lt::train::TimerSpec::parse(timers);
    } catch (const std::invalid_argument& e) { throw ConfigError(e.what()); }
    if (io.timers.enabled() && !lt::stage_hooks_compiled())
      throw ConfigError("--timers " + timers +
                        ": this build has no stage timers (built with LINTRAIN_STAGE_TIMERS=OFF); use --timers off");
    if (!kernel_trace.empty()) {
      if (!io.timers.enabled())
        throw ConfigError("--kernel-trace '" + kernel_trace + "' records the timed steps: add --timers, e.g. step%50");
      if (!lt::train::KernelRecorder::compiled())
        throw ConfigError("--kernel-trace: this build has no CUPTI recorder (cupti.h was not found when it was built)");
    }
    io.kernel_trace = kernel_trace;
    lt::train::RunOptions opt;
    opt.resume = resume;
    opt.config_path = config_path;
    opt.job = job.get();
    opt.dump_trajectory = dump_trajectory;
    if (bench > 0) {
      // The bench arm measures steps only: its own folder, a fresh start, no eval or checkpoints.
      rc.out_dir = (fs::path(rc.out_dir) / "bench").string();
      rc.train.steps = bench_warmup + bench;
      rc.train.schedule.total_steps = rc.train.steps;
      opt.resume = "none";
      opt.measure_only = true;
      io.bench_steps = bench;
      io.bench_warmup = bench_warmup;
      io.bench_out = bench_out.empty() ? (fs::path(rc.out_dir) / "bench.json").string() : bench_out;
    }
    io.timers_trace = timers_trace;
    io.metrics_path = (fs::path(rc.out_dir) / "metrics.jsonl").string();
    io.alloc_trace = alloc_trace;
    io.alloc_trace_steps = alloc_trace_steps;
    io.alloc_snapshot_at = alloc_snapshot_at;
    if (job) {
      io.ranks = job->world();
      if (job->rank() != 0) {  // rank 0 writes the measurement files
        io.metrics_path.clear();
        io.bench_out.clear();
        io.timers_trace.clear();
        io.kernel_trace.clear();
        io.alloc_trace.clear();
        io.alloc_snapshot_at = 0;
      }
    }
    const lt::Device dev = job ? job->device() : lt::train::resolve_run_device(rc);
    if (!kernel_trace.empty() && !dev.is_cuda())
      throw ConfigError("--kernel-trace records CUDA kernels; this run is on " + dev.str());
    const double tokens_per_step = static_cast<double>(rc.train.batch_size * rc.train.seq_len * rc.train.grad_accum);
    lt::train::Instrumentation instrument(io, dev, tokens_per_step);
    opt.listener = &instrument;
    lt::train::RunResult result;
    try {
      result = lt::train::train_run(rc, opt);
    } catch (...) {
      instrument.finish();  // an out-of-memory error still leaves its trace and the stats
      throw;
    }
    spdlog::info("{}", lt::train::Instrumentation::summary_line(instrument.finish()));
    if (job) job->finish();
    switch (result) {
      case lt::train::RunResult::finished: return 0;
      case lt::train::RunResult::interrupted: return 0;
      case lt::train::RunResult::too_many_skips: return 3;
    }
    return 1;
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "trainer: bad input: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trainer: error: %s\n", e.what());
    return 1;
  }
}
