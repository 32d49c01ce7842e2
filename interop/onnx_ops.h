// interop/onnx_ops.h: the ONNX importer's op table (internal to interop/onnx_*.cpp): one row
// per ONNX op type with the opset versions it handles, the attributes it reads and a small
// function from (inputs, attributes) to outputs, written with brisk's public ops only.
// Not here: reading protobuf (interop/onnx_import.cpp); the public API (interop/onnx_import.h).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/tensor.h"
#include "interop/onnx_import.h"

namespace brisk::onnx::detail {

// One attribute of a node, as parsed (graph attributes are refused when parsing).
struct Attribute {
  enum class Kind { Float, Int, String, Tensor, Floats, Ints, Strings };
  Kind kind = Kind::Int;
  double f = 0;
  int64_t i = 0;
  std::string s{};
  brisk::Tensor t{};
  std::vector<double> floats{};
  std::vector<int64_t> ints{};
  std::vector<std::string> strings{};
};

struct OpEntry;

struct Node {
  std::string name{};  // the node's name, or "#<index>" when it has none
  std::string op_type{};
  int opset = 0;                       // the model's ai.onnx opset
  int since_version = 0;               // the op's schema version at that opset
  std::vector<std::string> inputs{};   // "" for a missing optional input
  std::vector<std::string> outputs{};  // "" for an unused optional output
  std::map<std::string, Attribute> attributes{};
  const OpEntry* op = nullptr;
  // "node 'conv1' (Conv, opset 13)": how every error names it.
  std::string describe() const;
};

// What an op function sees: the node's inputs (undefined for missing optional ones) and its
// attributes.
struct OpContext {
  const Node& node;
  std::vector<Tensor> inputs;
  Device device = Device::cpu();  // the model's: where constants the graph makes are put

  bool has(size_t i) const { return i < inputs.size() && inputs[i].defined(); }
  const Tensor& in(size_t i) const;
  size_t num_outputs() const { return node.outputs.size(); }
  bool has_attr(const std::string& name) const { return node.attributes.count(name) != 0; }
  int64_t i(const std::string& name, int64_t fallback) const;
  double f(const std::string& name, double fallback) const;
  std::string s(const std::string& name, const std::string& fallback) const;
  std::vector<int64_t> ints(const std::string& name, std::vector<int64_t> fallback = {}) const;
  const Tensor& t(const std::string& name) const;
  // Input i read as integers (shapes, axes, pads given as tensors).
  std::vector<int64_t> values(size_t i) const;
};

using OpFn = std::vector<Tensor> (*)(const OpContext&);

struct OpEntry {
  const char* op_type;
  int first;  // schema versions (since_version) this row handles
  int last;
  OpFn fn;
  std::vector<std::string> attributes;  // every attribute it reads; others are refused
  // Refuses (UnsupportedError) attribute values the row does not handle, at load time.
  void (*check)(const Node&) = nullptr;
};

const std::vector<OpEntry>& op_table();

// ONNX's TensorProto.DataType as a brisk dtype; UnsupportedError naming `where` for the types
// brisk lacks (unsigned 16-64 bit, int16, strings, complex, float8).
DType dtype_from_onnx(int64_t onnx_type, const std::string& where);
// The row for op_type at schema version since_version, or nullptr.
const OpEntry* find_op(const std::string& op_type, int since_version);

}  // namespace brisk::onnx::detail
