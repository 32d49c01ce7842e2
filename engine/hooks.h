// engine/hooks.h: the points where the engine's tools observe the core. Dispatch
// (engine/dispatch.cpp) and the autograd engine (engine/autograd.cpp) call through these at
// fixed places; the tools install their functions: the op recorder (engine/trace.cpp) and the
// profiler (engine/profiler.cpp) when first switched on, the non-finite watch and anomaly mode
// (engine/nonfinite.cpp) when linked. So the core includes no tool (tests/check_layers.py), and
// a hook that is not installed costs one relaxed load. An installed hook checks its tool's own
// state (a profiling run, a recorder, a watch) and otherwise just runs what it wraps.
#pragma once

#include <atomic>
#include <span>
#include <string>
#include <vector>

#include "engine/op.h"

namespace brisk {

class Node;

namespace hooks {

// One op call without the tools outside it; returns the tape node it recorded, or nullptr.
using OpRun = const Node* (*)(OpId id, std::span<const Tensor> in, const Attrs& attrs, std::span<Tensor> out);
// A tool around every op call: runs next(id, in, attrs, out) exactly once and observes it.
using OpAround = const Node* (*)(OpId id, std::span<const Tensor> in, const Attrs& attrs, std::span<Tensor> out,
                                 OpRun next);
inline std::atomic<OpAround> trace_op{nullptr};    // the op recorder, outermost
inline std::atomic<OpAround> profile_op{nullptr};  // the profiler, inside the recorder

// The module path a new tape node keeps (nullptr: scopes are not tracked now), and the check of
// an op's floating outputs after its kernel ran.
inline std::atomic<const std::string* (*)()> op_scope{nullptr};
inline std::atomic<void (*)(const char* op, std::span<const Tensor> out)> check_op{nullptr};

// One backward node's formula as the autograd engine runs it: next(call) applies it, filling
// *call.out from *call.grads.
struct NodeCall {
  Node* node = nullptr;
  std::vector<Tensor>* grads = nullptr;
  std::vector<Tensor>* out = nullptr;
};
using NodeRun = void (*)(NodeCall& call);
using NodeAround = void (*)(NodeCall& call, NodeRun next);
inline std::atomic<NodeAround> profile_node{nullptr};  // the profiler's range, outermost
inline std::atomic<NodeAround> check_node{nullptr};    // the watch's scope and check of the gradients

}  // namespace hooks

}  // namespace brisk
