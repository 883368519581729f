// Catch2's implementation (v2, Debian's catch2 package: catch.hpp compiles it where
// CATCH_CONFIG_RUNNER is defined), once for both test executables, whose mains (main_cpu.cpp,
// main_cuda.cpp) start the session through run_catch_session.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "tests/support/catch_session.h"

int lt::test::run_catch_session(int argc, char** argv) { return Catch::Session().run(argc, argv); }
