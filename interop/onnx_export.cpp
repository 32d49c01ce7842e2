// interop/onnx_export.cpp: recorded ops to ONNX nodes (interop/onnx_export.h).
#include "interop/onnx_export.h"

#include <onnx/checker.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <sstream>
#include <tuple>
#include <unordered_map>

#include "engine/autocast.h"
#include "engine/functions.h"
#include "engine/grad_mode.h"
#include "engine/op_params.h"
#include "engine/serialize.h"
#include "engine/trace.h"
#include "interop/onnx_import.h"

namespace brisk::onnx {

namespace {

using ::onnx::AttributeProto;
using ::onnx::NodeProto;
using ::onnx::TensorProto;

int32_t onnx_type(DType d) {
  switch (d) {
    case DType::F32: return TensorProto::FLOAT;
    case DType::F64: return TensorProto::DOUBLE;
    case DType::F16: return TensorProto::FLOAT16;
    case DType::BF16: return TensorProto::BFLOAT16;
    case DType::I8: return TensorProto::INT8;
    case DType::U8: return TensorProto::UINT8;
    case DType::I32: return TensorProto::INT32;
    case DType::I64: return TensorProto::INT64;
    case DType::Bool: return TensorProto::BOOL;
  }
  return TensorProto::UNDEFINED;
}

std::string shape_text(const Tensor& t) {
  std::ostringstream s;
  s << t.dtype() << " " << t.sizes();
  return s.str();
}

// Note [Export by trace]
// Every value of the forward is a tensor handle the recorder kept; its TensorImpl's address
// names it. A value is one of: a graph input, a parameter or buffer (an initializer under its
// state_dict name), the output of an emitted node, or a constant: made by ops whose inputs were
// all constants (factories, arange, arithmetic on them), written as an initializer holding
// the value the trace computed. Only ops touching an input or a parameter become nodes, so a
// causal mask or a position-id arange costs no nodes, and a transposed weight stays the
// parameter plus a Transpose (the initializer keeps the parameter's name).
class Exporter {
 public:
  explicit Exporter(::onnx::GraphProto& g) : g_(g) {}

  void add_parameter(const std::string& name, const Tensor& t) {
    if (known_.count(key(t))) return;  // tied weights: the first name wins
    names_[key(t)] = name;
    known_[key(t)] = Kind::Param;
    params_[key(t)] = t;
  }

  void add_input(const std::string& name, const Tensor& t, const std::map<int64_t, std::string>& dynamic) {
    BRISK_CHECK(!known_.count(key(t)), "export_model: input '", name, "' is also a parameter or another input");
    names_[key(t)] = name;
    known_[key(t)] = Kind::Value;
    depends_on_input_[key(t)] = true;
    value_info(*g_.add_input(), name, t, dynamic);
    for (const auto& [dim, label] : dynamic) {
      BRISK_CHECK(dim >= 0 && dim < t.dim(), "export_model: dynamic axis ", dim, " of '", name, "' ", shape_text(t),
                  " is out of range");
      const int64_t size = t.size(dim);
      BRISK_CHECK(size > 1, "export_model: dynamic axis ", dim, " ('", label, "') of '", name, "' ", shape_text(t),
                  " is traced at size ", size, ", which cannot be told from a broadcast: trace at a size > 1");
      for (const DynamicDim& other : dynamic_)
        BRISK_CHECK(other.size != size || other.label == label, "export_model: dynamic axes '", other.label, "' and '",
                    label, "' are both traced at size ", size,
                    "; trace them at different sizes (see Note [Dynamic sizes])");
      if (std::none_of(dynamic_.begin(), dynamic_.end(), [&](const DynamicDim& d) { return d.size == size; }))
        dynamic_.push_back({size, label, name, dim, ""});
    }
  }

  void add_output(const std::string& name, const Tensor& t, const std::map<int64_t, std::string>& dynamic) {
    const std::string v = use(t);
    NodeProto* n = g_.add_node();
    n->set_op_type("Identity");
    n->set_name(name + "_identity");
    n->add_input(v);
    n->add_output(name);
    value_info(*g_.add_output(), name, t, dynamic);
  }

  void emit(const trace::OpRecord& r, size_t index);

 private:
  std::string emit_int8(const trace::OpRecord& r, const std::vector<std::string>& in);
  void emit_dynamic_factory(const trace::OpRecord& r);
  std::string causal_mask(const std::string& q, const std::string& k, DType dt);
  std::string cast_to(const std::string& v, DType to) {
    const std::string c = fresh("Cast_out");
    attr(node("Cast", {v}, {c}), "to", int64_t(onnx_type(to)));
    return c;
  }
  std::pair<std::string, std::string> dynamic_qparams(const std::string& x, bool reduce_range);
  enum class Kind { Param, Value, Const };
  using Key = const void*;
  static Key key(const Tensor& t) { return t.impl(); }

  static void value_info(::onnx::ValueInfoProto& vi, const std::string& name, const Tensor& t,
                         const std::map<int64_t, std::string>& dynamic) {
    vi.set_name(name);
    auto* tt = vi.mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx_type(t.dtype()));
    auto* shape = tt->mutable_shape();
    for (int64_t d = 0; d < t.dim(); ++d) {
      auto* dim = shape->add_dim();
      auto it = dynamic.find(d);
      if (it != dynamic.end())
        dim->set_dim_param(it->second);
      else
        dim->set_dim_value(t.size(d));
    }
  }

  // A tensor's bytes as an initializer.
  void initializer(const std::string& name, const Tensor& value) {
    TensorProto* p = g_.add_initializer();
    p->set_name(name);
    p->set_data_type(onnx_type(value.dtype()));
    for (int64_t d = 0; d < value.dim(); ++d) p->add_dims(value.size(d));
    Tensor c = value.to(Device::cpu()).contiguous();
    p->set_raw_data(std::string(static_cast<const char*>(c.data_ptr()), size_t(c.numel()) * c.element_size()));
  }

  // The ONNX name of a value, writing its initializer on first use.
  std::string use(const Tensor& t) {
    auto gone = unavailable_.find(key(t));
    BRISK_CHECK(gone == unavailable_.end(), "export_model: a later op uses a second output of ", gone->second, " (",
                shape_text(t), "), which its ONNX form does not give");
    auto it = known_.find(key(t));
    if (it == known_.end()) {  // made outside the trace (a captured tensor): a constant
      known_[key(t)] = Kind::Const;
      consts_[key(t)] = t;
      it = known_.find(key(t));
    }
    auto n = names_.find(key(t));
    if (n != names_.end() && written_.count(key(t))) return n->second;
    if (it->second == Kind::Param) {
      initializer(names_[key(t)], params_[key(t)]);
      written_.insert({key(t), true});
      return names_[key(t)];
    }
    if (it->second == Kind::Const) {
      const std::string name = "const_" + std::to_string(counter_++);
      names_[key(t)] = name;
      initializer(name, consts_[key(t)]);
      written_.insert({key(t), true});
      return name;
    }
    return names_.at(key(t));  // a node's output or a graph input
  }

  bool is_const(const Tensor& t) const {
    auto it = known_.find(key(t));
    return it == known_.end() || it->second == Kind::Const;
  }

  std::string fresh(const std::string& hint) { return hint + "_" + std::to_string(counter_++); }

  // A constant made here (a scalar of the decompositions, a shape).
  std::string constant(const Tensor& value, const std::string& hint = "c") {
    const std::string name = fresh(hint);
    initializer(name, value);
    return name;
  }
  std::string scalar(double v, DType dtype) { return constant(full({}, v, dtype), "scalar"); }
  std::string ints(const std::vector<int64_t>& v) {
    return constant(from_data(v.data(), {int64_t(v.size())}), "shape");
  }

  NodeProto* node(const std::string& type, std::vector<std::string> in, std::vector<std::string> out) {
    NodeProto* n = g_.add_node();
    n->set_op_type(type);
    n->set_name(fresh(type));
    for (auto& s : in) n->add_input(s);
    for (auto& s : out) n->add_output(s);
    return n;
  }
  // One node with one new output; returns the output's name.
  std::string op(const std::string& type, std::vector<std::string> in) {
    const std::string out = fresh(type + "_out");
    node(type, std::move(in), {out});
    return out;
  }
  static void attr(NodeProto* n, const std::string& name, int64_t v) {
    AttributeProto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(AttributeProto::INT);
    a->set_i(v);
  }
  static void attr(NodeProto* n, const std::string& name, double v) {
    AttributeProto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(AttributeProto::FLOAT);
    a->set_f(float(v));
  }
  static void attr(NodeProto* n, const std::string& name, const std::vector<int64_t>& v) {
    AttributeProto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  }
  std::string op1(const std::string& type, const std::string& x, const std::string& attr_name, double v) {
    const std::string out = fresh(type + "_out");
    attr(node(type, {x}, {out}), attr_name, v);
    return out;
  }

  // Note [Dynamic sizes]
  // A forward reads sizes as plain integers, so the trace holds the traced batch and sequence
  // length wherever the forward used them: in reshape targets, in the sizes of the factories it
  // called (arange(T) for position ids, zeros((T, T)) and two aranges for a causal mask), in an
  // expand's target, in the end of a slice of a max-size table. The exporter knows each dynamic
  // axis's traced size (add_input refuses two axes traced at the same size, or at size 1) and
  // writes such sizes as the graph computes them: Shape(input, start=axis, end=axis+1), what
  // torch.onnx writes for a symbolic size, concatenated with the fixed ones. Where it does so:
  //  - arange and fill whose length / shape holds a dynamic size become Range and
  //    ConstantOfShape over that size, and what is computed from them becomes nodes (no longer
  //    folded), so a position-id arange or a causal mask follows the input's T;
  //  - attention's causal flag builds its (T, S) mask from q's and k's own shapes;
  //  - expand's target takes the size where it equals a dynamic one, and so does the end of a
  //    prefix slice x[:T] of a dim whose fixed size is larger (a position table or a max-size
  //    causal mask cut to T, folded constant or not);
  //  - a reshape of a value computed from the inputs copies its input's dim (Reshape's 0) where
  //    the traced sizes agree at the same position, takes a dynamic size (or a product of two:
  //    B * T) where the input holds that size not yet used, and infers one other multiple (-1).
  // Matching by value is the cost of keeping sizes plain integers (no symbolic size through the
  // engine): a fixed size equal to a traced dynamic one is taken for it. Export with example
  // sizes that no fixed size of the model equals (odd sizes, unlike head counts and widths);
  // the tests check each model at other sizes, in ONNX Runtime and through the importer.
  struct DynamicDim {
    int64_t size = 0;     // as traced
    std::string label{};  // dim_param
    std::string input{};  // the graph input and axis it is read from
    int64_t axis = 0;
    std::string value{};  // the ONNX name of the size as a (1,) I64 tensor, once made
  };
  int dynamic_index(int64_t size) const {
    for (size_t k = 0; k < dynamic_.size(); ++k)
      if (dynamic_[k].size == size) return int(k);
    return -1;
  }
  // The dynamic sizes whose product is `size` (one, or two different ones: B * T); empty if none.
  std::vector<int> dynamic_factors(int64_t size) const {
    if (int k = dynamic_index(size); k >= 0) return {k};
    for (size_t k = 0; k < dynamic_.size(); ++k)
      for (size_t l = k + 1; l < dynamic_.size(); ++l)
        if (dynamic_[k].size * dynamic_[l].size == size) return {int(k), int(l)};
    return {};
  }
  std::string dynamic_value(int k) {
    DynamicDim& d = dynamic_[size_t(k)];
    if (d.value.empty()) {
      d.value = fresh("size_" + d.label);
      NodeProto* n = node("Shape", {d.input}, {d.value});
      attr(n, "start", d.axis);
      attr(n, "end", d.axis + 1);
    }
    return d.value;
  }
  // A (1,) I64 value: the product of the given dynamic sizes.
  std::string dynamic_product(const std::vector<int>& factors) {
    std::string v = dynamic_value(factors[0]);
    for (size_t i = 1; i < factors.size(); ++i) v = op("Mul", {v, dynamic_value(factors[i])});
    return v;
  }
  // A 1-D I64 shape: `sizes`, where symbolic[i] names the dynamic factors of sizes[i] (empty:
  // the fixed size). Constants alone when nothing is symbolic.
  std::string shape_value(const std::vector<int64_t>& sizes, const std::vector<std::vector<int>>& symbolic) {
    if (std::all_of(symbolic.begin(), symbolic.end(), [](const auto& f) { return f.empty(); })) return ints(sizes);
    std::vector<std::string> parts;
    std::vector<int64_t> run;
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (symbolic[i].empty()) {
        run.push_back(sizes[i]);
        continue;
      }
      if (!run.empty()) parts.push_back(ints(run));
      run.clear();
      parts.push_back(dynamic_product(symbolic[i]));
    }
    if (!run.empty()) parts.push_back(ints(run));
    const std::string out = fresh("Concat_out");
    attr(node("Concat", parts, {out}), "axis", int64_t(0));
    return out;
  }
  // A factory's or an expand's shape: every size equal to a dynamic one is taken for it.
  std::string factory_shape(const Shape& sizes) {
    std::vector<std::vector<int>> sym;
    for (int64_t s : sizes)
      sym.push_back(dynamic_index(s) >= 0 ? std::vector<int>{dynamic_index(s)} : std::vector<int>{});
    return shape_value(std::vector<int64_t>(sizes.begin(), sizes.end()), sym);
  }
  // x[:T] along a dim whose traced size is fixed and larger (a position table, a max-size causal
  // mask), T a dynamic size.
  bool dynamic_prefix(const trace::OpRecord& r) const {
    if (r.id != OpId::Slice) return false;
    const Attrs& a = r.attrs;
    const int64_t size = r.inputs[0].size(a.dim);
    return a.start == 0 && a.step == 1 && a.end < size && dynamic_index(a.end) >= 0 && dynamic_index(size) < 0;
  }
  bool has_dynamic_size(const Shape& sizes) const {
    return std::any_of(sizes.begin(), sizes.end(), [&](int64_t s) { return dynamic_index(s) >= 0; });
  }

  // Reshape's target (Note [Dynamic sizes]): for a value computed from the inputs, a dim whose
  // traced size equals the input's at the same position and is dynamic is copied (0); one that
  // is a dynamic size, or a product of two, that the input holds and no copy took becomes that
  // size from the graph; one other multiple of a dynamic size the input holds is inferred (-1).
  // A single non-fixed dim is always inferred (-1), which needs no Shape node.
  std::string reshape_target(const Tensor& in, const Shape& target) {
    std::vector<int64_t> v(target.begin(), target.end());
    if (dynamic_.empty() || !depends_on_input_.count(key(in))) return ints(v);
    std::vector<int> held(dynamic_.size(), 0);  // how often each dynamic size is a factor of the input's dims
    for (int64_t d = 0; d < in.dim(); ++d)
      for (int k : dynamic_factors(in.size(d))) ++held[size_t(k)];
    auto take = [&](const std::vector<int>& f) {
      if (f.empty() || std::any_of(f.begin(), f.end(), [&](int k) { return held[size_t(k)] == 0; })) return false;
      for (int k : f) --held[size_t(k)];
      return true;
    };
    enum Kind { Fixed, Copy, Symbolic, Infer };
    std::vector<Kind> kind(v.size(), Fixed);
    std::vector<std::vector<int>> sym(v.size());
    for (size_t i = 0; i < v.size(); ++i)
      if (int64_t(i) < in.dim() && v[i] == in.size(int64_t(i)) && take(dynamic_factors(v[i]))) kind[i] = Copy;
    for (size_t i = 0; i < v.size(); ++i) {
      if (kind[i] != Fixed) continue;
      std::vector<int> f = dynamic_factors(v[i]);
      if (take(f)) {
        kind[i] = Symbolic;
        sym[i] = f;
      }
    }
    const bool has_infer = std::find(v.begin(), v.end(), -1) != v.end();
    for (size_t i = 0; i < v.size() && !has_infer; ++i) {
      if (kind[i] != Fixed) continue;
      bool multiple = false;
      for (size_t k = 0; k < dynamic_.size(); ++k) multiple = multiple || (held[k] > 0 && v[i] % dynamic_[k].size == 0);
      if (multiple) {
        kind[i] = Infer;
        break;
      }
    }
    const auto open = std::count_if(kind.begin(), kind.end(), [](Kind k) { return k == Symbolic || k == Infer; });
    for (size_t i = 0; i < v.size(); ++i) {
      if (kind[i] == Copy) v[i] = 0;
      if (kind[i] == Infer || (kind[i] == Symbolic && open == 1 && !has_infer)) {
        v[i] = -1;
        sym[i].clear();
      }
    }
    return shape_value(v, sym);
  }
  std::vector<DynamicDim> dynamic_;
  std::unordered_map<Key, bool> depends_on_input_;

  ::onnx::GraphProto& g_;
  std::unordered_map<Key, std::string> names_;
  std::unordered_map<Key, Kind> known_;
  std::unordered_map<Key, Tensor> params_, consts_;
  std::unordered_map<Key, bool> written_;
  std::unordered_map<Key, const char*> unavailable_;  // outputs after the first: their op's name
  std::unordered_map<Key, bool> zero_state_;  // zeros of a dynamic shape and their views (recurrent initial states)
  int64_t counter_ = 0;
};

void Exporter::emit(const trace::OpRecord& r, size_t index) {
  const OpDef& def = op_def(r.id);
  auto fail = [&](const std::string& why) -> std::string {
    std::ostringstream in;
    for (size_t i = 0; i < r.inputs.size(); ++i) in << (i ? ", " : "") << shape_text(r.inputs[i]);
    BRISK_FAIL("export_model: op ", index, " of the forward, ", def.name, " (", in.str(),
               "), is not exportable: ", why);
  };
  // A factory of a dynamic size is computed in the graph (Note [Dynamic sizes]).
  if ((r.id == OpId::Arange && r.attrs.shape.size() == 1 && dynamic_index(r.attrs.shape[0]) >= 0) ||
      (r.id == OpId::Fill && r.inputs.empty() && has_dynamic_size(r.attrs.shape))) {
    emit_dynamic_factory(r);
    return;
  }
  // Constant folding: an op of constants only is a constant (its traced value), unless its size
  // follows a dynamic one.
  bool all_const = !dynamic_prefix(r);
  for (const Tensor& t : r.inputs) all_const = all_const && is_const(t);
  if (all_const && r.id != OpId::Rand && r.id != OpId::Randn && r.id != OpId::Dropout && r.id != OpId::Bernoulli &&
      r.id != OpId::Multinomial) {
    for (const Tensor& t : r.outputs) {
      known_[key(t)] = Kind::Const;
      consts_[key(t)] = t;
    }
    return;
  }
  for (const Tensor& t : r.inputs)
    if (depends_on_input_.count(key(t)))
      for (const Tensor& o : r.outputs) depends_on_input_[key(o)] = true;
  const Attrs& a = r.attrs;
  const Tensor& x = r.inputs.empty() ? r.outputs[0] : r.inputs[0];
  const DType dt = x.dtype();
  std::vector<std::string> in;
  for (const Tensor& t : r.inputs) in.push_back(use(t));
  std::string y;                  // the name of output 0
  std::vector<std::string> more;  // of outputs 1, 2, ... where the mapping gives them
  auto same = [&](const char* type) { y = op(type, {in[0]}); };
  auto binary = [&](const char* type) { y = op(type, {in[0], in[1]}); };
  // gelu(v) in the tanh form (tanh(sqrt(2 / pi) * (v + 0.044715 v^3))) or the erf one.
  auto emit_gelu = [&](const std::string& v, bool tanh_form) {
    const std::string half = op("Mul", {v, scalar(0.5, dt)});
    std::string inner;
    if (tanh_form) {
      const std::string cube = op("Mul", {op("Mul", {v, v}), v});
      const std::string sum = op("Add", {v, op("Mul", {cube, scalar(0.044715, dt)})});
      inner = op("Tanh", {op("Mul", {sum, scalar(std::sqrt(2.0 / M_PI), dt)})});
    } else {
      inner = op("Erf", {op("Mul", {v, scalar(M_SQRT1_2, dt)})});
    }
    return op("Mul", {half, op("Add", {inner, scalar(1, dt)})});
  };
  // linear's (and linear_gelu's) x (*, K) @ w^T + bias (w (N, K); flag: w (K, N), no
  // transpose): Gemm for a matrix x, else MatMul + Add.
  auto emit_linear = [&] {
    const bool bias = in.size() == 3;
    if (r.inputs[0].dim() == 2) {
      std::string out = fresh("Gemm_out");
      std::vector<std::string> args = {in[0], in[1]};
      if (bias) args.push_back(in[2]);
      attr(node("Gemm", args, {out}), "transB", int64_t(a.flag ? 0 : 1));
      return out;
    }
    std::string w = in[1];
    if (!a.flag) {
      w = fresh("Transpose_out");
      attr(node("Transpose", {in[1]}, {w}), "perm", std::vector<int64_t>{1, 0});
    }
    std::string out = op("MatMul", {in[0], w});
    if (bias) out = op("Add", {out, in[2]});
    return out;
  };
  switch (r.id) {
    case OpId::Neg: same("Neg"); break;
    case OpId::Exp: same("Exp"); break;
    case OpId::Log: same("Log"); break;
    case OpId::Sqrt: same("Sqrt"); break;
    case OpId::Rsqrt: y = op("Reciprocal", {op("Sqrt", {in[0]})}); break;
    case OpId::Abs: same("Abs"); break;
    case OpId::Sign: same("Sign"); break;
    case OpId::Relu: same("Relu"); break;
    case OpId::Sigmoid: same("Sigmoid"); break;
    case OpId::Tanh: same("Tanh"); break;
    case OpId::Sin: same("Sin"); break;
    case OpId::Cos: same("Cos"); break;
    case OpId::Erf: same("Erf"); break;
    case OpId::Reciprocal: same("Reciprocal"); break;
    case OpId::Floor: same("Floor"); break;
    case OpId::Ceil: same("Ceil"); break;
    case OpId::Round: same("Round"); break;  // both half to even
    case OpId::Trunc: y = op("Mul", {op("Sign", {in[0]}), op("Floor", {op("Abs", {in[0]})})}); break;
    case OpId::Log1p: y = op("Log", {op("Add", {in[0], scalar(1, dt)})}); break;
    case OpId::Expm1: y = op("Sub", {op("Exp", {in[0]}), scalar(1, dt)}); break;
    case OpId::Silu: y = op("Mul", {in[0], op("Sigmoid", {in[0]})}); break;
    case OpId::Hardswish: same("HardSwish"); break;
    case OpId::Hardsigmoid: {
      y = fresh("HardSigmoid_out");
      NodeProto* n = node("HardSigmoid", {in[0]}, {y});
      attr(n, "alpha", 1.0 / 6);
      attr(n, "beta", 0.5);
      break;
    }
    case OpId::LeakyRelu: y = op1("LeakyRelu", in[0], "alpha", a.a); break;
    case OpId::Elu: y = op1("Elu", in[0], "alpha", a.a); break;
    case OpId::Softplus:  // beta = a; PyTorch's threshold (b) keeps large inputs linear, as Softplus is to F32
                          // precision
      y = a.a == 1.0 ? op("Softplus", {in[0]})
                     : op("Div", {op("Softplus", {op("Mul", {in[0], scalar(a.a, dt)})}), scalar(a.a, dt)});
      break;
    case OpId::Gelu: y = emit_gelu(in[0], a.flag); break;
    case OpId::Clamp: {
      const std::string lo = std::isinf(a.a) ? "" : scalar(a.a, dt), hi = std::isinf(a.b) ? "" : scalar(a.b, dt);
      y = op("Clip", {in[0], lo, hi});
      break;
    }
    case OpId::PowScalar: y = op("Pow", {in[0], scalar(a.a, dt)}); break;
    case OpId::Cast:
      if (a.dtype == dt) {
        same("Identity");
      } else {
        y = fresh("Cast_out");
        attr(node("Cast", {in[0]}, {y}), "to", int64_t(onnx_type(a.dtype)));
      }
      break;
    case OpId::Add:
    case OpId::Sub: {
      std::string rhs = a.a == 1.0 ? in[1] : op("Mul", {in[1], scalar(a.a, r.inputs[1].dtype())});
      y = op(r.id == OpId::Add ? "Add" : "Sub", {in[0], rhs});
      break;
    }
    case OpId::Mul: binary("Mul"); break;
    case OpId::Div: binary("Div"); break;
    case OpId::Pow: binary("Pow"); break;
    case OpId::Maximum: binary("Max"); break;
    case OpId::Minimum: binary("Min"); break;
    case OpId::Eq: binary("Equal"); break;
    case OpId::Ne: y = op("Not", {op("Equal", {in[0], in[1]})}); break;
    case OpId::Lt: binary("Less"); break;
    case OpId::Le: binary("LessOrEqual"); break;
    case OpId::Gt: binary("Greater"); break;
    case OpId::Ge: binary("GreaterOrEqual"); break;
    case OpId::Where:
      if (r.inputs[1].dtype() == DType::Bool && r.inputs[2].dtype() == DType::Bool) {
        // ONNX Runtime has no Where over Bool values (brisk's logical and / or are such Wheres)
        auto cast = [&](const std::string& v, DType to) {
          const std::string c = fresh("Cast_out");
          attr(node("Cast", {v}, {c}), "to", int64_t(onnx_type(to)));
          return c;
        };
        y = cast(op("Where", {in[0], cast(in[1], DType::U8), cast(in[2], DType::U8)}), DType::Bool);
      } else {
        y = op("Where", {in[0], in[1], in[2]});
      }
      break;
    case OpId::MaskedFill: y = op("Where", {in[1], scalar(a.a, dt), in[0]}); break;
    case OpId::Sum: {
      std::vector<std::string> args = {in[0]};
      if (!a.dims.empty()) args.push_back(ints(std::vector<int64_t>(a.dims.begin(), a.dims.end())));
      y = fresh("ReduceSum_out");
      attr(node("ReduceSum", args, {y}), "keepdims", int64_t(a.keepdim));
      break;
    }
    case OpId::Amax:
    case OpId::Amin:
    case OpId::Logsumexp: {
      const char* type = r.id == OpId::Amax ? "ReduceMax" : r.id == OpId::Amin ? "ReduceMin" : "ReduceLogSumExp";
      y = fresh(std::string(type) + "_out");
      NodeProto* n = node(type, {in[0]}, {y});
      if (!a.dims.empty()) attr(n, "axes", std::vector<int64_t>(a.dims.begin(), a.dims.end()));
      attr(n, "keepdims", int64_t(a.keepdim));
      break;
    }
    case OpId::Argmax:
    case OpId::Argmin: {
      const char* type = r.id == OpId::Argmax ? "ArgMax" : "ArgMin";
      std::string src = a.flag ? op("Reshape", {in[0], ints({-1})}) : in[0];
      y = fresh(std::string(type) + "_out");
      NodeProto* n = node(type, {src}, {y});
      attr(n, "axis", a.flag ? int64_t(0) : a.dim);
      attr(n, "keepdims", int64_t(a.flag ? 0 : a.keepdim));
      break;
    }
    case OpId::Softmax:
    case OpId::LogSoftmax: {
      const char* type = r.id == OpId::Softmax ? "Softmax" : "LogSoftmax";
      y = fresh(std::string(type) + "_out");
      attr(node(type, {in[0]}, {y}), "axis", a.dim);
      break;
    }
    case OpId::Matmul: binary("MatMul"); break;
    case OpId::Linear: y = emit_linear(); break;
    case OpId::LinearGelu:  // linear's nodes, then gelu's (flag2: the tanh form); h is output 1
      more = {emit_linear()};
      y = emit_gelu(more[0], a.flag2);
      break;
    case OpId::View: {
      const Shape& sizes = r.outputs[0].sizes();
      if (std::find(sizes.begin(), sizes.end(), 0) == sizes.end()) {
        y = op("Reshape", {in[0], reshape_target(r.inputs[0], sizes)});
      } else {  // an empty dim: Reshape's 0 would copy the input's, so allowzero and the sizes as traced
        y = fresh("Reshape_out");
        attr(node("Reshape", {in[0], ints(std::vector<int64_t>(sizes.begin(), sizes.end()))}, {y}), "allowzero",
             int64_t(1));
      }
      break;
    }
    case OpId::Permute:
      y = fresh("Transpose_out");
      attr(node("Transpose", {in[0]}, {y}), "perm", std::vector<int64_t>(a.dims.begin(), a.dims.end()));
      break;
    case OpId::Expand: {
      std::vector<int64_t> shape(r.outputs[0].sizes().begin(), r.outputs[0].sizes().end());
      // Dims the input already has at full size stay 1 (broadcast keeps them, dynamic or not).
      const int64_t lead = int64_t(shape.size()) - r.inputs[0].dim();
      for (int64_t d = 0; d < r.inputs[0].dim(); ++d)
        if (r.inputs[0].size(d) == shape[size_t(lead + d)]) shape[size_t(lead + d)] = 1;
      y = op("Expand", {in[0], factory_shape(Shape(shape))});
      break;
    }
    case OpId::Slice: {
      const int64_t size = r.inputs[0].size(a.dim);
      const int64_t end = a.end >= size ? std::numeric_limits<int64_t>::max() : a.end;
      if (dynamic_prefix(r)) {  // a max-size table cut to a dynamic size
        y = op("Slice", {in[0], ints({0}), dynamic_value(dynamic_index(a.end)), ints({a.dim})});
        depends_on_input_[key(r.outputs[0])] = true;
        break;
      }
      y = op("Slice", {in[0], ints({a.start}), ints({end}), ints({a.dim}), ints({a.step})});
      break;
    }
    case OpId::ToDevice: same("Identity"); break;
    case OpId::Cat: {
      y = fresh("Concat_out");
      attr(node("Concat", in, {y}), "axis", a.dim);
      break;
    }
    case OpId::IndexSelect:
      y = fresh("Gather_out");
      attr(node("Gather", {in[0], in[1]}, {y}), "axis", a.dim);
      break;
    case OpId::Gather:
      y = fresh("GatherElements_out");
      attr(node("GatherElements", {in[0], in[1]}, {y}), "axis", a.dim);
      break;
    case OpId::ScatterAdd: {  // x with src added at index along dim
      y = fresh("ScatterElements_out");
      NodeProto* n = node("ScatterElements", {in[0], in[1], in[2]}, {y});
      attr(n, "axis", a.dim);
      AttributeProto* red = n->add_attribute();
      red->set_name("reduction");
      red->set_type(AttributeProto::STRING);
      red->set_s("add");
      break;
    }
    case OpId::Cumsum: y = op("CumSum", {in[0], constant(scalar_tensor(double(a.dim), DType::I64), "axis")}); break;
    case OpId::Cumprod: {
      // Opset 17 has no CumProd: y_i = prod_{j <= i} x_j as a ReduceProd over a new axis of
      // x_j where j <= i and 1 elsewhere ((n, n) lower-triangular mask at dims d, d + 1).
      const int64_t d = a.dim < 0 ? a.dim + x.dim() : a.dim, n = x.size(d);
      std::vector<uint8_t> m(size_t(n * n));
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j) m[size_t(i * n + j)] = j <= i;
      Shape mask_shape = Shape::filled(x.dim() - d + 1, 1);
      mask_shape[0] = mask_shape[1] = n;
      const Tensor mask = cast(from_data(m.data(), {n, n}).view(mask_shape), DType::Bool);
      const std::string rows = op("Unsqueeze", {in[0], ints({d})});  // (..., 1, n, ...): x_j along d + 1
      const std::string picked = op("Where", {constant(mask, "lower"), rows, scalar(1, dt)});
      y = fresh("ReduceProd_out");
      NodeProto* n_ = node("ReduceProd", {picked}, {y});
      attr(n_, "axes", std::vector<int64_t>{d + 1});
      attr(n_, "keepdims", int64_t(0));
      break;
    }
    case OpId::IndexAdd: {  // ScatterElements(add) with the index along dim, broadcast to src
      const Tensor& src = r.inputs[2];
      const int64_t d = a.dim < 0 ? a.dim + src.dim() : a.dim;
      Shape idx_shape = Shape::filled(src.dim(), 1);
      idx_shape[d] = r.inputs[1].numel();
      const std::string idx =
          op("Expand", {op("Reshape", {in[1], ints(std::vector<int64_t>(idx_shape.begin(), idx_shape.end()))}),
                        op("Shape", {in[2]})});
      y = fresh("ScatterElements_out");
      NodeProto* n = node("ScatterElements", {in[0], idx, in[2]}, {y});
      attr(n, "axis", d);
      AttributeProto* red = n->add_attribute();
      red->set_name("reduction");
      red->set_type(AttributeProto::STRING);
      red->set_s("add");
      break;
    }
    case OpId::LinalgSlogdet: {  // (sign, log |det|) of ONNX's Det
      const std::string det = op("Det", {in[0]});
      y = op("Sign", {det});
      more.push_back(op("Log", {op("Abs", {det})}));
      break;
    }
    case OpId::Resample2d: {
      // Separable: rows first, t[.., i, w] = sum_a wh[i, a] x[.., ih[i, a], w], then columns the
      // same way (the sum over a and b in another order: equal to rounding).
      auto along = [&](const std::string& v, const std::string& index, const std::string& weight, const Tensor& w,
                       int64_t axis) {
        const std::string g = fresh("Gather_out");
        attr(node("Gather", {v, index}, {g}), "axis", axis);  // (.., Ho, 2, W) or (.., Ho, Wo, 2)
        std::string wv = weight;
        if (w.dtype() != dt) wv = cast_to(wv, dt);
        if (axis == -2) wv = op("Unsqueeze", {wv, ints({-1})});  // (Ho, 2, 1)
        const std::string sum = fresh("ReduceSum_out");
        attr(node("ReduceSum", {op("Mul", {g, wv}), ints({axis == -2 ? int64_t(-2) : int64_t(-1)})}, {sum}), "keepdims",
             int64_t(0));
        return sum;
      };
      y = along(along(in[0], in[1], in[2], r.inputs[2], -2), in[3], in[4], r.inputs[4], -1);
      break;
    }
    case OpId::Conv2dBackwardInput: {  // conv_transpose2d (Note [Transposed convolution] in engine/ops/conv.cpp)
      const ConvParams p = ConvParams::from(a, def.name);
      const Tensor& w = r.inputs[1];
      std::vector<int64_t> out_pad;
      for (int64_t i = 0; i < 2; ++i) {
        const int64_t s = i ? p.stride.w : p.stride.h, pad = i ? p.padding.w : p.padding.h;
        const int64_t dil = i ? p.dilation.w : p.dilation.h;
        const int64_t natural = (x.size(2 + i) - 1) * s + (w.size(2 + i) - 1) * dil + 1 - 2 * pad;
        out_pad.push_back(a.shape[size_t(2 + i)] - natural);
      }
      y = fresh("ConvTranspose_out");
      NodeProto* n = node("ConvTranspose", {in[0], in[1]}, {y});
      attr(n, "kernel_shape", std::vector<int64_t>{w.size(2), w.size(3)});
      attr(n, "strides", std::vector<int64_t>{p.stride.h, p.stride.w});
      attr(n, "pads", std::vector<int64_t>{p.padding.h, p.padding.w, p.padding.h, p.padding.w});
      attr(n, "dilations", std::vector<int64_t>{p.dilation.h, p.dilation.w});
      attr(n, "group", p.groups);
      if (out_pad[0] != 0 || out_pad[1] != 0) attr(n, "output_padding", out_pad);
      break;
    }
    case OpId::Argsort: {  // a full TopK's indices: ties keep their order, as the stable sort
      const int64_t dim = a.dim < 0 ? a.dim + x.dim() : a.dim;
      const std::string values = fresh("TopK_values");
      y = fresh("TopK_indices");
      NodeProto* n = node("TopK", {in[0], ints({x.size(dim)})}, {values, y});
      attr(n, "axis", dim);
      attr(n, "largest", int64_t(a.flag));
      attr(n, "sorted", int64_t(1));
      break;
    }
    case OpId::Conv2d: {
      const ConvParams p = ConvParams::from(a);
      const Tensor& w = r.inputs[1];
      y = fresh("Conv_out");
      NodeProto* n = node("Conv", in, {y});
      attr(n, "kernel_shape", std::vector<int64_t>{w.size(2), w.size(3)});
      attr(n, "strides", std::vector<int64_t>{p.stride.h, p.stride.w});
      attr(n, "pads", std::vector<int64_t>{p.padding.h, p.padding.w, p.padding.h, p.padding.w});
      attr(n, "dilations", std::vector<int64_t>{p.dilation.h, p.dilation.w});
      attr(n, "group", p.groups);
      break;
    }
    case OpId::MaxPool2d:
    case OpId::AvgPool2d: {
      const PoolParams p = PoolParams::from(a, def.name);
      const bool max = r.id == OpId::MaxPool2d;
      y = fresh(max ? "MaxPool_out" : "AveragePool_out");
      NodeProto* n = node(max ? "MaxPool" : "AveragePool", {in[0]}, {y});
      attr(n, "kernel_shape", std::vector<int64_t>{p.kernel.h, p.kernel.w});
      attr(n, "strides", std::vector<int64_t>{p.stride.h, p.stride.w});
      attr(n, "pads", std::vector<int64_t>{p.padding.h, p.padding.w, p.padding.h, p.padding.w});
      attr(n, "ceil_mode", int64_t(p.ceil_mode));
      if (max)
        attr(n, "dilations", std::vector<int64_t>{p.dilation.h, p.dilation.w});
      else
        attr(n, "count_include_pad", int64_t(p.count_include_pad));
      break;
    }
    case OpId::AdaptiveAvgPool2d: {
      const int64_t h = x.size(-2), w = x.size(-1), oh = a.shape[0], ow = a.shape[1];
      if (oh == 1 && ow == 1) {
        same("GlobalAveragePool");
      } else if (h == 1 && w == 1) {  // one cell to every window: a broadcast
        y = op("Expand", {in[0], ints({1, 1, oh, ow})});
      } else if (h % oh == 0 && w % ow == 0) {  // even windows: a plain average pool
        y = fresh("AveragePool_out");
        NodeProto* n = node("AveragePool", {in[0]}, {y});
        attr(n, "kernel_shape", std::vector<int64_t>{h / oh, w / ow});
        attr(n, "strides", std::vector<int64_t>{h / oh, w / ow});
      } else {
        fail("an adaptive pool whose windows differ in size (" + std::to_string(h) + "x" + std::to_string(w) + " to " +
             std::to_string(oh) + "x" + std::to_string(ow) + ") has no ONNX op");
      }
      break;
    }
    case OpId::LayerNorm: {
      const LayerNormParams p = LayerNormParams::from(a);
      y = fresh("LayerNormalization_out");
      NodeProto* n = node("LayerNormalization", {in[0], in[1], in[2]}, {y});
      attr(n, "axis", -p.normalized_dims);
      attr(n, "epsilon", p.eps);
      break;
    }
    case OpId::BatchNorm: {
      const BatchNormParams p = BatchNormParams::from(a);
      if (p.training) fail("batch norm in training mode (call model.eval() before exporting)");
      y = fresh("BatchNormalization_out");
      attr(node("BatchNormalization", {in[0], in[1], in[2], in[3], in[4]}, {y}), "epsilon", p.eps);
      break;
    }
    case OpId::Attention: {  // scores = q k^T * scale (+ mask), softmax, @ v
      if (a.a > 0) fail("attention with dropout (call model.eval() before exporting)");
      const Tensor& q = r.inputs[0];
      const int64_t t = q.size(-2), s = r.inputs[1].size(-2);
      std::vector<int64_t> perm;
      for (int64_t d = 0; d < q.dim(); ++d) perm.push_back(d);
      std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
      const std::string kt = fresh("Transpose_out");
      attr(node("Transpose", {in[1]}, {kt}), "perm", perm);
      std::string scores = op("Mul", {op("MatMul", {in[0], kt}), scalar(a.b, dt)});
      const double neg_inf = -std::numeric_limits<double>::infinity();
      if (a.flag && (dynamic_index(t) >= 0 || dynamic_index(s) >= 0)) {
        scores = op("Add", {scores, causal_mask(in[0], in[1], dt)});
      } else if (a.flag) {  // top-left causal diagonal, a constant (T, S) additive mask
        std::vector<float> m(size_t(t * s));
        for (int64_t i = 0; i < t; ++i)
          for (int64_t j = 0; j < s; ++j) m[size_t(i * s + j)] = j <= i ? 0.0f : float(neg_inf);
        scores = op("Add", {scores, constant(from_data(m.data(), {t, s}).to(dt), "causal_mask")});
      }
      if (r.inputs.size() > 3) {
        scores = a.flag2 ? op("Add", {scores, in[3]}) : op("Where", {in[3], scores, scalar(neg_inf, dt)});
      }
      const std::string p = fresh("Softmax_out");
      attr(node("Softmax", {scores}, {p}), "axis", int64_t(-1));
      y = op("MatMul", {p, in[2]});
      break;
    }
    case OpId::LstmSequence:
    case OpId::GruSequence: {
      // Note [Recurrent export]: brisk's op takes the input projection already applied (gx =
      // x W_ih^T + biases, (T, B, G * H)); ONNX's LSTM / GRU apply W themselves, so W is a
      // constant permutation that also reorders PyTorch's gates (LSTM i f g o, GRU r z n) into
      // ONNX's (i o f c; z r h), and R is w_hh's rows gathered in that order.
      const bool lstm = r.id == OpId::LstmSequence;
      const Tensor& w_hh = r.inputs[1];
      const int64_t h = w_hh.size(1), gates = lstm ? 4 : 3;
      const std::vector<int64_t> order = lstm ? std::vector<int64_t>{0, 3, 1, 2} : std::vector<int64_t>{1, 0, 2};
      std::vector<int64_t> rows;
      for (int64_t g : order)
        for (int64_t j = 0; j < h; ++j) rows.push_back(g * h + j);
      std::vector<float> perm(size_t(gates * h * gates * h), 0.0f);
      for (int64_t i = 0; i < gates * h; ++i) perm[size_t(i * gates * h + rows[size_t(i)])] = 1.0f;
      const std::string w = constant(from_data(perm.data(), {1, gates * h, gates * h}).to(dt), "gate_permutation");
      const std::string index = ints(rows);
      auto gathered = [&](const std::string& v) {
        const std::string g = fresh("Gather_out");
        attr(node("Gather", {v, index}, {g}), "axis", int64_t(0));
        return g;
      };
      const std::string rr = op("Unsqueeze", {gathered(in[1]), ints({0})});
      std::string bias;
      if (!lstm) {  // B = [W's biases (already in gx: zeros), R's biases (b_hh, gathered)]
        const std::string both = fresh("Concat_out");
        attr(node("Concat", {constant(zeros({gates * h}, dt), "zero_bias"), gathered(in[2])}, {both}), "axis",
             int64_t(0));
        bias = op("Unsqueeze", {both, ints({0})});
      }
      // An initial state of zeros (what the module makes when none is given) is left out, so the
      // batch stays dynamic; any other goes in as (1, B, H).
      auto state = [&](size_t i) -> std::string {
        const Tensor& s = r.inputs[i];
        if (zero_state_.count(key(s)) || (is_const(s) && max(abs(s)).item<double>() == 0)) return "";
        return op("Unsqueeze", {in[i], ints({0})});
      };
      std::vector<std::string> args = {in[0], w, rr, bias, "", state(lstm ? 2 : 3)};
      if (lstm) args.push_back(state(3));
      while (!args.empty() && args.back().empty()) args.pop_back();
      const std::string seq = fresh(lstm ? "LSTM_Y" : "GRU_Y");
      NodeProto* n = node(lstm ? "LSTM" : "GRU", args, {seq});
      attr(n, "hidden_size", h);
      if (a.flag) {
        AttributeProto* d = n->add_attribute();
        d->set_name("direction");
        d->set_type(AttributeProto::STRING);
        d->set_s("reverse");
      }
      if (!lstm) attr(n, "linear_before_reset", int64_t(1));
      y = op("Squeeze", {seq, ints({1})});  // (T, 1, B, H) -> (T, B, H)
      break;
    }
    case OpId::Int8Linear:
    case OpId::Int8Conv2d: y = emit_int8(r, in); break;
    case OpId::QuantizeAffine:
    case OpId::DequantizeAffine: {
      // (x, scale (C) F32, zero_point (C) I64): ONNX takes a scalar scale and zero point per
      // tensor, a 1-D pair along `axis` per channel, the zero point in the quantized dtype.
      const bool quantize = r.id == OpId::QuantizeAffine;
      const DType q = quantize ? a.dtype : x.dtype();
      std::string scale = in[1], zp = cast_to(in[2], q);
      if (a.dim < 0) {
        scale = op("Squeeze", {scale, ints({0})});
        zp = op("Squeeze", {zp, ints({0})});
      }
      y = fresh(quantize ? "QuantizeLinear_out" : "DequantizeLinear_out");
      NodeProto* n = node(quantize ? "QuantizeLinear" : "DequantizeLinear", {in[0], scale, zp}, {y});
      if (a.dim >= 0) attr(n, "axis", a.dim);
      break;
    }
    case OpId::Dropout: fail("dropout in training mode (call model.eval() before exporting)"); break;
    case OpId::LinearCrossEntropy:
      fail(
          "linear_cross_entropy is a training loss with no ONNX mapping (export the model's logits: "
          "linear, then compute the loss outside the graph)");
      break;
    case OpId::Fill:
    case OpId::Arange:
      same("Identity");  // unreachable: no inputs, always constant
      break;
    default: fail("no ONNX mapping for this op yet");
  }
  // Output 0 is y, and output i is more[i - 1] where the mapping wrote it (slogdet's); the others
  // (max pool's indices, layer norm's statistics, dropout's mask) are not graph values: using
  // one later fails as an unknown value.
  for (size_t i = 0; i < r.outputs.size(); ++i) {
    if (i > more.size()) {
      unavailable_[key(r.outputs[i])] = def.name;
      continue;
    }
    names_[key(r.outputs[i])] = i == 0 ? y : more[i - 1];
    known_[key(r.outputs[i])] = Kind::Value;
    written_[key(r.outputs[i])] = true;
  }
  const bool reshapes = r.id == OpId::View || r.id == OpId::Slice || r.id == OpId::Permute || r.id == OpId::Expand ||
                        r.id == OpId::Cast || r.id == OpId::ToDevice;
  if (reshapes && zero_state_.count(key(r.inputs[0]))) zero_state_[key(r.outputs[0])] = true;
}

// arange(start, start + n * step) or full(shape, value) where n or a dim of shape is a dynamic
// size: Range over the size read from the graph input (then scaled and shifted in the dtype, so
// the length is exactly n), or ConstantOfShape.
void Exporter::emit_dynamic_factory(const trace::OpRecord& r) {
  const Attrs& a = r.attrs;
  const Tensor& out = r.outputs[0];
  std::string y;
  if (r.id == OpId::Arange) {
    const std::string n = op("Squeeze", {dynamic_value(dynamic_index(a.shape[0])), ints({0})});
    y = op("Range",
           {constant(scalar_tensor(0.0, DType::I64), "zero"), n, constant(scalar_tensor(1.0, DType::I64), "one")});
    if (a.dtype != DType::I64) y = cast_to(y, a.dtype);
    if (a.b != 1) y = op("Mul", {y, scalar(a.b, a.dtype)});
    if (a.a != 0) y = op("Add", {y, scalar(a.a, a.dtype)});
  } else {
    y = fresh("ConstantOfShape_out");
    NodeProto* n = node("ConstantOfShape", {factory_shape(a.shape)}, {y});
    AttributeProto* v = n->add_attribute();
    v->set_name("value");
    v->set_type(AttributeProto::TENSOR);
    TensorProto* t = v->mutable_t();
    const Tensor one = full({1}, a.a, out.dtype());
    t->set_data_type(onnx_type(out.dtype()));
    t->add_dims(1);
    t->set_raw_data(std::string(static_cast<const char*>(one.data_ptr()), size_t(one.element_size())));
    if (a.a == 0) zero_state_[key(out)] = true;
  }
  names_[key(out)] = y;
  known_[key(out)] = Kind::Value;
  written_[key(out)] = true;
  depends_on_input_[key(out)] = true;
}

// Attention's causal flag over dynamic sizes: key j is allowed for query i when j <= i, with T
// and S read from q's and k's shapes: (T, S), 0 or -inf.
std::string Exporter::causal_mask(const std::string& q, const std::string& k, DType dt) {
  auto positions = [&](const std::string& v, int64_t axis) {
    const std::string size = fresh("Shape_out");
    NodeProto* n = node("Shape", {v}, {size});
    attr(n, "start", int64_t(-2));
    attr(n, "end", int64_t(-1));
    const std::string len = op("Squeeze", {size, ints({0})});
    const std::string range = op("Range", {constant(scalar_tensor(0.0, DType::I64), "zero"), len,
                                           constant(scalar_tensor(1.0, DType::I64), "one")});
    return op("Unsqueeze", {range, ints({axis})});
  };
  const std::string future = op("Greater", {positions(k, 0), positions(q, 1)});  // (T, S)
  return op("Where", {future, scalar(-std::numeric_limits<double>::infinity(), dt), scalar(0, dt)});
}

// Note [Int8 export]
// int8_linear and int8_conv2d (Note [Int8 ops] in engine/ops/quantized.cpp) become QDQ graphs,
// the form ONNX Runtime's quantization tools write and its optimizer fuses into integer kernels:
// the input through QuantizeLinear and DequantizeLinear with the op's quint8 qparams (scalars),
// the int8 weight (the module's "weight" buffer, an initializer under its state_dict name)
// through DequantizeLinear with its per-channel scales (axis 0, zero point 0), then MatMul or
// Conv in F32 with the bias, and Relu / the 2x2 MaxPool the op fused. A dynamic op's qparams
// are computed in the graph as fbgemm's ChooseQuantizationParams does (min and max clamped to
// include 0, scale and zero point in double, the zero point rounded half to even and clipped;
// reduce_range halves the range); scales under 6.1e-5, where fbgemm also widens the range it
// quantizes, are only clamped. What ONNX Runtime may compute differently is an activation at a
// rounding tie (x / scale against brisk's x * (1 / scale)) and the float sum of the
// dequantized products against brisk's exact int32 one: outputs agree within one quantization
// step (tests/onnx_ort_check.py). quantize_affine and dequantize_affine (QTensor's quantize and
// dequantize inside a forward) are QuantizeLinear and DequantizeLinear one to one.
std::pair<std::string, std::string> Exporter::dynamic_qparams(const std::string& x, bool reduce_range) {
  const int64_t qmin = 0, qmax = reduce_range ? 127 : 255;
  auto to = [&](const std::string& v, DType t) {
    const std::string c = fresh("Cast_out");
    attr(node("Cast", {v}, {c}), "to", int64_t(onnx_type(t)));
    return c;
  };
  auto reduce = [&](const char* type) {
    const std::string r = fresh(std::string(type) + "_out");
    attr(node(type, {x}, {r}), "keepdims", int64_t(0));
    return to(r, DType::F64);
  };
  const std::string zero = scalar(0, DType::F64);
  const std::string lo = op("Min", {reduce("ReduceMin"), zero}), hi = op("Max", {reduce("ReduceMax"), zero});
  const std::string scale = op(
      "Max", {op("Div", {op("Sub", {hi, lo}), scalar(double(qmax - qmin), DType::F64)}), scalar(6.1e-5, DType::F64)});
  const std::string lo_s = op("Div", {lo, scale}), hi_s = op("Div", {hi, scale});
  const std::string from_min = op("Sub", {scalar(double(qmin), DType::F64), lo_s});
  const std::string from_max = op("Sub", {scalar(double(qmax), DType::F64), hi_s});
  const std::string err_min = op("Sub", {scalar(double(qmin), DType::F64), op("Abs", {lo_s})});
  const std::string err_max = op("Sub", {scalar(double(qmax), DType::F64), op("Abs", {hi_s})});
  const std::string initial = op("Where", {op("Less", {err_min, err_max}), from_min, from_max});
  const std::string zp =
      op("Clip", {op("Round", {initial}), scalar(double(qmin), DType::F64), scalar(double(qmax), DType::F64)});
  return {to(scale, DType::F32), to(zp, DType::U8)};
}

std::string Exporter::emit_int8(const trace::OpRecord& r, const std::vector<std::string>& in) {
  const Int8Params p = Int8Params::from(r.attrs);
  std::string scale, zp;
  if (p.dynamic) {
    std::tie(scale, zp) = dynamic_qparams(in[0], p.reduce_range);
  } else {
    scale = constant(full({}, double(float(p.input_scale)), DType::F32), "input_scale");
    zp = constant(full({}, double(p.input_zero_point), DType::U8), "input_zero_point");
  }
  const std::string x = op("DequantizeLinear", {op("QuantizeLinear", {in[0], scale, zp}), scale, zp});
  const std::string w = fresh("DequantizeLinear_out");
  attr(node("DequantizeLinear", {in[1], in[2]}, {w}), "axis", int64_t(0));
  const bool bias = r.inputs.size() == 6;
  std::string y;
  if (r.id == OpId::Int8Linear) {
    const std::string wt = fresh("Transpose_out");
    attr(node("Transpose", {w}, {wt}), "perm", std::vector<int64_t>{1, 0});
    y = op("MatMul", {x, wt});
    if (bias) y = op("Add", {y, in[5]});
  } else {
    const Tensor& weight = r.inputs[1];
    std::vector<std::string> args = {x, w};
    if (bias) args.push_back(in[5]);
    y = fresh("Conv_out");
    NodeProto* n = node("Conv", args, {y});
    attr(n, "kernel_shape", std::vector<int64_t>{weight.size(2), weight.size(3)});
    attr(n, "strides", std::vector<int64_t>{p.stride.h, p.stride.w});
    attr(n, "pads", std::vector<int64_t>{p.padding.h, p.padding.w, p.padding.h, p.padding.w});
    attr(n, "dilations", std::vector<int64_t>{p.dilation.h, p.dilation.w});
  }
  if (p.relu) y = op("Relu", {y});
  if (p.pool) {
    const std::string pooled = fresh("MaxPool_out");
    NodeProto* n = node("MaxPool", {y}, {pooled});
    attr(n, "kernel_shape", std::vector<int64_t>{2, 2});
    attr(n, "strides", std::vector<int64_t>{2, 2});
    y = pooled;
  }
  return y;
}

}  // namespace

namespace {

::onnx::ModelProto build_model(nn::Module& model, const std::vector<Tensor>& inputs, const ExportOptions& o) {
  // An imported graph may have no inputs (ONNX's constant-only graphs); a module's forward has one.
  const bool imported = dynamic_cast<OnnxModel*>(&model) != nullptr;
  BRISK_CHECK(!inputs.empty() || imported, "export_model: needs example inputs");
  BRISK_CHECK(o.opset_version >= 17 && o.opset_version <= 17, "export_model: opset ", o.opset_version,
              " is not supported (17)");
  BRISK_CHECK(!autocast_state().depth, "export_model: cannot trace under autocast (export the model in one dtype)");
  std::vector<std::string> in_names = o.input_names;
  if (in_names.empty()) {
    if (inputs.size() == 1) in_names = {"input"};
    for (size_t i = 0; inputs.size() > 1 && i < inputs.size(); ++i) in_names.push_back("input_" + std::to_string(i));
  }
  BRISK_CHECK(in_names.size() == inputs.size(), "export_model: ", inputs.size(), " inputs but ", in_names.size(),
              " input names");
  const std::string out_name = o.output_names.empty() ? "output" : o.output_names[0];
  auto dynamic_of = [&](const std::string& name) {
    auto it = o.dynamic_axes.find(name);
    return it == o.dynamic_axes.end() ? std::map<int64_t, std::string>{} : it->second;
  };

  ::onnx::ModelProto m;
  m.set_ir_version(8);  // ONNX 1.12's, for opset 17
  m.set_producer_name(o.producer_name);
  auto* opset = m.add_opset_import();
  opset->set_domain("");
  opset->set_version(o.opset_version);
  ::onnx::GraphProto& g = *m.mutable_graph();
  g.set_name(model.type_name());

  Exporter ex(g);
  for (const auto& [name, t] : model.named_parameters()) ex.add_parameter(name, t);
  for (const auto& [name, t] : model.named_buffers()) ex.add_parameter(name, t);
  // Inputs are copied so that their handles are the trace's alone (a caller's tensor may also
  // be a parameter or captured elsewhere).
  std::vector<Tensor> traced_inputs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    traced_inputs.push_back(inputs[i].detach().clone());
    ex.add_input(in_names[i], traced_inputs.back(), dynamic_of(in_names[i]));
  }
  // One input: model(x), one output. Several inputs, several output names, or an imported ONNX
  // graph: the dict call, every output it returns.
  std::vector<std::pair<std::string, Tensor>> outs;
  std::vector<trace::OpRecord> records;
  const bool dict_call = inputs.size() > 1 || o.output_names.size() > 1 || imported;
  {
    NoGradGuard no_grad;
    trace::Recorder rec;
    if (!dict_call) {
      outs.emplace_back(out_name, model(traced_inputs[0]));
    } else {
      nn::TensorDict d;
      for (size_t i = 0; i < inputs.size(); ++i) d.set(in_names[i], traced_inputs[i]);
      nn::TensorDict r = model(d);
      BRISK_CHECK(o.output_names.empty() || o.output_names.size() == r.size(), "export_model: ", o.output_names.size(),
                  " output names for the model's ", r.size(), " outputs");
      for (size_t i = 0; i < r.size(); ++i) {
        const std::string name = !o.output_names.empty() ? o.output_names[i]
                                 : r.size() == 1         ? out_name
                                                         : "output_" + std::to_string(i);
        outs.emplace_back(name, r.items()[i].second);
      }
    }
    records = rec.records();
  }
  // Only the ops the outputs depend on: what the forward computed beside them (an LSTM's h_n
  // and c_n, unused branches) is not part of the graph.
  std::vector<char> live(records.size(), 0);
  {
    std::unordered_map<const void*, bool> needed;
    for (const auto& kv : outs) needed[kv.second.impl()] = true;
    for (size_t i = records.size(); i-- > 0;) {
      for (const Tensor& t : records[i].outputs) live[i] = live[i] || needed.count(t.impl());
      if (live[i])
        for (const Tensor& t : records[i].inputs) needed[t.impl()] = true;
    }
  }
  for (size_t i = 0; i < records.size(); ++i)
    if (live[i]) ex.emit(records[i], i);
  for (const auto& [name, t] : outs) ex.add_output(name, t, dynamic_of(name));
  // Initializers no node reads (a recurrent op's zero initial state, left out of its node).
  {
    std::unordered_map<std::string, bool> read;
    for (const auto& n : g.node())
      for (const auto& i : n.input()) read[i] = true;
    auto* inits = g.mutable_initializer();
    for (int i = inits->size(); i-- > 0;)
      if (!read.count(inits->Get(i).name())) inits->DeleteSubrange(i, 1);
  }

  try {
    ::onnx::checker::check_model(m);
    ::onnx::ShapeInferenceOptions so{true, 1, false};
    ::onnx::ModelProto inferred = m;
    ::onnx::shape_inference::InferShapes(inferred, ::onnx::OpSchemaRegistry::Instance(), so);
  } catch (const std::exception& e) {
    BRISK_FAIL("export_model: ONNX's checker refused the exported graph (a bug in brisk's exporter): ", e.what());
  }
  return m;
}

// protobuf's limit for one message; models near it keep their weights outside.
constexpr size_t kProtoLimit = size_t(2) << 30;

}  // namespace

std::string export_model_bytes(nn::Module& model, const std::vector<Tensor>& inputs, const ExportOptions& o) {
  ::onnx::ModelProto m = build_model(model, inputs, o);
  BRISK_CHECK(m.ByteSizeLong() < kProtoLimit, "export_model: the model is ", m.ByteSizeLong(),
              " bytes, over protobuf's 2 GB: export it to a file (export_model), whose weights then go to a ",
              "file of their own");
  std::string bytes;
  BRISK_CHECK(m.SerializeToString(&bytes), "export_model: the model does not serialize");
  return bytes;
}

// Note [External data]: with options.external_data, or when the model would pass protobuf's
// 2 GB, every initializer of at least external_data_min_bytes moves to "<file>.data" beside the
// model (ONNX's external data: location, offset, length), 64-byte aligned; the data file is
// written first, so a crash leaves at worst a data file that no model names yet.
void export_model(nn::Module& model, const std::vector<Tensor>& inputs, const std::string& path,
                  const ExportOptions& options) {
  ::onnx::ModelProto m = build_model(model, inputs, options);
  const bool external = options.external_data || m.ByteSizeLong() >= kProtoLimit - (size_t(64) << 20);
  if (external) {
    const std::string data_name = std::filesystem::path(path).filename().string() + ".data";
    std::string blob;
    for (auto& t : *m.mutable_graph()->mutable_initializer()) {
      if (!t.has_raw_data() || int64_t(t.raw_data().size()) < options.external_data_min_bytes) continue;
      blob.resize((blob.size() + 63) / 64 * 64, '\0');
      const size_t offset = blob.size(), length = t.raw_data().size();
      blob += t.raw_data();
      t.clear_raw_data();
      t.set_data_location(TensorProto::EXTERNAL);
      auto entry = [&](const char* key, const std::string& value) {
        auto* e = t.add_external_data();
        e->set_key(key);
        e->set_value(value);
      };
      entry("location", data_name);
      entry("offset", std::to_string(offset));
      entry("length", std::to_string(length));
    }
    write_file_atomic((std::filesystem::path(path).parent_path() / data_name).string(), blob);
  }
  std::string bytes;
  BRISK_CHECK(m.SerializeToString(&bytes), "export_model: the model does not serialize (", m.ByteSizeLong(), " bytes)");
  write_file_atomic(path, bytes);
}

}  // namespace brisk::onnx
