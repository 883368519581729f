// kbench main: one subcommand per benchmark (see kbench.h).
// Exit codes: 0 ok; 2 bad input (CLI parse errors, and std::invalid_argument thrown by a
// subcommand's validation, whose message names the bad flag or value); 1 any other failure.
#include <cstdio>
#include <exception>
#include <memory>
#include <stdexcept>

#include "apps/kbench/kbench.h"

namespace lt::kbench {
std::vector<Command>& command_table() {
  static std::vector<Command> table;
  return table;
}
}  // namespace lt::kbench

int main(int argc, char** argv) {
  CLI::App app{"kbench: lintrain kernel and stage benchmarks (medians over many iterations after warm-up)"};
  app.require_subcommand(1);
  auto& table = lt::kbench::command_table();
  std::vector<std::function<int()>> runs(table.size());
  std::vector<CLI::App*> subs;
  for (size_t i = 0; i < table.size(); ++i) {
    CLI::App* sub = app.add_subcommand(table[i].name, table[i].help);
    table[i].setup(*sub, runs[i]);
    subs.push_back(sub);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  try {
    for (size_t i = 0; i < subs.size(); ++i)
      if (subs[i]->parsed() && runs[i]) return runs[i]();
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "kbench: bad input: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kbench: error: %s\n", e.what());
    return 1;
  }
  return 2;
}
