// engine/explain.h: explain mode, for teaching. graph_of(root) reads the tape behind a tensor:
// every node with its op, input and output shapes and dtypes, the tensors it saved for backward
// and their bytes, its edges, and the leaves that will receive gradients (named when given the
// model's named parameters); as Graphviz DOT (to_dot) and JSON (to_json).
// backward_verbose(root, out) runs backward and prints each node as it runs, with the norms
// of the gradients flowing in and out. examples/explain/main.cpp shows both on a 2-layer MLP.
// Not here: the profiler (engine/profiler.h), anomaly mode (engine/nonfinite.h).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <utility>
#include <vector>

#include "engine/op.h"
#include "engine/tensor.h"

namespace brisk::explain {

using Names = std::vector<std::pair<std::string, Tensor>>;  // as nn::Module::named_parameters()

struct SavedInfo {
  std::string role{};  // "input 0", "output 0", ...
  Shape sizes{};
  DType dtype = DType::F32;
  int64_t bytes = 0;
};

struct NodeInfo {
  int id = 0;                         // index in Graph::nodes; the root's node is 0
  std::string name{};                 // the op: "mul", "matmul", "AccumulateGrad", "checkpoint"
  std::string node_name{};            // as PyTorch names the node: "MulBackward0", "MmBackward0"
  bool leaf = false;                  // a leaf's AccumulateGrad: where a gradient lands
  std::string leaf_name{};            // from `names` ("fc1.weight"), else ""
  uint64_t sequence_nr = 0;           // recording order (backward runs the largest first)
  std::vector<TensorSpec> inputs{};   // op nodes: the forward inputs
  std::vector<TensorSpec> outputs{};  // the forward outputs (gradient slots)
  std::vector<SavedInfo> saved{};
  std::vector<std::pair<int, int>> next{};  // (node id, its gradient slot) per forward input; -1: none
};

struct Graph {
  std::vector<NodeInfo> nodes{};
  int64_t saved_bytes = 0;  // sum over nodes (a tensor saved by two nodes counts twice)
  std::string to_dot() const;
  std::string to_json() const;
  // An indented tree from the root, one node per line: "MulBackward0 (mul) [2, 3] F32  [node 1]"
  // (a node reached twice is printed once, then referred to).
  std::string to_text() const;
};

// The graph that root.backward() would walk; empty when root has no grad_fn.
Graph graph_of(const Tensor& root, const Names& names = {});

// graph_of(root, names).to_text() printed to `out`; a line saying so for a leaf or a tensor
// without a graph.
void print_graph(const Tensor& root, std::ostream& out, const Names& names = {});

// root.backward() (a scalar root) with each node printed as it runs to `out`:
//   "[4] matmul backward  grad in |0.1234|  -> grads out |0.5|, |1.2|"
void backward_verbose(const Tensor& root, std::ostream& out, const Names& names = {});

}  // namespace brisk::explain
