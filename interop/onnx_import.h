// interop/onnx_import.h: ONNX models as brisk modules. load_model() reads a .onnx file, runs
// ONNX's checker and shape inference, checks every node against brisk's op table
// (interop/onnx_ops.cpp) and returns an OnnxModel whose initializers are named parameters
// (floating: trainable; integer: buffers) and whose forward runs the graph node by node through
// brisk's public ops, so autograd, autocast and devices work as for any module.
// Not here: writing ONNX files; control flow (If, Loop, Scan), sequences and maps (refused).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/error.h"
#include "nn/module.h"

namespace brisk::onnx {

// What load_model() refuses before running anything: an op, attribute, opset, domain or
// dtype the importer does not handle. Its message names the node, its op type and opset. A
// brisk::Error like any other; its own type so that the conformance test can tell "not
// supported" from "wrong".
class UnsupportedError : public Error {
 public:
  using Error::Error;
};

struct LoadOptions {
  bool run_checker = true;             // onnx::checker::check_model
  bool infer_shapes = true;            // onnx::shape_inference::InferShapes (checks types too)
  bool trainable_initializers = true;  // floating initializers require grad
};

// One graph (the model's main graph); Constant nodes and initializers included.
class OnnxModel : public nn::Module {
 public:
  struct Graph;  // the parsed graph (interop/onnx_import.cpp)
  explicit OnnxModel(std::shared_ptr<const Graph> graph);

  // One input, one output.
  Tensor forward(const Tensor& x) override;
  // Inputs by their ONNX names (every graph input that is not an initializer); all outputs.
  nn::TensorDict forward_dict(const nn::TensorDict& inputs) override;
  const std::vector<std::string>& input_names() const;
  const std::vector<std::string>& output_names() const;
  // The op types of the graph's nodes, in order of first use.
  std::vector<std::string> op_types() const;

 private:
  std::shared_ptr<const Graph> graph_;
  // Per ONNX initializer name: the registered parameter or buffer (the same tensor, so moves to
  // another device or dtype and load_state_dict are seen here).
  std::map<std::string, Tensor> initializers_;
};

std::shared_ptr<OnnxModel> load_model(const std::string& path, const LoadOptions& options = {});

// The op types of a model file's main graph, in order of first use, read without any check
// (for reports on models that load_model() refuses).
std::vector<std::string> model_op_types(const std::string& path);

// A serialized onnx.TensorProto (the input_*.pb / output_*.pb files of ONNX's backend tests).
Tensor load_tensor(const std::string& path);

// The importer's op table: op type (domain ai.onnx) and the opset versions each entry handles.
struct OpSupport {
  std::string op_type{};
  int first_opset = 0;
  int last_opset = 0;
};
std::vector<OpSupport> supported_ops();

}  // namespace brisk::onnx
