// tests/test_user_names.cpp: function names a training program commonly defines at global
// scope beside `using namespace brisk;` (as the README's examples write it) compile and call the
// program's own functions. A namespace of brisk's with one of these names makes the call
// ambiguous and this file fail to compile: brisk::train did (now brisk::training).
#include <doctest/doctest.h>

#include "brisk.h"
#include "train/batch_size.h"
#include "train/checkpoint.h"
#include "train/tensorboard.h"

using namespace brisk;

static int train(int epochs) { return 2 * epochs; }
static int evaluate(int batches) { return batches + 1; }
static int test(int cases) { return cases - 1; }
static int validate(int cases) { return cases; }

TEST_CASE("user names: a program's own train(), evaluate(), test() and validate() beside using namespace brisk") {
  CHECK(train(3) == 6);
  CHECK(evaluate(1) == 2);
  CHECK(test(4) == 3);
  CHECK(validate(5) == 5);
  // brisk's training utilities under their namespace's name.
  CHECK(training::LrScaling::Sqrt != training::LrScaling::Linear);
}
