// kernels/cuda/conv.cu: the CUDA kernels of conv2d, conv2d_backward_input and
// conv2d_backward_weight, through cuDNN's convolution calls (groups, stride, padding, dilation;
// F32 and F64 natively, F16/BF16 with F32 compute; conv2d's optional bias added after). One plan per geometry
// (descriptors and the algorithms cuDNN's heuristic ranks, tried in order until one runs), cached per thread and
// device; workspaces come from brisk's caching allocator. F32 runs without TF32
// unless set_allow_tf32(true), as matmul. Parameters: ConvParams (engine/op_params.h).
// Without cuDNN (no BRISK_WITH_CUDNN) the conv ops get no CUDA kernel: using them on CUDA is
// the dispatcher's "no kernel for device cuda" error.
// Not here: shapes, checks and backward formulas (engine/ops/conv.cpp); pooling (pool.cu); the
// normalization kernels (norm.cu); the CPU kernels (kernels/cpu/conv.cpp).
#include "engine/op.h"
#include "engine/op_params.h"
#include "kernels/cuda/register.h"

#ifdef BRISK_WITH_CUDNN

#include <array>
#include <map>
#include <vector>

#include "engine/backend.h"
#include "kernels/cuda/cudnn_handle.h"
#include "kernels/cuda/loops.cuh"
#include "kernels/functors.h"

namespace brisk::kernels::cuda {

// Note [cuDNN legacy convolution API]
// cuDNN 9 marks cudnnConvolutionForward / BackwardData / BackwardFilter and their descriptor
// and heuristic calls deprecated in favour of the graph API, but still ships and supports
// them, and they are what PyTorch's default cuDNN path (Conv_v7.cpp) calls. They map one to
// one onto brisk's three conv ops and need no engine-config plumbing, so the code is short and
// its behaviour well known; fused epilogues (conv + bias + activation) would be the reason to
// move to the graph API. The deprecation attributes only take effect when CUDNN_WARN_DEPRECATED
// is defined (cudnn_graph.h), which this build does not do, so nothing needs silencing.
//
// Algorithm choice: cudnnGet*Algorithm_v7 (the heuristic, no trial runs), once per geometry,
// cached per thread and device. Its results that succeeded, need at most kMaxWorkspaceBytes of
// workspace and, for F32 without TF32, use FMA math become the candidates, in its order, with
// the algorithm that needs no tensor cores and little workspace (implicit GEMM / ALGO_0) last.
// The first candidate is used, its math type set on the descriptor (cuDNN needs algorithm and
// math type together); when it reports "not supported" or its workspace cannot be allocated,
// the next one is tried and kept (as PyTorch's AlgoIterator). The math type asked for: F32
// CUDNN_FMA_MATH (no TF32: the default, as PyTorch's allow_tf32 off) or CUDNN_DEFAULT_MATH
// with TF32 allowed; F16/BF16 CUDNN_TENSOR_OP_MATH; F64 CUDNN_DEFAULT_MATH. The backward
// algorithms the heuristic picks may use atomics (run-to-run differences in the last bits), as
// in PyTorch without deterministic mode.

namespace {

constexpr size_t kMaxWorkspaceBytes = size_t(256) << 20;

enum class ConvKind : int { Forward = 0, BackwardData = 1, BackwardFilter = 2 };

const char* kind_name(ConvKind k) {
  switch (k) {
    case ConvKind::Forward: return "conv2d";
    case ConvKind::BackwardData: return "conv2d_backward_input";
    case ConvKind::BackwardFilter: return "conv2d_backward_weight";
  }
  return "conv2d";
}

// One conv geometry (ConvGeometry, engine/op_params.h: the CPU kernels read the same struct):
// sizes of x (B, C, H, W), w (O, C / groups, kh, kw), y (B, O, Ho, Wo), stride, padding,
// dilation, groups.
using PlanKey = std::array<int64_t, 21>;

PlanKey plan_key(ConvKind kind, DType dtype, bool tf32, int device, const ConvGeometry& g) {
  // clang-format off
  return {int64_t(kind), int64_t(dtype), tf32 ? 1 : 0, device,
          g.B, g.C, g.H, g.W, g.O, g.Cg, g.kh, g.kw, g.Ho, g.Wo,
          g.sh, g.sw, g.ph, g.pw, g.dh, g.dw, g.groups};
  // clang-format on
}

// An algorithm (a cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t, by kind) with its math type.
struct Candidate {
  int algo = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};

struct ConvPlan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  std::vector<Candidate> candidates;  // the heuristic's usable ones in its order, then the fallback
  size_t pick = 0;                    // the candidate in use
  bool ready = false;                 // conv's math type set for `pick`, workspace known
  size_t workspace = 0;
};

void destroy(ConvPlan& p) {
  cudnn().cudnnDestroyTensorDescriptor(p.x);
  cudnn().cudnnDestroyTensorDescriptor(p.y);
  cudnn().cudnnDestroyFilterDescriptor(p.w);
  cudnn().cudnnDestroyConvolutionDescriptor(p.conv);
}

int to_int(int64_t v, ConvKind kind, const ConvGeometry& g) {
  BRISK_CHECK(v <= int64_t(INT32_MAX), kind_name(kind), ": a size of input ", g.x_sizes(), ", weight ", g.w_sizes(),
              ", output ", g.y_sizes(), " exceeds cuDNN's 32-bit limit");
  return int(v);
}

cudnnMathType_t wanted_math(DType t, bool tf32) {
  switch (t) {
    case DType::F32: return tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
    case DType::F16:
    case DType::BF16: return CUDNN_TENSOR_OP_MATH;
    default: return CUDNN_DEFAULT_MATH;
  }
}

// Whether a heuristic result may run: it succeeded, fits the workspace cap, and does not
// bring TF32 into an F32 conv that forbids it.
template <class Perf>
bool usable(const Perf& p, DType t, bool tf32) {
  if (p.status != CUDNN_STATUS_SUCCESS || p.memory > kMaxWorkspaceBytes) return false;
  return !(t == DType::F32 && !tf32 && p.mathType != CUDNN_FMA_MATH);
}

template <class Perf>
void add_candidates(ConvPlan& p, const Perf* perf, int found, int fallback, DType t, bool tf32) {
  for (int i = 0; i < found; ++i) {
    if (usable(perf[i], t, tf32)) p.candidates.push_back({int(perf[i].algo), perf[i].mathType});
  }
  // The fallback needs no tensor cores (and, for F32 without TF32, must not use them).
  const cudnnMathType_t math = wanted_math(t, tf32) == CUDNN_TENSOR_OP_MATH ? CUDNN_DEFAULT_MATH : wanted_math(t, tf32);
  p.candidates.push_back({fallback, math});
}

// The candidates of `kind` (see Note [cuDNN legacy convolution API]).
void find_candidates(ConvPlan& p, ConvKind kind, DType t, bool tf32, cudnnHandle_t h) {
  int found = 0;
  switch (kind) {
    case ConvKind::Forward: {
      cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
      BRISK_CUDNN_CHECK(cudnn().cudnnGetConvolutionForwardAlgorithm_v7(h, p.x, p.w, p.conv, p.y,
                                                                       CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &found, perf));
      add_candidates(p, perf, found, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, t, tf32);
      break;
    }
    case ConvKind::BackwardData: {
      cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
      BRISK_CUDNN_CHECK(cudnn().cudnnGetConvolutionBackwardDataAlgorithm_v7(
          h, p.w, p.y, p.conv, p.x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &found, perf));
      add_candidates(p, perf, found, CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, t, tf32);
      break;
    }
    case ConvKind::BackwardFilter: {
      cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
      BRISK_CUDNN_CHECK(cudnn().cudnnGetConvolutionBackwardFilterAlgorithm_v7(
          h, p.x, p.y, p.conv, p.w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &found, perf));
      add_candidates(p, perf, found, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, t, tf32);
      break;
    }
  }
}

// Descriptors and candidate algorithms per (kind, dtype, TF32 switch, device, geometry), per
// thread (the heuristic costs tens of microseconds; a training step repeats its geometries).
ConvPlan& conv_plan(ConvKind kind, DType t, int device, const ConvGeometry& g, cudnnHandle_t h) {
  const bool tf32 = t == DType::F32 && allow_tf32();
  const PlanKey key = plan_key(kind, t, tf32, device, g);
  thread_local std::map<PlanKey, ConvPlan> cache;
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  if (cache.size() > 1024) {  // a pathological stream of geometries: start over
    for (auto& [k, p] : cache) destroy(p);
    cache.clear();
  }
  const cudnnDataType_t type = cudnn_type(t, kind_name(kind));
  const cudnnDataType_t compute = t == DType::F64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  ConvPlan p;
  try {
    BRISK_CUDNN_CHECK(cudnn().cudnnCreateTensorDescriptor(&p.x));
    BRISK_CUDNN_CHECK(cudnn().cudnnCreateTensorDescriptor(&p.y));
    BRISK_CUDNN_CHECK(cudnn().cudnnCreateFilterDescriptor(&p.w));
    BRISK_CUDNN_CHECK(cudnn().cudnnCreateConvolutionDescriptor(&p.conv));
    auto i = [&](int64_t v) { return to_int(v, kind, g); };
    for (int64_t n : {g.x_sizes().numel(), g.w_sizes().numel(), g.y_sizes().numel()}) {
      to_int(n, kind, g);  // cuDNN's strides are int
    }
    BRISK_CUDNN_CHECK(cudnn().cudnnSetTensor4dDescriptor(p.x, CUDNN_TENSOR_NCHW, type, i(g.B), i(g.C), i(g.H), i(g.W)));
    BRISK_CUDNN_CHECK(
        cudnn().cudnnSetTensor4dDescriptor(p.y, CUDNN_TENSOR_NCHW, type, i(g.B), i(g.O), i(g.Ho), i(g.Wo)));
    BRISK_CUDNN_CHECK(
        cudnn().cudnnSetFilter4dDescriptor(p.w, type, CUDNN_TENSOR_NCHW, i(g.O), i(g.Cg), i(g.kh), i(g.kw)));
    BRISK_CUDNN_CHECK(cudnn().cudnnSetConvolution2dDescriptor(p.conv, i(g.ph), i(g.pw), i(g.sh), i(g.sw), i(g.dh),
                                                              i(g.dw), CUDNN_CROSS_CORRELATION, compute));
    BRISK_CUDNN_CHECK(cudnn().cudnnSetConvolutionGroupCount(p.conv, i(g.groups)));
    BRISK_CUDNN_CHECK(cudnn().cudnnSetConvolutionMathType(p.conv, wanted_math(t, tf32)));
    find_candidates(p, kind, t, tf32, h);
  } catch (...) {
    destroy(p);
    throw;
  }
  return cache.emplace(key, std::move(p)).first->second;
}

// Sets the conv descriptor's math type for candidate `c` and asks its workspace size.
cudnnStatus_t prepare(ConvKind kind, cudnnHandle_t h, const ConvPlan& p, const Candidate& c, size_t* bytes) {
  cudnnStatus_t st = cudnn().cudnnSetConvolutionMathType(p.conv, c.math);
  if (st != CUDNN_STATUS_SUCCESS) return st;
  switch (kind) {
    case ConvKind::Forward:
      return cudnn().cudnnGetConvolutionForwardWorkspaceSize(h, p.x, p.w, p.conv, p.y,
                                                             cudnnConvolutionFwdAlgo_t(c.algo), bytes);
    case ConvKind::BackwardData:
      return cudnn().cudnnGetConvolutionBackwardDataWorkspaceSize(h, p.w, p.y, p.conv, p.x,
                                                                  cudnnConvolutionBwdDataAlgo_t(c.algo), bytes);
    case ConvKind::BackwardFilter:
      return cudnn().cudnnGetConvolutionBackwardFilterWorkspaceSize(h, p.x, p.y, p.conv, p.w,
                                                                    cudnnConvolutionBwdFilterAlgo_t(c.algo), bytes);
  }
  return CUDNN_STATUS_BAD_PARAM;
}

// Errors after which the next candidate is tried (as PyTorch's AlgoIterator does): this
// algorithm cannot run this problem, or its workspace could not be had.
bool try_next(cudnnStatus_t st) {
  return (int(st) >= int(CUDNN_STATUS_NOT_SUPPORTED) && int(st) < int(CUDNN_STATUS_INTERNAL_ERROR)) ||
         st == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED;
}

// Runs `kind` on dense operands: Forward writes y from (x, w), BackwardData writes x (the
// input gradient) from (y = grad, w), BackwardFilter writes w (the weight gradient) from
// (x, y = grad). The written operand may be non-dense: it is then computed in a dense scratch
// tensor and copied in.
void run_conv(ConvKind kind, const Tensor& x_in, const Tensor& w_in, const Tensor& y_in, const Attrs& attrs) {
  const Tensor& target = kind == ConvKind::Forward ? y_in : kind == ConvKind::BackwardData ? x_in : w_in;
  if (target.numel() == 0) return;
  const DType t = target.dtype();
  const Tensor out = target.is_contiguous() ? target : make_empty(target.sizes(), t, target.device());
  if (x_in.numel() == 0 || w_in.numel() == 0 || y_in.numel() == 0) {
    // A sum over nothing (no batch, no channels): zeros, which cuDNN's descriptors cannot express.
    zero_(out);
    if (out.impl() != target.impl()) copy_into(target, out);
    return;
  }
  const Tensor x = kind == ConvKind::BackwardData ? out : dense(x_in);
  const Tensor w = kind == ConvKind::BackwardFilter ? out : dense(w_in);
  const Tensor y = kind == ConvKind::Forward ? out : dense(y_in);
  const ConvGeometry g(x.sizes(), w.sizes(), y.sizes(), ConvParams::from(attrs, kind_name(kind)));
  const int device = target.device().index;
  DeviceGuard guard(device);
  cudnnHandle_t h = cudnn_handle(device, kind_name(kind));
  ConvPlan& p = conv_plan(kind, t, device, g, h);
  const float one_f = 1, zero_f = 0;
  const double one_d = 1, zero_d = 0;
  const void* alpha = t == DType::F64 ? static_cast<const void*>(&one_d) : &one_f;
  const void* beta = t == DType::F64 ? static_cast<const void*>(&zero_d) : &zero_f;
  Allocator& alloc = brisk::backend(Device::cuda(device)).allocator(device);
  const uint64_t stream_key = reinterpret_cast<uint64_t>(stream_handle(device));
  cudnnStatus_t st = CUDNN_STATUS_NOT_SUPPORTED;
  for (; p.pick < p.candidates.size(); ++p.pick, p.ready = false) {
    const Candidate& c = p.candidates[p.pick];
    const bool last = p.pick + 1 == p.candidates.size();
    if (!p.ready) {
      st = prepare(kind, h, p, c, &p.workspace);
      if (st != CUDNN_STATUS_SUCCESS && !last && try_next(st)) continue;
      BRISK_CUDNN_CHECK(st);
      p.ready = true;
    }
    void* ws = nullptr;
    if (p.workspace) {
      try {
        ws = alloc.allocate(p.workspace, stream_key);
      } catch (const Error&) {
        if (last) throw;  // out of memory even for the last algorithm
        continue;         // a later algorithm may need less workspace
      }
    }
    switch (kind) {
      case ConvKind::Forward:
        st = cudnn().cudnnConvolutionForward(h, alpha, p.x, x.data_ptr(), p.w, w.data_ptr(), p.conv,
                                             cudnnConvolutionFwdAlgo_t(c.algo), ws, p.workspace, beta, p.y,
                                             y.data_ptr());
        break;
      case ConvKind::BackwardData:
        st = cudnn().cudnnConvolutionBackwardData(h, alpha, p.w, w.data_ptr(), p.y, y.data_ptr(), p.conv,
                                                  cudnnConvolutionBwdDataAlgo_t(c.algo), ws, p.workspace, beta, p.x,
                                                  x.data_ptr());
        break;
      case ConvKind::BackwardFilter:
        st = cudnn().cudnnConvolutionBackwardFilter(h, alpha, p.x, x.data_ptr(), p.y, y.data_ptr(), p.conv,
                                                    cudnnConvolutionBwdFilterAlgo_t(c.algo), ws, p.workspace, beta, p.w,
                                                    w.data_ptr());
        break;
    }
    // Freed right after queueing: the next user of the block runs later on the same stream.
    if (ws) alloc.deallocate(ws, p.workspace, stream_key);
    if (st == CUDNN_STATUS_SUCCESS || last || !try_next(st)) break;
  }
  if (st != CUDNN_STATUS_SUCCESS) {
    BRISK_FAIL(kind_name(kind), ": cuDNN failed with ", cudnn().cudnnGetErrorString(st), " (", int(st), ") for input ",
               g.x_sizes(), ", weight ", g.w_sizes(), ", output ", g.y_sizes(), ", stride (", g.sh, ", ", g.sw,
               "), padding (", g.ph, ", ", g.pw, "), dilation (", g.dh, ", ", g.dw, "), groups ", g.groups, ", dtype ",
               t, " on cuda:", device);
  }
  if (out.impl() != target.impl()) copy_into(target, out);
}

// (x (B, C, H, W), w (O, C / groups, kh, kw)[, bias (O)]) -> y (B, O, Ho, Wo). cuDNN's
// convolution, then the bias added in place by the elementwise add kernel (one pass; the
// bias is read as a (1, O, 1, 1) view broadcast over y, cudnnAddTensor does not promise BF16).
void conv2d_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  run_conv(ConvKind::Forward, in[0], in[1], out[0], attrs);
  if (in.size() == 2) return;
  const Tensor& y = out[0];
  const Tensor& bias = in[2];
  const Tensor b =
      make_view(bias.storage(), {1, bias.size(0), 1, 1}, {0, bias.stride(0), 0, 0}, bias.offset(), bias.dtype());
  dispatch_float(y.dtype(), "conv2d", [&](auto tag) {
    using T = decltype(tag);
    launch_elementwise<T, T, T>(y, {&y, &b}, functors::Add{});
  });
}

// (grad (B, O, Ho, Wo), w) -> grad of x (B, C, H, W)
void conv2d_backward_input_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  run_conv(ConvKind::BackwardData, out[0], in[1], in[0], attrs);
}

// (grad (B, O, Ho, Wo), x (B, C, H, W)) -> grad of w (O, C / groups, kh, kw)
void conv2d_backward_weight_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  run_conv(ConvKind::BackwardFilter, in[1], out[0], in[0], attrs);
}

}  // namespace

}  // namespace brisk::kernels::cuda

#endif  // BRISK_WITH_CUDNN

namespace brisk::kernels::cuda {

void register_conv() {
#ifdef BRISK_WITH_CUDNN
  constexpr DeviceType gpu = DeviceType::CUDA;
  register_kernel(OpId::Conv2d, gpu, conv2d_kernel);
  register_kernel(OpId::Conv2dBackwardInput, gpu, conv2d_backward_input_kernel);
  register_kernel(OpId::Conv2dBackwardWeight, gpu, conv2d_backward_weight_kernel);
#endif
}

}  // namespace brisk::kernels::cuda
