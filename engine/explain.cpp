// engine/explain.cpp: graph_of, its DOT and JSON forms, and backward_verbose
// (engine/explain.h).
#include "engine/explain.h"

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>

#include "engine/autograd.h"
#include "engine/error.h"

namespace brisk::explain {

namespace {

std::string shape_str(const Shape& s) {
  std::string out = "(";
  for (int i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(s[i]);
  }
  out += ')';
  return out;
}

std::string leaf_name_of(const AccumulateGrad& acc, const Names& names) {
  auto leaf = acc.leaf.lock();
  if (!leaf) return "";
  for (const auto& [name, t] : names) {
    if (t.defined() && t.impl() == leaf.get()) return name;
  }
  return "";
}

// Labels carry DOT's own "\n" line breaks, so only quotes are escaped.
std::string escape_dot(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"') out += '\\';
    out += c;
  }
  return out;
}

double norm_of(const Tensor& t) {
  if (!t.defined()) return NAN;
  double s = 0;
  for (double v : t.detach().to_vector<double>()) s += v * v;
  return std::sqrt(s);
}

std::string norm_str(const Tensor& t) {
  if (!t.defined()) return "none";
  char buf[32];
  std::snprintf(buf, sizeof buf, "|%.4g|", norm_of(t));
  return buf;
}

}  // namespace

Graph graph_of(const Tensor& root, const Names& names) {
  Graph g;
  if (!root.defined() || !root.grad_fn()) return g;
  std::map<const Node*, int> ids;
  std::vector<const Node*> order;
  auto id_of = [&](const Node* n) {
    auto [it, inserted] = ids.emplace(n, int(order.size()));
    if (inserted) order.push_back(n);
    return it->second;
  };
  id_of(root.grad_fn().get());
  for (size_t i = 0; i < order.size(); ++i) {  // breadth first from the root
    for (const Edge& e : order[i]->next_edges) {
      if (e.node) id_of(e.node.get());
    }
  }
  g.nodes.resize(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    const Node* n = order[i];
    NodeInfo& info = g.nodes[i];
    info.id = int(i);
    info.name = n->op_label();
    info.node_name = n->name();
    info.sequence_nr = n->sequence_nr;
    info.outputs = n->slot_specs;
    info.leaf = n->is_accumulator();
    if (info.leaf) info.leaf_name = leaf_name_of(static_cast<const AccumulateGrad&>(*n), names);
    if (const auto* op = dynamic_cast<const OpNode*>(n)) {
      info.inputs = op->input_specs;
      auto add_saved = [&](const std::vector<SavedTensor>& v, const char* role) {
        for (size_t k = 0; k < v.size(); ++k) {
          if (!v[k].defined()) continue;
          const Tensor& t = const_cast<SavedTensor&>(v[k]).data();
          std::string r = role;
          r += ' ';
          r += std::to_string(k);
          SavedInfo s{r, t.sizes(), t.dtype(), t.numel() * int64_t(t.element_size())};
          g.saved_bytes += s.bytes;
          info.saved.push_back(std::move(s));
        }
      };
      add_saved(op->saved_inputs, "input");
      add_saved(op->saved_outputs, "output");
    }
    for (const Edge& e : n->next_edges) info.next.push_back({e.node ? ids.at(e.node.get()) : -1, e.input_nr});
  }
  return g;
}

std::string Graph::to_dot() const {
  std::ostringstream os;
  os << "digraph tape {\n  rankdir=BT;\n  node [shape=box, fontname=\"monospace\", fontsize=10];\n";
  for (const NodeInfo& n : nodes) {
    std::string label;
    if (n.leaf) {
      label = (n.leaf_name.empty() ? std::string("leaf") : n.leaf_name) + "\\n" +
              (n.outputs.empty() ? "" : shape_str(n.outputs[0].sizes) + " " + dtype_name(n.outputs[0].dtype));
    } else {
      std::ostringstream l;
      l << n.node_name << " (" << n.name << ")  #" << n.sequence_nr;
      for (size_t k = 0; k < n.inputs.size(); ++k) {
        l << "\\nin " << k << ": " << shape_str(n.inputs[k].sizes) << " " << dtype_name(n.inputs[k].dtype);
      }
      for (const SavedInfo& s : n.saved) l << "\\nsaved " << s.role << ": " << s.bytes << " B";
      label = l.str();
    }
    os << "  n" << n.id << " [label=\"" << escape_dot(label) << "\""
       << (n.leaf ? ", style=filled, fillcolor=lightblue" : "") << "];\n";
  }
  for (const NodeInfo& n : nodes) {
    for (size_t k = 0; k < n.next.size(); ++k) {
      if (n.next[k].first >= 0) os << "  n" << n.next[k].first << " -> n" << n.id << " [label=\"" << k << "\"];\n";
    }
  }
  os << "}\n";
  return os.str();
}

std::string Graph::to_text() const {
  std::ostringstream os;
  std::vector<bool> shown(nodes.size(), false);
  auto spec = [](const std::vector<TensorSpec>& v) {
    std::string out;
    if (!v.empty()) out.append(" ").append(shape_str(v[0].sizes)).append(" ").append(dtype_name(v[0].dtype));
    return out;
  };
  // Depth first from the root, inputs in order; a node reached a second time (a tensor used
  // twice) is printed as a reference to its first appearance.
  auto visit = [&](auto&& self, int id, const std::string& prefix, const std::string& branch) -> void {
    const NodeInfo& n = nodes[size_t(id)];
    os << prefix << branch;
    if (n.leaf) {
      os << "AccumulateGrad";
      if (!n.leaf_name.empty()) os << " -> " << n.leaf_name;
      os << spec(n.outputs);
    } else {
      os << n.node_name << " (" << n.name << ")" << spec(n.outputs);
    }
    if (shown[size_t(id)] && !n.leaf) {
      os << "  (node " << id << ", above)\n";
      return;
    }
    shown[size_t(id)] = true;
    os << "  [node " << id << "]\n";
    std::vector<int> kids;
    for (const auto& [next, slot] : n.next)
      if (next >= 0) kids.push_back(next);
    const std::string child_prefix = prefix + (branch.empty() ? "" : branch == "`- " ? "   " : "|  ");
    for (size_t k = 0; k < kids.size(); ++k) self(self, kids[k], child_prefix, k + 1 == kids.size() ? "`- " : "|- ");
  };
  if (!nodes.empty()) visit(visit, 0, "", "");
  return os.str();
}

void print_graph(const Tensor& root, std::ostream& out, const Names& names) {
  BRISK_CHECK(root.defined(), "print_graph: the tensor is undefined");
  if (!root.grad_fn()) {
    out << (root.requires_grad() ? "a leaf (its gradient lands in .grad)\n"
                                 : "no graph: the tensor does not require grad\n");
    return;
  }
  out << graph_of(root, names).to_text();
}

std::string Graph::to_json() const {
  using Json = nlohmann::json;
  auto spec_json = [](const TensorSpec& s) {
    return Json{{"shape", std::vector<int64_t>(s.sizes.begin(), s.sizes.end())}, {"dtype", dtype_name(s.dtype)}};
  };
  Json arr = Json::array();
  for (const NodeInfo& n : nodes) {
    Json j = {
        {"id", n.id}, {"name", n.name}, {"node_name", n.node_name}, {"leaf", n.leaf}, {"sequence_nr", n.sequence_nr}};
    if (n.leaf) j["leaf_name"] = n.leaf_name;
    j["inputs"] = Json::array();
    for (const auto& s : n.inputs) j["inputs"].push_back(spec_json(s));
    j["outputs"] = Json::array();
    for (const auto& s : n.outputs) j["outputs"].push_back(spec_json(s));
    j["saved"] = Json::array();
    for (const SavedInfo& s : n.saved) {
      j["saved"].push_back({{"role", s.role},
                            {"shape", std::vector<int64_t>(s.sizes.begin(), s.sizes.end())},
                            {"dtype", dtype_name(s.dtype)},
                            {"bytes", s.bytes}});
    }
    j["next"] = Json::array();
    for (const auto& [id, slot] : n.next) j["next"].push_back({{"node", id}, {"slot", slot}});
    arr.push_back(j);
  }
  return Json{{"nodes", arr}, {"saved_bytes", saved_bytes}}.dump(1);
}

namespace {

struct Printer final : detail::BackwardObserver {
  std::ostream& out;
  const Names& names;
  int step = 0;
  Printer(std::ostream& o, const Names& n) : out(o), names(n) {}
  void on_node(const Node& node, std::span<const Tensor> in, std::span<const Tensor> grads_out) override {
    out << "[" << step++ << "] ";
    if (node.is_accumulator()) {
      std::string name = leaf_name_of(static_cast<const AccumulateGrad&>(node), names);
      out << "AccumulateGrad" << (name.empty() ? "" : " -> " + name) << "  grad "
          << (in.empty() ? "none" : norm_str(in[0]));
    } else {
      out << node.op_label() << " backward  grad in";
      for (const Tensor& t : in) out << " " << norm_str(t);
      out << "  -> grads out";
      for (size_t k = 0; k < grads_out.size(); ++k) out << (k ? ", " : " ") << norm_str(grads_out[k]);
    }
    out << "\n";
  }
};

}  // namespace

void backward_verbose(const Tensor& root, std::ostream& out, const Names& names) {
  BRISK_CHECK(root.defined() && root.requires_grad(), "backward_verbose: the root does not require grad");
  Printer p(out, names);
  detail::BackwardObserver*& slot = detail::backward_observer();
  detail::BackwardObserver* prev = slot;
  slot = &p;
  try {
    root.backward();
  } catch (...) {
    slot = prev;
    throw;
  }
  slot = prev;
}

}  // namespace brisk::explain
