// engine/error.h: brisk::Error and the BRISK_CHECK macro.
// Every misuse of the public API throws brisk::Error with a message that names the op and
// what was wrong (shapes, dtypes, device); nothing on user input aborts.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace brisk {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An allocation that the device (or the allocator's limit, Allocator::set_limit) cannot serve.
// A brisk::Error like any other; its own type so that a caller probing how much fits (the
// batch-size finder, train/batch_size.h) catches exactly this and nothing else.
class OutOfMemoryError : public Error {
 public:
  using Error::Error;
};

namespace detail {
template <class... Args>
std::string cat(const Args&... args) {
  std::ostringstream s;
  (s << ... << args);
  return s.str();
}
}  // namespace detail

}  // namespace brisk

// BRISK_CHECK(cond, "op: what went wrong ", shape, ...): throws brisk::Error when cond is false.
#define BRISK_CHECK(cond, ...)                                 \
  do {                                                         \
    if (__builtin_expect(!(cond), 0)) {                        \
      throw ::brisk::Error(::brisk::detail::cat(__VA_ARGS__)); \
    }                                                          \
  } while (0)

#define BRISK_FAIL(...) throw ::brisk::Error(::brisk::detail::cat(__VA_ARGS__))
