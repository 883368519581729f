// Catch2 (v2, Debian's catch2 package) main for the CPU test executable.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
