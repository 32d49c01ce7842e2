// tests/test_explain.cpp: explain mode (engine/explain.h): the graph of a known expression
// (its nodes, edges, saved tensors, named leaves), its DOT and JSON forms, and the step-through
// backward's lines and gradient norms, which equal the gradients' own.
#include <doctest/doctest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>

#include "brisk.h"
#include "engine/explain.h"

using namespace brisk;

TEST_CASE("explain: the graph of y = (x * w).sum()") {
  Tensor x = from_vector({1, 2, 3}, {3});
  Tensor w = from_vector({4, 5, 6}, {3}).requires_grad_();
  Tensor y = (x * w).sum();
  explain::Graph g = explain::graph_of(y, {{"w", w}});
  REQUIRE(g.nodes.size() == 3);  // sum, mul, w's AccumulateGrad
  CHECK(g.nodes[0].name == "sum");
  CHECK(g.nodes[1].name == "mul");
  CHECK(g.nodes[2].leaf);
  CHECK(g.nodes[2].leaf_name == "w");
  CHECK(g.nodes[0].sequence_nr > g.nodes[1].sequence_nr);
  REQUIRE(g.nodes[0].next.size() == 1);
  CHECK(g.nodes[0].next[0].first == 1);
  REQUIRE(g.nodes[1].next.size() == 2);
  CHECK(g.nodes[1].next[0].first == -1);  // x needs no gradient
  CHECK(g.nodes[1].next[1].first == 2);
  REQUIRE(g.nodes[1].inputs.size() == 2);
  CHECK(g.nodes[1].inputs[0].sizes == Shape{3});
  int64_t saved = 0;
  for (const auto& n : g.nodes) {
    for (const auto& s : n.saved) {
      CHECK(s.bytes == 3 * 4);  // every saved tensor here is 3 floats
      saved += s.bytes;
    }
  }
  CHECK(saved == g.saved_bytes);
  CHECK(g.saved_bytes > 0);

  std::string dot = g.to_dot();
  CHECK(dot.rfind("digraph tape {", 0) == 0);
  CHECK(dot.find("n1 -> n0") != std::string::npos);
  CHECK(dot.find("n2 -> n1") != std::string::npos);
  CHECK(dot.find("label=\"w\\n(3) F32\"") != std::string::npos);

  auto j = nlohmann::json::parse(g.to_json());
  REQUIRE(j["nodes"].size() == 3);
  CHECK(j["nodes"][2]["leaf_name"] == "w");
  CHECK(j["nodes"][1]["name"] == "mul");
  CHECK(j["saved_bytes"] == g.saved_bytes);
  CHECK(explain::graph_of(x).nodes.empty());  // no grad_fn: no graph
}

TEST_CASE("explain: step-through backward prints each node with the gradients' norms") {
  Tensor x = from_vector({1, 2, 3}, {3});
  Tensor w = from_vector({4, 5, 6}, {3}).requires_grad_();
  Tensor y = (x * w).sum();
  std::ostringstream out;
  explain::backward_verbose(y, out, {{"w", w}});
  std::string text = out.str();
  INFO(text);
  CHECK(text.find("[0] sum backward  grad in |1|") != std::string::npos);
  // dL/dw = x, whose norm is sqrt(14) = 3.742
  CHECK(text.find("[2] AccumulateGrad -> w  grad |3.742|") != std::string::npos);
  CHECK(w.grad().to_vector<double>() == std::vector<double>{1, 2, 3});
  CHECK(detail::backward_observer() == nullptr);  // removed afterwards
  CHECK_THROWS_WITH_AS(explain::backward_verbose(x, out), doctest::Contains("does not require grad"), Error);
}
