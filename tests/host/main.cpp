// The doctest runner for kvtile_tests: every other tests/host/**.cpp holds TEST_CASEs.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
