// kbench: kernel and stage benchmarks. Each subcommand lives in its own file and adds
// itself to the table with LT_KBENCH_COMMAND; main.cpp builds the CLI from the table.
//
//   // apps/kbench/bench_alloc.cpp
//   static void setup_alloc(CLI::App& sub, std::function<int()>& run) { ...add options...; run = [&]{...}; }
//   LT_KBENCH_COMMAND(alloc, "caching allocator: hit path vs raw malloc, training replay", setup_alloc);
//
// `run` returns the process exit code (0 ok, 2 bad input, 1 failure).
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace lt::kbench {

using Setup = std::function<void(CLI::App& sub, std::function<int()>& run)>;

struct Command {
  std::string name;
  std::string help;
  Setup setup;
};

std::vector<Command>& command_table();

struct Registrar {
  Registrar(const char* name, const char* help, Setup setup) {
    command_table().push_back({name, help, std::move(setup)});
  }
};

}  // namespace lt::kbench

#define LT_KBENCH_COMMAND(name, help, setup) \
  static ::lt::kbench::Registrar lt_kbench_registrar_##name(#name, help, setup)
