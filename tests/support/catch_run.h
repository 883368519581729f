// Runs Catch2 for a test executable (defined in tests/catch_impl.cpp, the one unit that compiles
// Catch2's implementation): parses the command line, runs the selected tests, returns the exit code.
#pragma once

namespace lt::test {
int run_catch(int argc, char** argv);
}
