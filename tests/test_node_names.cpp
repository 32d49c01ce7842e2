// tests/test_node_names.cpp: backward nodes carry PyTorch's names (MulBackward0, MmBackward0,
// ConvolutionBackward0, ...), expose what they saved for backward, print in a tensor's
// repr as grad_fn=<...>, and the tape prints as an indented tree.
#include <doctest/doctest.h>

#include <sstream>

#include "brisk.h"
#include "engine/explain.h"

using namespace brisk;

namespace {
Tensor leaf(const Shape& s) { return randn(s, DType::F64).requires_grad_(); }
std::string node(const Tensor& t) {
  REQUIRE(t.grad_fn());
  return t.grad_fn()->name();
}
}  // namespace

TEST_CASE("node names: elementwise, reductions and casts are named as in PyTorch") {
  Tensor a = leaf({2, 3}), b = leaf({2, 3});
  CHECK(node(a * b) == "MulBackward0");
  CHECK(node(a + b) == "AddBackward0");
  CHECK(node(a - b) == "SubBackward0");
  CHECK(node(a / b) == "DivBackward0");
  CHECK(node(relu(a)) == "ReluBackward0");
  CHECK(node(pow(a, 2.0)) == "PowBackward0");  // tensor ** scalar
  CHECK(node(pow(a, b)) == "PowBackward1");    // tensor ** tensor
  CHECK(node(sum(a)) == "SumBackward0");       // full reduction
  CHECK(node(sum(a, {1})) == "SumBackward1");  // over dims
  // mean is composed of sum and a division (docs/DECISIONS.md: composites show their last step)
  CHECK(node(mean(a)) == "DivBackward0");
  CHECK(mean(a).grad_fn()->next_edges[0].node->name() == "SumBackward0");
  CHECK(node(a.to(DType::F32)) == "ToCopyBackward0");
  CHECK((a * b).grad_fn()->op_label() == "mul");
}

TEST_CASE("node names: matmul is named by the shapes it multiplied") {
  CHECK(node(matmul(leaf({2, 3}), leaf({3, 4}))) == "MmBackward0");
  // a vector operand is viewed as a matrix, multiplied, and viewed back (PyTorch: MvBackward0)
  Tensor mv = matmul(leaf({2, 3}), leaf({3}));
  CHECK(node(mv) == "ViewBackward0");
  CHECK(mv.grad_fn()->next_edges[0].node->name() == "MmBackward0");
  CHECK(node(matmul(leaf({5, 2, 3}), leaf({5, 3, 4}))) == "BmmBackward0");
}

TEST_CASE("node names: convolution and pooling") {
  Tensor x = leaf({1, 2, 6, 6}), w = leaf({3, 2, 3, 3});
  Tensor y = nn::functional::conv2d(x, w);
  CHECK(node(y) == "ConvolutionBackward0");
  CHECK(node(nn::functional::max_pool2d(y, {2, 2})) == "MaxPool2DWithIndicesBackward0");
}

TEST_CASE("node names: saved_tensors returns what the node keeps, and fails after release") {
  Tensor a = leaf({4}), b = leaf({4});
  Tensor y = a * b;
  std::vector<Tensor> saved = y.grad_fn()->saved_tensors();
  REQUIRE(saved.size() == 2);  // mul keeps both inputs for its gradient
  CHECK(saved[0].to_vector<double>() == a.to_vector<double>());
  CHECK(saved[1].to_vector<double>() == b.to_vector<double>());
  CHECK(sum(a + b).grad_fn()->saved_tensors().empty());  // sum keeps no tensor

  Tensor z = (a * b).sum();
  auto mul_node = z.grad_fn()->next_edges[0].node;
  REQUIRE(mul_node);
  z.backward();  // frees the saved tensors
  CHECK_THROWS_WITH_AS(mul_node->saved_tensors(), doctest::Contains("retain_graph"), Error);
}

TEST_CASE("node names: a tensor's repr shows grad_fn, a leaf shows requires_grad") {
  Tensor a = leaf({2});
  std::ostringstream leaf_s, y_s;
  leaf_s << a;
  y_s << a * 2.0;
  CHECK(leaf_s.str().find("requires_grad") != std::string::npos);
  CHECK(leaf_s.str().find("grad_fn") == std::string::npos);
  CHECK(y_s.str().find("grad_fn=<MulBackward0>") != std::string::npos);
}

TEST_CASE("node names: print_graph draws the tape as a tree, shared nodes once") {
  Tensor x = leaf({3}), w = leaf({3});
  Tensor h = x * w;
  Tensor y = (h + h).sum();  // h is used twice
  std::ostringstream out;
  explain::print_graph(y, out, {{"x", x}, {"w", w}});
  const std::string s = out.str();
  CHECK(s.rfind("SumBackward0 (sum)", 0) == 0);
  CHECK(s.find("AddBackward0 (add)") != std::string::npos);
  CHECK(s.find("AccumulateGrad -> x") != std::string::npos);
  CHECK(s.find("AccumulateGrad -> w") != std::string::npos);
  CHECK(s.find("above)") != std::string::npos);  // the second use of h refers back
  size_t muls = 0;
  for (size_t p = s.find("MulBackward0"); p != std::string::npos; p = s.find("MulBackward0", p + 1)) ++muls;
  CHECK(muls == 2);  // printed in full once, referenced once

  std::ostringstream none;
  explain::print_graph(from_vector({1.0}, {1}), none);
  CHECK(none.str().find("does not require grad") != std::string::npos);
}
