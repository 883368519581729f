// Catch2's implementation (v2, Debian's catch2 package: catch.hpp compiles it where
// CATCH_CONFIG_RUNNER is defined), once for both test executables, whose mains (main_cpu.cpp,
// main_cuda.cpp) run the tests through run_catch.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "tests/support/catch_run.h"

int lt::test::run_catch(int argc, char** argv) { return Catch::Session().run(argc, argv); }
