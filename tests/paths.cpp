// tests/paths.cpp: the two paths of tests/paths.h, given by tests/CMakeLists.txt as
// definitions of this file only.
#include "tests/paths.h"

namespace brisk::test {

std::filesystem::path data_dir() { return BRISK_TEST_DATA_DIR; }

std::filesystem::path checkpoint_child() { return BRISK_CHECKPOINT_CHILD; }

}  // namespace brisk::test
