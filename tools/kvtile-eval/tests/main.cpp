// The doctest runner for kvtile_eval_tests: every other tools/kvtile-eval/tests/*.cpp holds TEST_CASEs.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
