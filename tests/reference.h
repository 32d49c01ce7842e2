// tests/reference.h: reading the PyTorch reference files of tests/data/ (JSON made by the
// tests/make_*_reference.py scripts): a file by its path under tests/data, a case by name, a
// tensor from {"shape", "data"} (numbers or booleans), a state_dict from a {name: tensor} map,
// and the scale-relative error max|x - ref| / max|ref| that parity tests compare.
// Not here: what each test checks (the test files).
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/functions.h"
#include "nn/module.h"
#include "tests/paths.h"

namespace brisk::test {

using json = nlohmann::json;

// tests/data/<relative>, parsed; a missing file fails the test naming the script that makes it.
inline json read_reference(const std::string& relative) {
  const std::filesystem::path path = ::brisk::test::data_dir() / relative;
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "tests/data/" << relative << " is missing (made by a tests/make_*_reference.py script)");
  return json::parse(in);
}

inline const json& find_case(const json& reference, const std::string& name) {
  for (const json& c : reference["cases"])
    if (c["name"] == name) return c;
  FAIL("no reference case " << name);
  static const json none;
  return none;
}

inline Tensor tensor_of(const json& j, DType dt = DType::F64) {
  std::vector<double> v;
  for (const json& x : j["data"]) v.push_back(x.is_boolean() ? double(x.get<bool>()) : x.get<double>());
  return from_vector(v, Shape(j["shape"].get<std::vector<int64_t>>()), dt);
}

inline nn::NamedTensors state_of(const json& params, DType dt) {
  nn::NamedTensors s;
  for (auto& [k, v] : params.items()) s.emplace_back(k, tensor_of(v, dt));
  return s;
}

// max |x - ref| / max |ref|: the error relative to the tensor's scale.
inline double rel_err(const Tensor& x, const json& ref) {
  REQUIRE(x.defined());
  REQUIRE(x.sizes() == Shape(ref["shape"].get<std::vector<int64_t>>()));
  const std::vector<double> a = cast(x, DType::F64).to_vector<double>();
  const std::vector<double> r = ref["data"].get<std::vector<double>>();
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(a[i] - r[i]));
    scale = std::max(scale, std::abs(r[i]));
  }
  return diff / std::max(scale, 1e-30);
}

// The worst output / gradient errors of one case in one dtype, printed when the environment
// sets BRISK_PRINT_PARITY (the parity numbers of docs/what-works.md).
struct Worst {
  double out = 0, grad = 0;
  void print(const json& c, DType dt) const {
    if (std::getenv("BRISK_PRINT_PARITY"))
      std::printf("parity %-45s %s output %.2e grad %.2e\n", c["name"].get<std::string>().c_str(), dtype_name(dt), out,
                  grad);
  }
};

}  // namespace brisk::test
