// examples/explain/main.cpp: explain mode (engine/explain.h) on a 2-layer MLP, for a lecture:
// the tape of one step as Graphviz DOT and as JSON, then backward run node by node with the
// norms of the gradients flowing through it.
//   explain [out_dir]      writes out_dir/tape.dot and out_dir/tape.json (default: .)
//   dot -Tsvg out_dir/tape.dot > tape.svg
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include "brisk.h"
#include "engine/explain.h"
#include "nn/functional.h"
#include "nn/layers.h"

using namespace brisk;

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : ".";
  manual_seed(0);
  nn::Sequential mlp{std::make_shared<nn::Linear>(4, 8), std::make_shared<nn::ReLU>(),
                     std::make_shared<nn::Linear>(8, 3)};
  Tensor x = randn({2, 4});
  Tensor target = from_vector({0, 2}, {2}, DType::I64);

  // The forward pass records the tape; nothing has run backward yet.
  Tensor loss = nn::functional::cross_entropy(mlp(x), target);
  explain::Graph g = explain::graph_of(loss, mlp.named_parameters());

  std::printf("the tape behind the loss: %zu nodes, %lld bytes saved for backward\n", g.nodes.size(),
              (long long)g.saved_bytes);
  std::cout << g.to_text();  // one line per node, PyTorch's node names, a shared node once
  std::ofstream(dir + "/tape.dot") << g.to_dot();
  std::ofstream(dir + "/tape.json") << g.to_json();
  std::printf("wrote %s/tape.dot (render: dot -Tsvg) and %s/tape.json\n\n", dir.c_str(), dir.c_str());

  // Backward, one line per node in the order the engine runs them (largest sequence first).
  std::printf("backward, step by step:\n");
  explain::backward_verbose(loss, std::cout, mlp.named_parameters());

  std::printf("\nthe gradients landed in:\n");
  for (const auto& [name, p] : mlp.named_parameters()) {
    std::printf("  %-10s %s\n", name.c_str(), p.grad().defined() ? p.grad().str().c_str() : "(none)");
  }
  return 0;
}
