// interop/onnx_import.cpp: reading and validating an ONNX model, and OnnxModel, the module that
// runs its graph. Everything that can be refused is refused in load_model(), before any node
// runs: a file that does not parse, tensor data that disagrees with its shape, a cycle, what
// ONNX's checker and shape inference reject, and every op, attribute, opset, domain or dtype the
// op table (interop/onnx_ops.cpp) does not handle.
// Not here: the ops themselves (interop/onnx_ops.cpp).
#include "interop/onnx_import.h"

#include <onnx/checker.h>
#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "engine/functions.h"
#include "engine/grad_mode.h"
#include "interop/onnx_ops.h"

namespace brisk::onnx {

using detail::Attribute;
using detail::Node;

struct OnnxModel::Graph {
  std::vector<Node> nodes{};  // in a valid run order
  std::vector<std::string> inputs{};
  std::vector<std::string> outputs{};
  std::vector<std::pair<std::string, Tensor>> initializers{};
  // Per value: the index of the last node that reads it (freed after), or nodes.size() for outputs.
  std::unordered_map<std::string, size_t> last_use{};
};

namespace detail {

DType dtype_from_onnx(int64_t onnx_type, const std::string& where) {
  using TP = ::onnx::TensorProto;
  switch (onnx_type) {
    case TP::FLOAT: return DType::F32;
    case TP::DOUBLE: return DType::F64;
    case TP::FLOAT16: return DType::F16;
    case TP::BFLOAT16: return DType::BF16;
    case TP::INT8: return DType::I8;
    case TP::UINT8: return DType::U8;
    case TP::INT32: return DType::I32;
    case TP::INT64: return DType::I64;
    case TP::BOOL: return DType::Bool;
    default: break;
  }
  std::string name =
      TP::DataType_IsValid(int(onnx_type)) ? TP::DataType_Name(TP::DataType(onnx_type)) : std::to_string(onnx_type);
  throw UnsupportedError(brisk::detail::cat("onnx: ", where, ": data type ", name, " has no brisk dtype"));
}

}  // namespace detail

namespace {

using detail::dtype_from_onnx;
using detail::OpContext;
using detail::OpEntry;

// Note [ONNX tensor sizes]: a TensorProto's dims are checked (at most brisk's kMaxDims, none
// negative, the element count and byte size without overflow) and its data's length is checked
// against them before anything is allocated, so a truncated file or a 2^62-element initializer
// is an error that costs nothing.
Tensor tensor_from_proto(const ::onnx::TensorProto& tp, const std::string& where) {
  std::string what = brisk::detail::cat(where, " tensor '", tp.name(), "'");
  if (tp.data_location() == ::onnx::TensorProto::EXTERNAL) {
    throw UnsupportedError(brisk::detail::cat("onnx: ", what, " keeps its data in an external file (not supported)"));
  }
  if (tp.has_segment()) throw UnsupportedError(brisk::detail::cat("onnx: ", what, " is segmented (not supported)"));
  DType dt = dtype_from_onnx(tp.data_type(), what);
  if (tp.dims_size() > kMaxDims) {
    throw UnsupportedError(
        brisk::detail::cat("onnx: ", what, " has ", tp.dims_size(), " dims (brisk has at most ", kMaxDims, ")"));
  }
  Shape shape;
  int64_t numel = 1;
  for (int64_t d : tp.dims()) {
    BRISK_CHECK(d >= 0, "onnx: ", what, " has a negative dim ", d);
    BRISK_CHECK(!__builtin_mul_overflow(numel, d, &numel) && numel <= (int64_t(1) << 48), "onnx: ", what,
                " is too large (", tp.dims_size(), " dims whose product overflows or exceeds 2^48 elements)");
    shape.push_back(d);
  }
  size_t bytes = size_t(numel) * dtype_size(dt);
  int64_t have = -1;  // elements in the typed field used
  if (tp.has_raw_data()) {
    BRISK_CHECK(tp.raw_data().size() == bytes, "onnx: ", what, " has ", tp.raw_data().size(),
                " bytes of data but its shape ", shape, " and dtype ", dt, " need ", bytes);
  } else {
    switch (dt) {
      case DType::F32: have = tp.float_data_size(); break;
      case DType::F64: have = tp.double_data_size(); break;
      case DType::I64: have = tp.int64_data_size(); break;
      default: have = tp.int32_data_size(); break;  // the narrower types, F16 and BF16 as bits
    }
    BRISK_CHECK(have == numel, "onnx: ", what, " has ", have, " values but its shape ", shape, " needs ", numel);
  }
  Tensor t = empty(shape, dt);
  if (numel == 0) return t;
  char* out = static_cast<char*>(t.data_ptr());
  if (tp.has_raw_data()) {
    std::memcpy(out, tp.raw_data().data(), bytes);  // little-endian, as ONNX stores it
    return t;
  }
  switch (dt) {
    case DType::F32: std::memcpy(out, tp.float_data().data(), bytes); break;
    case DType::F64: std::memcpy(out, tp.double_data().data(), bytes); break;
    case DType::I64: std::memcpy(out, tp.int64_data().data(), bytes); break;
    case DType::I32: std::memcpy(out, tp.int32_data().data(), bytes); break;
    default:
      for (int64_t k = 0; k < numel; ++k) {
        int32_t v = tp.int32_data(int(k));
        if (dtype_size(dt) == 1) {
          out[k] = char(v);
        } else {
          uint16_t bits = uint16_t(v);
          std::memcpy(out + 2 * k, &bits, 2);
        }
      }
  }
  return t;
}

// Note [External data, read]: an initializer whose bytes live in a file beside the model (ONNX's
// external data: location, offset, length) is read into the tensor before any other check. A
// location that is absolute or leaves the model's folder is refused, and the range must lie in
// the file and be exactly the tensor's size (dims and dtype checked first), so a hostile entry
// reads nothing large.
void resolve_external(::onnx::TensorProto& tp, const std::filesystem::path& dir) {
  const std::string what = brisk::detail::cat("initializer '", tp.name(), "'");
  std::string location;
  int64_t offset = 0, length = -1;
  auto number = [&](const std::string& key, const std::string& v) {
    char* end = nullptr;
    errno = 0;
    const long long x = std::strtoll(v.c_str(), &end, 10);
    BRISK_CHECK(!v.empty() && *end == '\0' && errno == 0 && x >= 0, "onnx: ", what, ": external data ", key, " '", v,
                "' is not a non-negative integer");
    return int64_t(x);
  };
  for (const auto& e : tp.external_data()) {
    if (e.key() == "location")
      location = e.value();
    else if (e.key() == "offset")
      offset = number("offset", e.value());
    else if (e.key() == "length")
      length = number("length", e.value());
  }
  const std::filesystem::path rel(location);
  bool inside = !location.empty() && rel.is_relative();
  for (const auto& part : rel) inside = inside && part != "..";
  BRISK_CHECK(inside, "onnx: ", what, ": external data location '", location,
              "' must be a relative path inside the model's folder");
  DType dt = dtype_from_onnx(tp.data_type(), what);
  int64_t numel = 1;
  for (int64_t d : tp.dims()) {
    BRISK_CHECK(d >= 0 && !__builtin_mul_overflow(numel, d, &numel) && numel <= (int64_t(1) << 48), "onnx: ", what,
                " has dims whose product is negative, overflows or exceeds 2^48 elements");
  }
  const int64_t bytes = numel * int64_t(dtype_size(dt));
  if (length < 0) length = bytes;
  BRISK_CHECK(length == bytes, "onnx: ", what, ": external data length ", length, " but its shape and dtype need ",
              bytes);
  const std::filesystem::path file = dir / rel;
  std::error_code ec;
  const auto size = std::filesystem::file_size(file, ec);
  BRISK_CHECK(!ec, "onnx: ", what, ": cannot read external data file '", file.string(), "'");
  BRISK_CHECK(uint64_t(offset) <= size && uint64_t(length) <= size - uint64_t(offset), "onnx: ", what,
              ": external data [", offset, ", ", offset + length, ") lies outside '", file.string(), "' (", size,
              " bytes)");
  std::string data(size_t(length), '\0');
  std::ifstream f(file, std::ios::binary);
  f.seekg(offset);
  f.read(data.data(), length);
  BRISK_CHECK(f.gcount() == length, "onnx: ", what, ": could not read ", length, " bytes of '", file.string(), "'");
  tp.set_raw_data(std::move(data));
  tp.clear_external_data();
  tp.set_data_location(::onnx::TensorProto::DEFAULT);
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  BRISK_CHECK(f.good(), "onnx: cannot open '", path, "'");
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// The value type of a graph input, output or value_info: only tensors of brisk's dtypes.
void check_value_type(const ::onnx::ValueInfoProto& v, const std::string& what) {
  if (!v.has_type()) return;
  const ::onnx::TypeProto& t = v.type();
  if (t.has_sequence_type() || t.has_map_type() || t.has_optional_type() || t.has_sparse_tensor_type()) {
    throw UnsupportedError(brisk::detail::cat("onnx: ", what, " '", v.name(), "' is not a tensor (sequences, maps, ",
                                              "optionals and sparse tensors are not supported)"));
  }
  if (t.has_tensor_type() && t.tensor_type().elem_type() != 0) {
    dtype_from_onnx(t.tensor_type().elem_type(), brisk::detail::cat(what, " '", v.name(), "'"));
  }
}

Attribute parse_attribute(const ::onnx::AttributeProto& a, const Node& node) {
  using AP = ::onnx::AttributeProto;
  Attribute out;
  switch (a.type()) {
    case AP::FLOAT:
      out.kind = Attribute::Kind::Float;
      out.f = a.f();
      break;
    case AP::INT:
      out.kind = Attribute::Kind::Int;
      out.i = a.i();
      break;
    case AP::STRING:
      out.kind = Attribute::Kind::String;
      out.s = a.s();
      break;
    case AP::TENSOR:
      out.kind = Attribute::Kind::Tensor;
      out.t = tensor_from_proto(a.t(), node.describe() + " attribute '" + a.name() + "'");
      break;
    case AP::FLOATS:
      out.kind = Attribute::Kind::Floats;
      out.floats.assign(a.floats().begin(), a.floats().end());
      break;
    case AP::INTS:
      out.kind = Attribute::Kind::Ints;
      out.ints.assign(a.ints().begin(), a.ints().end());
      break;
    case AP::STRINGS:
      out.kind = Attribute::Kind::Strings;
      out.strings.assign(a.strings().begin(), a.strings().end());
      break;
    default:
      throw UnsupportedError(brisk::detail::cat("onnx: ", node.describe(), ": attribute '", a.name(), "' of type ",
                                                AP::AttributeType_Name(a.type()),
                                                " is not supported (subgraphs: control flow is refused)"));
  }
  return out;
}

// Kahn's order over the nodes; a node that can never run (a cycle, or an input nobody makes)
// is an error naming it.
std::vector<int> run_order(const ::onnx::GraphProto& g, const std::set<std::string>& available) {
  std::unordered_map<std::string, int> producer;
  for (int k = 0; k < g.node_size(); ++k) {
    for (const std::string& out : g.node(k).output()) {
      if (!out.empty()) producer[out] = k;
    }
  }
  std::vector<int> waiting(g.node_size(), 0);
  std::vector<std::vector<int>> readers(g.node_size());
  for (int k = 0; k < g.node_size(); ++k) {
    for (const std::string& in : g.node(k).input()) {
      if (in.empty() || available.count(in)) continue;
      auto it = producer.find(in);
      BRISK_CHECK(it != producer.end(), "onnx: node '", g.node(k).name(), "' (", g.node(k).op_type(), ") reads '", in,
                  "', which no node, input or initializer makes");
      ++waiting[k];
      readers[it->second].push_back(k);
    }
  }
  std::vector<int> order;
  for (int k = 0; k < g.node_size(); ++k) {
    if (waiting[k] == 0) order.push_back(k);
  }
  for (size_t j = 0; j < order.size(); ++j) {
    for (int r : readers[order[j]]) {
      if (--waiting[r] == 0) order.push_back(r);
    }
  }
  if (int(order.size()) != g.node_size()) {
    for (int k = 0; k < g.node_size(); ++k) {
      BRISK_CHECK(waiting[k] == 0, "onnx: the graph has a cycle through node '", g.node(k).name(), "' (",
                  g.node(k).op_type(), ")");
    }
  }
  return order;
}

int default_opset(const ::onnx::ModelProto& model) {
  for (const auto& op : model.opset_import()) {
    if (op.domain().empty() || op.domain() == "ai.onnx") return int(op.version());
  }
  return 0;
}

Node parse_node(const ::onnx::NodeProto& n, int index, int opset) {
  Node node;
  node.name = n.name().empty() ? brisk::detail::cat("#", index) : n.name();
  node.op_type = n.op_type();
  node.opset = opset;
  node.inputs.assign(n.input().begin(), n.input().end());
  node.outputs.assign(n.output().begin(), n.output().end());
  if (!n.domain().empty() && n.domain() != "ai.onnx") {
    throw UnsupportedError(
        brisk::detail::cat("onnx: ", node.describe(), ": domain '", n.domain(), "' is not supported"));
  }
  const ::onnx::OpSchema* schema = ::onnx::OpSchemaRegistry::Schema(n.op_type(), opset, "");
  if (schema == nullptr) {
    throw UnsupportedError(brisk::detail::cat("onnx: ", node.describe(), ": ONNX has no such op at this opset"));
  }
  node.since_version = schema->since_version();
  node.op = detail::find_op(n.op_type(), node.since_version);
  if (node.op == nullptr) {
    throw UnsupportedError(brisk::detail::cat("onnx: ", node.describe(), ": op not supported by brisk's importer (",
                                              n.op_type(), "-", node.since_version, ")"));
  }
  for (const auto& a : n.attribute()) {
    if (a.name() == "consumed_inputs") continue;  // opset 1's in-place hint: no meaning for the result
    const auto& known = node.op->attributes;
    if (std::find(known.begin(), known.end(), a.name()) == known.end()) {
      throw UnsupportedError(
          brisk::detail::cat("onnx: ", node.describe(), ": attribute '", a.name(), "' is not supported"));
    }
    node.attributes[a.name()] = parse_attribute(a, node);
  }
  if (node.op->check != nullptr) {
    try {
      node.op->check(node);
    } catch (const UnsupportedError& e) {
      throw UnsupportedError(brisk::detail::cat("onnx: ", node.describe(), ": ", e.what()));
    }
  }
  // Types named by attributes (Cast's `to`, EyeLike's `dtype`) are checked here, not at run time.
  for (const char* type_attr : {"to", "dtype"}) {
    auto it = node.attributes.find(type_attr);
    if (it != node.attributes.end()) dtype_from_onnx(it->second.i, node.describe());
  }
  return node;
}

// Note [Attention in imported graphs]
// Opset 17 has no attention op, so exporters (brisk's and PyTorch's) write scaled dot-product
// attention as its math: Transpose(k) -> MatMul(q, .) -> Mul(., scale) [-> Add(., mask)] ->
// Softmax(axis -1) -> MatMul(., v). Run as written it keeps the (T, S) scores and costs 1.25x
// the hand-built model (bench_onnx); where the chain is exactly that, each intermediate read
// once, it runs as brisk's fused scaled_dot_product_attention instead: the same function of
// the same tensors (the scale and mask stay graph values, so a fine-tuned scale is seen), to
// F32 rounding. Anything else in the chain leaves the nodes as they are.
std::vector<Tensor> fused_attention(const OpContext& c) {
  const double scale = c.in(4).to(DType::F64).item<double>();
  // A mask that is an initializer is a parameter: its gradient, when asked for, needs the
  // math form (which scaled_dot_product_attention takes for a mask that requires grad).
  Tensor mask = c.has(3) ? (GradMode::enabled() ? c.in(3) : c.in(3).detach()) : Tensor();
  return {scaled_dot_product_attention(c.in(0), c.in(1), c.in(2), mask, 0.0, false, scale)};
}

const OpEntry kFusedAttention{
    "Attention (fused from Transpose, MatMul, Mul, Add, Softmax, MatMul)", 0, 0, fused_attention, {}};

void fuse_attention(std::vector<Node>& nodes, const std::vector<std::string>& graph_outputs,
                    const std::vector<std::pair<std::string, Tensor>>& initializers) {
  std::unordered_map<std::string, int> readers;
  std::unordered_map<std::string, size_t> producer;
  for (size_t k = 0; k < nodes.size(); ++k) {
    for (const std::string& in : nodes[k].inputs) ++readers[in];
    for (const std::string& out : nodes[k].outputs) producer[out] = k;
  }
  for (const std::string& out : graph_outputs) ++readers[out];
  auto made_by = [&](const std::string& v, const char* type) -> Node* {
    auto it = producer.find(v);
    if (it == producer.end() || readers[v] != 1 || nodes[it->second].op_type != type) return nullptr;
    return &nodes[it->second];
  };
  auto scalar_initializer = [&](const std::string& v) {
    for (const auto& [name, t] : initializers)
      if (name == v) return t.numel() == 1 && is_floating(t.dtype());
    return false;
  };
  std::vector<char> dead(nodes.size(), 0);
  for (Node& pv : nodes) {
    if (pv.op_type != "MatMul") continue;
    Node* sm = made_by(pv.inputs[0], "Softmax");
    if (!sm) continue;
    auto axis = sm->attributes.find("axis");
    if (axis == sm->attributes.end() || axis->second.i != -1) continue;
    std::string scaled = sm->inputs[0], mask;
    Node* add = made_by(scaled, "Add");
    Node* mul = nullptr;
    if (add) {
      for (int side = 0; side < 2 && !mul; ++side) {
        if ((mul = made_by(add->inputs[size_t(side)], "Mul"))) mask = add->inputs[size_t(1 - side)];
      }
    } else {
      mul = made_by(scaled, "Mul");
    }
    if (!mul) continue;
    Node* qk = nullptr;
    std::string scale;
    for (int side = 0; side < 2 && !qk; ++side) {
      if (scalar_initializer(mul->inputs[size_t(1 - side)]) && (qk = made_by(mul->inputs[size_t(side)], "MatMul")))
        scale = mul->inputs[size_t(1 - side)];
    }
    if (!qk) continue;
    Node* tr = made_by(qk->inputs[1], "Transpose");
    if (!tr) continue;
    auto perm_it = tr->attributes.find("perm");
    if (perm_it == tr->attributes.end()) continue;
    const std::vector<int64_t>& perm = perm_it->second.ints;
    const int64_t r = int64_t(perm.size());
    bool swaps_last_two = r >= 2 && perm[size_t(r - 1)] == r - 2 && perm[size_t(r - 2)] == r - 1;
    for (int64_t d = 0; d + 2 < r; ++d) swaps_last_two = swaps_last_two && perm[size_t(d)] == d;
    if (!swaps_last_two) continue;
    for (Node* n : {sm, add, mul, qk, tr})
      if (n) dead[size_t(n - nodes.data())] = 1;
    const std::string q = qk->inputs[0], k = tr->inputs[0], v = pv.inputs[1];
    pv.op_type = kFusedAttention.op_type;
    pv.inputs = {q, k, v, mask, scale};
    pv.attributes.clear();
    pv.op = &kFusedAttention;
  }
  std::vector<Node> kept;
  for (size_t k = 0; k < nodes.size(); ++k)
    if (!dead[k]) kept.push_back(std::move(nodes[k]));
  nodes = std::move(kept);
}

// Note [GELU in imported graphs]
// Opset 17 has no Gelu either (it came in opset 20): exporters write its math, brisk's and
// PyTorch's alike, as
//   tanh form: Mul(Mul(x, 0.5), Add(Tanh(Mul(Add(x, Mul(x^3, 0.044715)), sqrt(2 / pi))), 1))
//   erf form:  Mul(Mul(x, 0.5), Add(Erf(Mul(x, 1 / sqrt 2)), 1))   (or Div(x, sqrt 2))
// with x^3 as Pow(x, 3) or Mul(Mul(x, x), x), operands of Mul and Add in either order, and the
// 0.5 also taken last (Mul(Mul(x, Add(..)), 0.5)). Run as written that is eight to eleven
// passes over the activation (GPT-2's MLP: the imported model took 1.21x the hand-built one);
// where the chain is exactly that, each intermediate read once and the constants within 1e-4
// of their values, it runs as brisk's gelu op, forward and backward one pass each. The
// constants are fixed from then on: where they are initializers (parameters of the imported
// module) they stay in its state_dict but no longer take part, nor train.
std::vector<Tensor> fused_gelu_tanh(const OpContext& c) { return {gelu(c.in(0), true)}; }
std::vector<Tensor> fused_gelu_erf(const OpContext& c) { return {gelu(c.in(0), false)}; }

const OpEntry kFusedGeluTanh{"Gelu (tanh form, fused from Mul, Add, Pow, Tanh)", 0, 0, fused_gelu_tanh, {}};
const OpEntry kFusedGeluErf{"Gelu (erf form, fused from Mul, Div, Erf, Add)", 0, 0, fused_gelu_erf, {}};

void fuse_gelu(std::vector<Node>& nodes, const std::vector<std::string>& graph_outputs,
               const std::vector<std::pair<std::string, Tensor>>& initializers) {
  std::unordered_map<std::string, int> readers;
  std::unordered_map<std::string, size_t> producer;
  std::unordered_map<std::string, size_t> reader_of;  // the last node reading a value
  for (size_t k = 0; k < nodes.size(); ++k) {
    for (const std::string& in : nodes[k].inputs) {
      ++readers[in];
      reader_of[in] = k;
    }
    for (const std::string& out : nodes[k].outputs) producer[out] = k;
  }
  for (const std::string& out : graph_outputs) readers[out] += 2;  // never fused away
  std::unordered_map<std::string, const Tensor*> scalars;          // the one-element initializers
  for (const auto& [name, value] : initializers)
    if (value.numel() == 1) scalars[name] = &value;
  std::vector<char> dead(nodes.size(), 0);
  // The node making v when it is `type`, not yet taken, and v has no other reader.
  auto made_by = [&](const std::string& v, const char* type) -> Node* {
    auto it = producer.find(v);
    if (it == producer.end() || readers[v] != 1 || dead[it->second] || nodes[it->second].op_type != type)
      return nullptr;
    return &nodes[it->second];
  };
  // The one node reading v when it is `type`.
  auto read_by = [&](const std::string& v, const char* type) -> Node* {
    if (readers[v] != 1) return nullptr;
    auto it = reader_of.find(v);
    if (it == reader_of.end() || dead[it->second] || nodes[it->second].op_type != type) return nullptr;
    return &nodes[it->second];
  };
  // v's value when it is a one-element floating initializer or Constant, within 1e-4 of want.
  auto is_scalar = [&](const std::string& v, double want) {
    Tensor t;
    if (auto s = scalars.find(v); s != scalars.end()) t = *s->second;
    if (!t.defined()) {
      auto it = producer.find(v);
      if (it == producer.end() || nodes[it->second].op_type != "Constant") return false;
      auto a = nodes[it->second].attributes.find("value");
      if (a == nodes[it->second].attributes.end() || a->second.kind != Attribute::Kind::Tensor) return false;
      t = a->second.t;
    }
    if (!t.defined() || t.numel() != 1 || !is_floating(t.dtype())) return false;
    return std::fabs(t.to(DType::F64).item<double>() - want) <= 1e-4 * std::fabs(want);
  };
  // A binary node of `type` with a scalar `want` on one side: the other side, or "".
  auto other_than_scalar = [&](Node* n, double want) -> std::string {
    if (!n || n->inputs.size() != 2) return "";
    for (int side = 0; side < 2; ++side)
      if (is_scalar(n->inputs[size_t(1 - side)], want)) return n->inputs[size_t(side)];
    return "";
  };
  // x^3 made from x (Pow(x, 3), Mul(Mul(x, x), x) or Mul(x, Mul(x, x))): its nodes, or none.
  auto cube_of = [&](const std::string& v, const std::string& x) -> std::vector<Node*> {
    if (Node* p = made_by(v, "Pow"); p && p->inputs.size() == 2 && p->inputs[0] == x && is_scalar(p->inputs[1], 3))
      return {p};
    Node* m = made_by(v, "Mul");
    if (!m || m->inputs.size() != 2) return {};
    for (int side = 0; side < 2; ++side) {
      Node* sq = made_by(m->inputs[size_t(side)], "Mul");
      if (sq && m->inputs[size_t(1 - side)] == x && sq->inputs.size() == 2 && sq->inputs[0] == x && sq->inputs[1] == x)
        return {m, sq};
    }
    return {};
  };
  for (size_t k = 0; k < nodes.size(); ++k) {
    Node& f = nodes[k];  // Tanh or Erf: the anchor
    const bool tanh_form = f.op_type == "Tanh";
    if ((!tanh_form && f.op_type != "Erf") || dead[k] || f.inputs.size() != 1) continue;
    std::vector<Node*> chain{&f};
    std::string x;
    if (tanh_form) {  // Mul(Add(x, Mul(x^3, 0.044715)), sqrt(2 / pi))
      Node* scale = made_by(f.inputs[0], "Mul");
      const std::string sum = other_than_scalar(scale, std::sqrt(2.0 / M_PI));
      Node* add = sum.empty() ? nullptr : made_by(sum, "Add");
      if (!add || add->inputs.size() != 2) continue;
      for (int side = 0; side < 2 && x.empty(); ++side) {
        Node* term = made_by(add->inputs[size_t(1 - side)], "Mul");
        const std::string cube = other_than_scalar(term, 0.044715);
        if (cube.empty()) continue;
        std::vector<Node*> c = cube_of(cube, add->inputs[size_t(side)]);
        if (c.empty()) continue;
        x = add->inputs[size_t(side)];
        chain.insert(chain.end(), {scale, add, term});
        chain.insert(chain.end(), c.begin(), c.end());
      }
    } else {  // Mul(x, 1 / sqrt 2) or Div(x, sqrt 2)
      if (Node* m = made_by(f.inputs[0], "Mul")) {
        x = other_than_scalar(m, M_SQRT1_2);
        chain.push_back(m);
      } else if (Node* d = made_by(f.inputs[0], "Div");
                 d && d->inputs.size() == 2 && is_scalar(d->inputs[1], M_SQRT2)) {
        x = d->inputs[0];
        chain.push_back(d);
      }
    }
    if (x.empty()) continue;
    // Add(., 1), then Mul(Mul(x, 0.5), .) or Mul(Mul(x, .), 0.5).
    Node* one = read_by(f.outputs[0], "Add");
    if (!one || other_than_scalar(one, 1.0) != f.outputs[0]) continue;
    Node* mul = read_by(one->outputs[0], "Mul");
    if (!mul || mul->inputs.size() != 2) continue;
    const std::string other = mul->inputs[0] == one->outputs[0] ? mul->inputs[1] : mul->inputs[0];
    Node* out = nullptr;
    if (Node* half = made_by(other, "Mul"); half && other_than_scalar(half, 0.5) == x) {
      chain.insert(chain.end(), {one, half});
      out = mul;
    } else if (other == x) {
      Node* last = read_by(mul->outputs[0], "Mul");
      if (last && other_than_scalar(last, 0.5) == mul->outputs[0]) {
        chain.insert(chain.end(), {one, mul});
        out = last;
      }
    }
    if (!out) continue;
    for (Node* n : chain) dead[size_t(n - nodes.data())] = 1;
    const OpEntry& entry = tanh_form ? kFusedGeluTanh : kFusedGeluErf;
    out->op_type = entry.op_type;
    out->inputs = {x};
    out->attributes.clear();
    out->op = &entry;
  }
  std::vector<Node> kept;
  for (size_t k = 0; k < nodes.size(); ++k)
    if (!dead[k]) kept.push_back(std::move(nodes[k]));
  nodes = std::move(kept);
}

// Drops the nodes none of whose outputs is read (by a kept node or as a graph output): what the
// fusions above leave behind, such as the Constant nodes of a fused chain's scalars. ONNX ops
// have no side effects, so nothing else changes.
void drop_unread(std::vector<Node>& nodes, const std::vector<std::string>& graph_outputs) {
  std::unordered_set<std::string> read(graph_outputs.begin(), graph_outputs.end());
  std::vector<char> keep(nodes.size(), 0);
  for (size_t k = nodes.size(); k-- > 0;) {
    for (const std::string& out : nodes[k].outputs) keep[k] = keep[k] || (!out.empty() && read.count(out));
    if (keep[k])
      for (const std::string& in : nodes[k].inputs) read.insert(in);
  }
  std::vector<Node> kept;
  for (size_t k = 0; k < nodes.size(); ++k)
    if (keep[k]) kept.push_back(std::move(nodes[k]));
  nodes = std::move(kept);
}

}  // namespace

Tensor load_tensor(const std::string& path) {
  ::onnx::TensorProto tp;
  std::string bytes = read_file(path);
  BRISK_CHECK(tp.ParseFromString(bytes), "onnx: '", path, "' is not a serialized TensorProto (truncated or corrupt)");
  return tensor_from_proto(tp, path);
}

std::vector<std::string> model_op_types(const std::string& path) {
  ::onnx::ModelProto model;
  BRISK_CHECK(model.ParseFromString(read_file(path)), "onnx: '", path, "' is not an ONNX model");
  std::vector<std::string> out;
  for (const auto& n : model.graph().node()) {
    if (std::find(out.begin(), out.end(), n.op_type()) == out.end()) out.push_back(n.op_type());
  }
  return out;
}

std::shared_ptr<OnnxModel> load_model(const std::string& path, const LoadOptions& options) {
  ::onnx::ModelProto model;
  std::string bytes = read_file(path);
  BRISK_CHECK(model.ParseFromString(bytes), "onnx: '", path,
              "' is not an ONNX model (its protobuf does not parse: truncated or corrupt)");
  bytes.clear();
  for (auto& init : *model.mutable_graph()->mutable_initializer()) {
    if (init.data_location() == ::onnx::TensorProto::EXTERNAL)
      resolve_external(init, std::filesystem::path(path).parent_path());
  }
  const ::onnx::GraphProto& g0 = model.graph();
  int opset = default_opset(model);
  if (opset == 0)
    throw UnsupportedError(
        brisk::detail::cat("onnx: '", path, "' imports no ai.onnx opset (other domains are not supported)"));

  // Our own checks first (sizes, cycles), so that the checker never sees an absurd tensor.
  auto graph = std::make_shared<OnnxModel::Graph>();
  std::set<std::string> available;
  for (const auto& init : g0.initializer()) {
    graph->initializers.emplace_back(init.name(), tensor_from_proto(init, "initializer"));
    available.insert(init.name());
  }
  if (g0.sparse_initializer_size() > 0) throw UnsupportedError("onnx: sparse initializers are not supported");
  for (const auto& in : g0.input()) {
    available.insert(in.name());
    if (std::none_of(graph->initializers.begin(), graph->initializers.end(),
                     [&](const auto& p) { return p.first == in.name(); })) {
      graph->inputs.push_back(in.name());
    }
  }
  std::vector<int> order = run_order(g0, available);

  if (options.run_checker) {
    try {
      ::onnx::checker::check_model(model);
    } catch (const std::exception& e) {
      BRISK_FAIL("onnx: '", path, "': the ONNX checker rejects the model: ", e.what());
    }
  }
  if (options.infer_shapes) {
    // Types are not checked by inference: opset 1-6 exporters wrote int64 Constants, which
    // those opsets' schemas do not allow and every runtime accepts.
    try {
      ::onnx::shape_inference::InferShapes(model, ::onnx::OpSchemaRegistry::Instance(),
                                           ::onnx::ShapeInferenceOptions(false, 0, false));
    } catch (const std::exception& e) {
      BRISK_FAIL("onnx: '", path, "': ONNX shape inference fails: ", e.what());
    }
  }
  const ::onnx::GraphProto& g = model.graph();
  for (const auto& v : g.input()) check_value_type(v, "graph input");
  for (const auto& v : g.output()) check_value_type(v, "graph output");
  for (const auto& v : g.value_info()) check_value_type(v, "value");
  for (int k : order) graph->nodes.push_back(parse_node(g.node(k), k, opset));
  for (const auto& out : g.output()) graph->outputs.push_back(out.name());
  fuse_attention(graph->nodes, graph->outputs, graph->initializers);
  fuse_gelu(graph->nodes, graph->outputs, graph->initializers);
  drop_unread(graph->nodes, graph->outputs);

  for (size_t k = 0; k < graph->nodes.size(); ++k) {
    for (const std::string& in : graph->nodes[k].inputs) graph->last_use[in] = k;
  }
  for (const std::string& out : graph->outputs) graph->last_use[out] = graph->nodes.size();

  auto m = std::make_shared<OnnxModel>(graph);
  if (!options.trainable_initializers) m->requires_grad_(false);
  return m;
}

std::vector<OpSupport> supported_ops() {
  std::vector<OpSupport> out;
  for (const detail::OpEntry& e : detail::op_table()) out.push_back({e.op_type, e.first, e.last});
  return out;
}

// ---- OnnxModel

namespace {

// The module that holds `name` and its key there: PyTorch exports name initializers with dots
// ("layer1.0.conv1.weight"), which brisk keeps as child modules, so state_dict()'s key is the
// ONNX name exactly.
std::pair<nn::Module*, std::string> owner_of(nn::Module& root, const std::string& name) {
  nn::Module* m = &root;
  size_t start = 0;
  for (size_t dot = name.find('.'); dot != std::string::npos; dot = name.find('.', start)) {
    std::string part = name.substr(start, dot - start);
    if (part.empty()) return {nullptr, ""};
    nn::ModulePtr child = m->child(part);
    if (!child) child = m->register_module(part, std::make_shared<nn::Module>("OnnxScope"));
    m = child.get();
    start = dot + 1;
  }
  std::string leaf = name.substr(start);
  if (leaf.empty()) return {nullptr, ""};
  return {m, leaf};
}

}  // namespace

OnnxModel::OnnxModel(std::shared_ptr<const Graph> graph) : nn::Module("OnnxModel"), graph_(std::move(graph)) {
  for (const auto& [name, value] : graph_->initializers) {
    auto [owner, key] = owner_of(*this, name);
    BRISK_CHECK(owner != nullptr && !owner->maybe_parameter(key).defined() && !owner->maybe_buffer(key).defined(),
                "onnx: initializer name '", name, "' cannot be a state_dict key (empty part or used twice)");
    Tensor stored =
        is_floating(value.dtype()) ? owner->register_parameter(key, value, true) : owner->register_buffer(key, value);
    initializers_.emplace(name, stored);
  }
  eval();  // an imported graph is an inference graph until the caller says otherwise
}

const std::vector<std::string>& OnnxModel::input_names() const { return graph_->inputs; }
const std::vector<std::string>& OnnxModel::output_names() const { return graph_->outputs; }

std::vector<std::string> OnnxModel::op_types() const {
  std::vector<std::string> out;
  for (const Node& n : graph_->nodes) {
    if (std::find(out.begin(), out.end(), n.op_type) == out.end()) out.push_back(n.op_type);
  }
  return out;
}

Tensor OnnxModel::forward(const Tensor& x) {
  BRISK_CHECK(graph_->inputs.size() == 1 && graph_->outputs.size() == 1, "OnnxModel: forward(x) needs one input and ",
              "one output; this graph has ", graph_->inputs.size(), " and ", graph_->outputs.size(),
              " (use forward_dict)");
  return forward_dict(nn::TensorDict{{graph_->inputs[0], x}}).at(graph_->outputs[0]);
}

nn::TensorDict OnnxModel::forward_dict(const nn::TensorDict& inputs) {
  std::unordered_map<std::string, Tensor> values;
  for (const auto& [name, t] : initializers_) values[name] = t;
  for (const std::string& name : graph_->inputs) {
    BRISK_CHECK(inputs.contains(name), "OnnxModel: missing input '", name, "'");
    values[name] = inputs.at(name);
  }
  // Constants the graph makes go where its inputs are (or its initializers, with no inputs).
  Device device = Device::cpu();
  if (!graph_->inputs.empty()) {
    device = values.at(graph_->inputs[0]).device();
  } else if (!initializers_.empty()) {
    device = initializers_.begin()->second.device();
  }
  for (size_t k = 0; k < graph_->nodes.size(); ++k) {
    const Node& node = graph_->nodes[k];
    detail::OpContext ctx{node, {}, device};
    for (const std::string& in : node.inputs) ctx.inputs.push_back(in.empty() ? Tensor{} : values.at(in));
    std::vector<Tensor> outs;
    try {
      outs = node.op->fn(ctx);
    } catch (const UnsupportedError& e) {
      throw UnsupportedError(brisk::detail::cat("onnx: ", node.describe(), ": ", e.what()));
    } catch (const std::exception& e) {
      BRISK_FAIL("onnx: ", node.describe(), ": ", e.what());
    }
    for (size_t j = 0; j < node.outputs.size(); ++j) {
      if (node.outputs[j].empty()) continue;
      BRISK_CHECK(j < outs.size(), "onnx: ", node.describe(), ": output ", j, " is not computed");
      values[node.outputs[j]] = outs[j];
    }
    // Values nobody reads again are dropped, so peak memory follows the graph's live set.
    for (const std::string& in : node.inputs) {
      auto it = graph_->last_use.find(in);
      if (!in.empty() && it != graph_->last_use.end() && it->second == k) values.erase(in);
    }
  }
  nn::TensorDict out;
  for (const std::string& name : graph_->outputs) {
    auto it = values.find(name);
    BRISK_CHECK(it != values.end(), "OnnxModel: output '", name, "' was not computed");
    out.set(name, it->second);
  }
  return out;
}

}  // namespace brisk::onnx
