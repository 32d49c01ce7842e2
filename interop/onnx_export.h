// interop/onnx_export.h: a module's forward as an ONNX model, for ONNX Runtime, TensorRT and
// the other runtimes that read ONNX.
//
//   model->eval();
//   onnx::export_model(*model, {example_batch}, "model.onnx", {.dynamic_axes = {{"input", {{0, "batch"}}}}});
//
// export_model runs the forward once under a trace::Recorder (engine/trace.h: every op the
// forward dispatches, with its attributes and tensors) and writes each op as ONNX nodes
// (opset 17 by default, what Debian's ONNX 1.12 checks). Parameters and buffers become
// initializers under their state_dict names; tensors that depend on neither the inputs nor
// the parameters (scalars, masks, position ids) are folded into initializers by value. The
// result passes ONNX's checker and shape inference before it is written (atomically).
//
// Dynamic axes: a dim named in dynamic_axes gets a dim_param in the graph's inputs and
// outputs, and wherever the trace used its traced size (reshape targets, the length of an
// arange for position ids, the shape of a causal mask's zeros, an expand, a table cut to T,
// attention's causal flag) the graph reads the size from the input's shape instead (Note [Dynamic sizes] in
// interop/onnx_export.cpp). Sizes are matched by value: trace each dynamic axis at a size > 1
// that no other dynamic axis and no fixed size of the model has (an odd length, say), and check
// the exported model at other sizes (the tests do, with the importer and with ONNX Runtime).
// Not exportable (a brisk::Error naming the op, its position in the forward and its inputs):
// training-mode batch norm and dropout, random ops, losses, ops run under autocast. int8
// modules export as QuantizeLinear / DequantizeLinear graphs (Note [Int8 export]).
// Not here: reading ONNX (interop/onnx_import.h), the op recorder (engine/trace.h).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "nn/module.h"

namespace brisk::onnx {

// torch.onnx.export's keywords, in its order.
struct ExportOptions {
  std::vector<std::string> input_names{};   // default "input" (one input) or "input_0", ...
  std::vector<std::string> output_names{};  // default "output"
  int64_t opset_version = 17;
  // {"input": {{0, "batch"}}}: the named value's dim 0 is dynamic and called "batch".
  std::map<std::string, std::map<int64_t, std::string>> dynamic_axes{};
  std::string producer_name = "brisk";
  // Weights in "<file>.data" beside the model (ONNX's external data), each initializer of at
  // least external_data_min_bytes; export_model does so by itself for a model near protobuf's
  // 2 GB limit. export_model_bytes keeps everything inline.
  bool external_data = false;
  int64_t external_data_min_bytes = 1024;
};

// Traces model(inputs[0]) (one input) or model.forward_dict({input_names[i]: inputs[i]})
// (several) and writes the ONNX model to `path`.
void export_model(nn::Module& model, const std::vector<Tensor>& inputs, const std::string& path,
                  const ExportOptions& options = {});

// The same, returned as the serialized ModelProto (what the file holds).
std::string export_model_bytes(nn::Module& model, const std::vector<Tensor>& inputs, const ExportOptions& options = {});

}  // namespace brisk::onnx
