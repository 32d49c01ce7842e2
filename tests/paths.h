// tests/paths.h: where the tests find what lives outside the test binary: the committed
// reference data (tests/data) and the program the checkpoint kill test starts. Both paths are
// compiled into tests/paths.cpp alone, so no other test object depends on where the checkout
// or the build folder is, and ccache reuses them from another clone (Note [One build folder]
// in docs/DECISIONS.md).
// Not here: reading the reference files (tests/reference.h).
#pragma once

#include <filesystem>

namespace brisk::test {

// <source>/tests/data.
std::filesystem::path data_dir();

// The checkpoint_child program (tests/checkpoint_child.cpp), built beside brisk_tests.
std::filesystem::path checkpoint_child();

}  // namespace brisk::test
