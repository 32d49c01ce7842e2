// compress/prune_channels.cpp: the channel dependency walk, channel selection, the masked model and
// the physical removal of compress/prune_channels.h. See Note [Channel dependency walk].
// Not here: the masks themselves (compress/prune.cpp).
#include "compress/prune_channels.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>

#include "compress/prune.h"
#include "engine/functions.h"
#include "engine/grad_mode.h"
#include "nn/layers.h"
#include "nn/models/vision.h"

namespace brisk::nn::prune {

std::string ChannelPlan::str() const {
  std::ostringstream s;
  for (const auto& g : groups) {
    s << g.conv << (g.norm.empty() ? "" : " -> " + g.norm) << " -> " << g.consumer << ": " << g.keep.size() << " of "
      << g.channels << " channels kept\n";
  }
  for (const auto& k : skipped) s << "left alone: " << k << "\n";
  return s.str();
}

namespace {

std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

// One step of the walk: a leaf module, or an opaque unit (a residual block, a module of
// unknown structure) that no channel is pruned across.
struct Unit {
  std::string path;
  Module* module;
  std::string opaque;  // why it is opaque; "" for a leaf
};

bool is_residual_block(Module& m) {
  return dynamic_cast<models::BasicBlock*>(&m) != nullptr || dynamic_cast<models::Bottleneck*>(&m) != nullptr;
}

bool is_sequential_container(const Module& m) {
  static const std::set<std::string> kinds = {"Sequential", "ModuleList", "SmallCNN", "MLP", "VGG", "ResNet"};
  return kinds.count(m.type_name()) > 0;
}

void list_units(Module& m, const std::string& path, bool root, std::vector<Unit>& out, std::vector<Unit>& blocks) {
  if (is_residual_block(m)) {
    out.push_back({path, &m, "a residual add"});
    blocks.push_back({path, &m, ""});
    return;
  }
  auto children = m.named_children();
  if (children.empty()) {
    out.push_back({path, &m, ""});
    return;
  }
  if (!root && !is_sequential_container(m)) {
    out.push_back({path, &m, "a " + m.type_name() + " (a module of unknown structure)"});
    return;
  }
  for (auto& [name, c] : children) list_units(*c, join(path, name), false, out, blocks);
}

bool zero_preserving(const Module& m) {
  static const std::set<std::string> kinds = {"ReLU",
                                              "ReLU6",
                                              "GELU",
                                              "SiLU",
                                              "Tanh",
                                              "Identity",
                                              "Dropout",
                                              "Flatten",
                                              "MaxPool2d",
                                              "AvgPool2d",
                                              "AdaptiveAvgPool2d"};
  return kinds.count(m.type_name()) > 0;
}

// The group that starts at chain[i] (a Conv2d), or the reason it cannot be pruned.
struct Found {
  ChannelGroup group;
  std::string why;  // "" when found
};

Found follow(const std::vector<Unit>& chain, size_t i) {
  Found f;
  auto* conv = dynamic_cast<Conv2d*>(chain[i].module);
  const int64_t c = conv->out_channels;
  f.group.conv = chain[i].path;
  f.group.channels = c;
  if (conv->options.groups != 1) {
    f.why = "a grouped conv";
    return f;
  }
  for (size_t j = i + 1; j < chain.size(); ++j) {
    const Unit& u = chain[j];
    if (!u.opaque.empty()) {
      f.why = "feeds " + u.opaque + " (" + u.path + ")";
      return f;
    }
    if (auto* bn = dynamic_cast<BatchNorm2d*>(u.module)) {
      if (!f.group.norm.empty() || bn->num_features != c || !bn->maybe_parameter("weight").defined()) {
        f.why = "feeds a second or non-affine batch norm (" + u.path + ")";
        return f;
      }
      f.group.norm = u.path;
      continue;
    }
    if (zero_preserving(*u.module)) continue;
    if (auto* next = dynamic_cast<Conv2d*>(u.module)) {
      if (next->options.groups != 1 || next->in_channels != c) {
        f.why = "feeds a grouped or mismatched conv (" + u.path + ")";
        return f;
      }
      f.group.consumer = u.path;
      return f;
    }
    if (auto* fc = dynamic_cast<Linear*>(u.module)) {
      if (fc->in_features % c != 0) {
        f.why = "feeds a Linear whose in_features is not a multiple of the channels (" + u.path + ")";
        return f;
      }
      f.group.consumer = u.path;
      f.group.per_channel = fc->in_features / c;
      return f;
    }
    f.why = "feeds a " + u.module->type_name() + " (" + u.path + "), which the walk does not pass";
    return f;
  }
  f.why = "its channels reach the model's output";
  return f;
}

void walk_chain(const std::vector<Unit>& chain, std::vector<ChannelGroup>& groups, std::vector<std::string>& skipped) {
  for (size_t i = 0; i < chain.size(); ++i) {
    if (!chain[i].opaque.empty() || dynamic_cast<Conv2d*>(chain[i].module) == nullptr) continue;
    Found f = follow(chain, i);
    if (f.why.empty()) {
      groups.push_back(f.group);
    } else {
      skipped.push_back(chain[i].path + ": " + f.why);
    }
  }
}

// Inside a residual block: conv1 -> bn1 -> conv2 (-> bn2 -> conv3 in a Bottleneck); the last
// conv and the downsample feed the add and stay.
void walk_block(const Unit& block, std::vector<ChannelGroup>& groups, std::vector<std::string>& skipped) {
  Module& b = *block.module;
  const bool bottleneck = dynamic_cast<models::Bottleneck*>(&b) != nullptr;
  std::vector<std::string> names =
      bottleneck ? std::vector<std::string>{"conv1", "bn1", "relu", "conv2", "bn2", "relu", "conv3"}
                 : std::vector<std::string>{"conv1", "bn1", "relu", "conv2"};
  std::vector<Unit> chain;
  for (const auto& n : names) chain.push_back({join(block.path, n), &b.submodule(n), ""});
  const std::string last = bottleneck ? "conv3" : "conv2";
  for (size_t i = 0; i < chain.size(); ++i) {
    if (dynamic_cast<Conv2d*>(chain[i].module) == nullptr) continue;
    if (chain[i].path == join(block.path, last)) {
      skipped.push_back(chain[i].path + ": feeds a residual add");
      continue;
    }
    Found f = follow(chain, i);
    if (f.why.empty()) {
      groups.push_back(f.group);
    } else {
      skipped.push_back(chain[i].path + ": " + f.why);
    }
  }
  if (b.child("downsample")) skipped.push_back(join(block.path, "downsample") + ": feeds a residual add");
}

std::vector<double> host(const Tensor& t) {
  NoGradGuard ng;
  return t.detach().to_vector<double>();
}

Tensor index_tensor(const std::vector<int64_t>& idx, Device device) {
  std::vector<double> v(idx.begin(), idx.end());
  return from_vector(v, {int64_t(idx.size())}, DType::I64, device);
}

// Consumer inputs of the kept channels: channel c covers [c k, (c + 1) k).
std::vector<int64_t> expand_channels(const std::vector<int64_t>& keep, int64_t k) {
  std::vector<int64_t> out;
  for (int64_t c : keep) {
    for (int64_t s = 0; s < k; ++s) out.push_back(c * k + s);
  }
  return out;
}

// A channel mask of n entries, 1 for kept channels, shaped to broadcast along dim 0.
Tensor channel_mask(const std::vector<int64_t>& keep, int64_t n, const Tensor& like) {
  std::vector<double> v(size_t(n), 0.0);
  for (int64_t c : keep) v[size_t(c)] = 1.0;
  Shape shape = Shape::filled(like.dim(), 1);
  shape[0] = n;
  return from_vector(v, shape, like.dtype(), like.device());
}

// What remove_channels changes in one module.
struct Edit {
  Module* module = nullptr;
  std::vector<int64_t> out{};  // kept output channels (dim 0); empty: all
  std::vector<int64_t> in{};   // kept inputs (dim 1); empty: all
};

// The slice of src that an edit keeps: rows `out` (dim 0) and, for 2-D and higher, columns `in`.
Tensor slice(const Tensor& src, const Edit& e) {
  Tensor t = src;
  if (!e.out.empty()) t = index_select(t, 0, index_tensor(e.out, t.device()));
  if (!e.in.empty() && t.dim() >= 2) t = index_select(t, 1, index_tensor(e.in, t.device()));
  return t.contiguous();
}

// Copies parameter `name` (and its mask when pruned) from old to fresh through the edit.
void transfer(Module& old, Module& fresh, const std::string& name, const Edit& e) {
  const bool pruned = is_pruned(old, name);
  Tensor src = pruned ? old.parameter(name + "_orig") : old.maybe_parameter(name);
  if (!src.defined()) return;
  Tensor& dst = fresh.parameter(name);
  {
    NoGradGuard ng;
    dst.copy_(slice(src.detach(), e));
  }
  dst.requires_grad_(src.requires_grad());
  if (!pruned) return;
  Tensor m = slice(old.buffer(name + "_mask"), e);
  std::vector<double> v = host(m);
  if (std::any_of(v.begin(), v.end(), [](double x) { return x != 1.0; })) custom_from_mask(fresh, name, m);
}

void copy_buffer(Module& old, Module& fresh, const std::string& name, const Edit& e) {
  Tensor src = old.maybe_buffer(name);
  if (!src.defined()) return;
  NoGradGuard ng;
  fresh.buffer(name).copy_(src.dim() == 0 ? src : slice(src, e));
}

ModulePtr rebuild(Module& old, const Edit& e) {
  ModulePtr fresh;
  if (auto* conv = dynamic_cast<Conv2d*>(&old)) {
    const int64_t in = e.in.empty() ? conv->in_channels : int64_t(e.in.size());
    const int64_t out = e.out.empty() ? conv->out_channels : int64_t(e.out.size());
    fresh = std::make_shared<Conv2d>(in, out, conv->kernel_size, conv->options);
  } else if (auto* bn = dynamic_cast<BatchNorm2d*>(&old)) {
    fresh = std::make_shared<BatchNorm2d>(int64_t(e.out.size()), bn->eps, bn->momentum,
                                          bn->maybe_parameter("weight").defined(),
                                          bn->maybe_buffer("running_mean").defined());
  } else if (auto* fc = dynamic_cast<Linear*>(&old)) {
    fresh = std::make_shared<Linear>(int64_t(e.in.size()), fc->out_features, fc->bias().defined());
  } else {
    BRISK_FAIL("prune.remove_channels: cannot rebuild a ", old.type_name());
  }
  Tensor ref = effective(old, "weight");
  fresh->to(ref.dtype());
  fresh->to(ref.device());
  transfer(old, *fresh, "weight", e);
  transfer(old, *fresh, "bias", e);
  copy_buffer(old, *fresh, "running_mean", e);
  copy_buffer(old, *fresh, "running_var", e);
  copy_buffer(old, *fresh, "num_batches_tracked", e);
  fresh->train(old.is_training());
  return fresh;
}

// The tensor that holds a parameter's values (weight_orig when pruned).
Tensor raw(Module& m, const std::string& name) {
  return is_pruned(m, name) ? m.parameter(name + "_orig") : m.maybe_parameter(name);
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

}  // namespace

ChannelPlan plan_channels(Module& model, const ChannelOptions& options) {
  const char* fn = "prune.plan_channels";
  BRISK_CHECK(options.amount >= 0 && options.amount < 1, fn, ": amount=", options.amount,
              " should be in [0, 1) (at least one channel of each conv stays)");
  BRISK_CHECK(options.norm > 0, fn, ": norm order ", options.norm, " must be positive (1, 2, ... or infinity)");
  ChannelPlan plan;
  std::vector<Unit> chain, blocks;
  list_units(model, "", true, chain, blocks);
  walk_chain(chain, plan.groups, plan.skipped);
  for (const Unit& b : blocks) walk_block(b, plan.groups, plan.skipped);
  const Amount amount(options.amount);
  for (ChannelGroup& g : plan.groups) {
    std::vector<double> w = host(effective(model.submodule(g.conv), "weight"));
    const int64_t c = g.channels;
    const int64_t per = int64_t(w.size()) / c;
    std::vector<double> norm(size_t(c), 0.0);
    for (size_t i = 0; i < w.size(); ++i) {
      double& acc = norm[i / size_t(per)];
      const double a = std::abs(w[i]);
      acc = std::isinf(options.norm) ? std::max(acc, a) : acc + std::pow(a, options.norm);
    }
    const int64_t drop = std::min(amount.to_prune(c, fn), c - 1);
    std::vector<int64_t> order(static_cast<size_t>(c));
    for (int64_t k = 0; k < c; ++k) order[size_t(k)] = k;
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return norm[size_t(a)] < norm[size_t(b)]; });
    g.keep.assign(order.begin() + drop, order.end());
    std::sort(g.keep.begin(), g.keep.end());
  }
  return plan;
}

void mask_channels(Module& model, const ChannelPlan& plan) {
  for (const ChannelGroup& g : plan.groups) {
    std::vector<std::pair<Module*, std::string>> targets = {{&model.submodule(g.conv), "weight"},
                                                            {&model.submodule(g.conv), "bias"}};
    if (!g.norm.empty()) {
      targets.push_back({&model.submodule(g.norm), "weight"});
      targets.push_back({&model.submodule(g.norm), "bias"});
    }
    for (auto& [m, name] : targets) {
      if (!is_pruned(*m, name) && !m->maybe_parameter(name).defined()) continue;
      Tensor p = effective(*m, name);
      custom_from_mask(*m, name, channel_mask(g.keep, g.channels, p).expand(p.sizes()).contiguous());
    }
  }
}

void remove_channels(Module& model, const ChannelPlan& plan, const Tensor& example_input) {
  const char* fn = "prune.remove_channels";
  std::map<std::string, Edit> edits;
  auto edit = [&](const std::string& path) -> Edit& {
    Edit& e = edits[path];
    e.module = &model.submodule(path);
    return e;
  };
  for (const ChannelGroup& g : plan.groups) {
    BRISK_CHECK(!g.keep.empty(), fn, ": group ", g.conv, " keeps no channel");
    auto* conv = dynamic_cast<Conv2d*>(&model.submodule(g.conv));
    BRISK_CHECK(conv && conv->out_channels == g.channels, fn, ": ", g.conv, " is not the Conv2d with ", g.channels,
                " output channels the plan was made for");
    Module& consumer = model.submodule(g.consumer);
    auto* next_conv = dynamic_cast<Conv2d*>(&consumer);
    auto* next_fc = dynamic_cast<Linear*>(&consumer);
    BRISK_CHECK((next_conv && next_conv->in_channels == g.channels && g.per_channel == 1) ||
                    (next_fc && next_fc->in_features == g.channels * g.per_channel),
                fn, ": ", g.consumer, " is not the Conv2d or Linear reading ", g.channels,
                " channels the plan was made for");
    BRISK_CHECK(std::is_sorted(g.keep.begin(), g.keep.end()) && g.keep.front() >= 0 && g.keep.back() < g.channels &&
                    std::adjacent_find(g.keep.begin(), g.keep.end()) == g.keep.end(),
                fn, ": group ", g.conv, " keeps channels that are not distinct, ascending and below ", g.channels);
    edit(g.conv).out = g.keep;
    if (!g.norm.empty()) edit(g.norm).out = g.keep;
    edit(g.consumer).in = expand_channels(g.keep, g.per_channel);
  }
  std::vector<std::pair<std::string, ModulePtr>> fresh, old;
  for (auto& [path, e] : edits) {
    fresh.emplace_back(path, rebuild(*e.module, e));
    size_t dot = path.rfind('.');
    Module& owner = dot == std::string::npos ? model : model.submodule(path.substr(0, dot));
    old.emplace_back(path, owner.child(dot == std::string::npos ? path : path.substr(dot + 1)));
  }
  auto install = [&](const std::vector<std::pair<std::string, ModulePtr>>& mods) {
    for (auto& [path, m] : mods) model.replace_module(path, m);
  };
  if (!example_input.defined()) {
    install(fresh);
    return;
  }
  // Check: the masked model (channels zeroed in place, then restored) against the rebuilt one.
  NoGradGuard ng;
  std::vector<std::pair<std::string, bool>> modes;  // parents first, so restoring in order works
  for (auto& [path, m] : model.named_modules()) modes.emplace_back(path, m->is_training());
  auto restore_modes = [&] {
    for (auto& [path, on] : modes) (path.empty() ? model : model.submodule(path)).train(on);
  };
  model.eval();
  std::vector<std::pair<Tensor, Tensor>> saved;
  for (const ChannelGroup& g : plan.groups) {
    std::vector<Tensor> ts;
    ts.push_back(raw(model.submodule(g.conv), "weight"));
    ts.push_back(raw(model.submodule(g.conv), "bias"));
    if (!g.norm.empty()) {
      ts.push_back(raw(model.submodule(g.norm), "weight"));
      ts.push_back(raw(model.submodule(g.norm), "bias"));
    }
    for (Tensor& t : ts) {
      if (!t.defined()) continue;
      saved.emplace_back(t, t.clone());
      t.mul_(channel_mask(g.keep, g.channels, t));
    }
  }
  Tensor ref = model(example_input);
  for (auto& [t, copy] : saved) t.copy_(copy);
  install(fresh);
  model.eval();
  Tensor got;
  try {
    got = model(example_input);
  } catch (const Error& e) {
    install(old);
    restore_modes();
    BRISK_FAIL(fn, ": the smaller model's forward failed (", e.what(),
               "): the model's forward does not follow the walk's assumptions (Note [Channel dependency walk]); "
               "the model is left unchanged");
  }
  restore_modes();
  std::vector<double> r = host(ref), o = host(got);
  double diff = 0;
  for (size_t i = 0; i < r.size() && i < o.size(); ++i) diff = std::max(diff, std::abs(r[i] - o[i]));
  const double tol = (ref.dtype() == DType::F64 ? 1e-9 : 1e-4) * (1.0 + max_abs(r));
  if (r.size() != o.size() || !(diff <= tol)) {
    install(old);
    restore_modes();
    BRISK_FAIL(fn, ": the smaller model's output differs from the masked model's by ", diff, " (tolerance ", tol,
               "): the model's forward does not follow the walk's assumptions (Note [Channel dependency walk]); "
               "the model is left unchanged");
  }
}

ChannelPlan prune_channels(Module& model, const ChannelOptions& options, const Tensor& example_input) {
  ChannelPlan plan = plan_channels(model, options);
  remove_channels(model, plan, example_input);
  return plan;
}

}  // namespace brisk::nn::prune
