// tools/kvtile-eval/tests/eval_test_support.hpp: what the kvtile-eval host tests share.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

#ifndef KVTILE_TEST_DATA_DIR
#define KVTILE_TEST_DATA_DIR "tests/data"
#endif

namespace kvtile_eval_test {

// A fresh directory under the system temp dir, unique per process and call:
// <tmp>/<prefix><tag>_<pid>_<n>.
inline std::filesystem::path unique_temp_dir(const std::string& prefix, const char* tag) {
  static int counter = 0;
  std::filesystem::path d = std::filesystem::temp_directory_path() /
                            (prefix + tag + "_" + std::to_string(static_cast<long>(::getpid())) + "_" +
                             std::to_string(counter++));
  std::filesystem::create_directories(d);
  return d;
}

}  // namespace kvtile_eval_test
