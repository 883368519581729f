// main of the CPU test executable (Catch2's implementation: tests/catch_impl.cpp).
#include "tests/support/catch_run.h"

int main(int argc, char** argv) { return lt::test::run_catch(argc, argv); }
