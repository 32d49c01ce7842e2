// engine/ops/recurrent.cpp: OpDefs of the fused recurrent layers, lstm_sequence and
// gru_sequence (one layer and direction over a whole sequence, Note [Fused recurrent layers]
// in kernels/cpu/recurrent.cpp), and their backward ops: inference (shape and dtype checks
// that name the op and the shapes), backward formulas (one call of the backward op, which is
// not differentiable again), autocast policy Fp32.
// Not here: the kernels (kernels/cpu/recurrent.cpp); the layers that call them (nn/recurrent.cpp).
#include "engine/ops/families.h"

namespace brisk {

namespace {

using detail::define;
using detail::mask;

// Checks the shared operands: gx (T, B, G * H), w_hh (G * H, H), h0 (B, H); returns (T, B, H).
struct Dims {
  int64_t T, B, H;
};
Dims check_sequence(const char* op, int64_t gates, const Tensor& gx, const Tensor& w_hh, const Tensor& h0) {
  BRISK_CHECK(gx.dtype() == DType::F32 || gx.dtype() == DType::F64, op, ": takes F32 or F64, got gx ", gx.str());
  BRISK_CHECK(gx.dim() == 3 && gx.size(2) % gates == 0 && gx.size(2) > 0, op, ": gx must be (T, B, ", gates,
              " * H), got ", gx.sizes());
  const int64_t H = gx.size(2) / gates;
  const Dims d{gx.size(0), gx.size(1), H};
  const Shape w_want{gates * H, H}, h_want{d.B, H};
  BRISK_CHECK(w_hh.sizes() == w_want, op, ": w_hh has shape ", w_hh.sizes(), ", expected ", w_want, " for gx ",
              gx.sizes());
  BRISK_CHECK(h0.sizes() == h_want, op, ": h0 has shape ", h0.sizes(), ", expected ", h_want, " for gx ", gx.sizes());
  for (const Tensor* t : {&w_hh, &h0}) {
    BRISK_CHECK(t->dtype() == gx.dtype() && t->device() == gx.device(), op, ": operands must share gx's dtype and ",
                "device: gx ", gx.str(), ", got ", t->str());
  }
  return d;
}

// A gradient that may not have flowed: itself, or zeros of the given size.
Tensor or_zeros(const Tensor& g, const TensorSpec& spec, Device device) {
  return g.defined() ? g : zeros(spec.sizes, spec.dtype, device);
}

// ---- lstm_sequence
void lstm_infer(std::span<const Tensor> in, const Attrs&, std::span<TensorSpec> out) {
  const Dims d = check_sequence("lstm_sequence", 4, in[0], in[1], in[2]);
  BRISK_CHECK(in[3].sizes() == in[2].sizes() && in[3].dtype() == in[0].dtype(), "lstm_sequence: c0 ", in[3].str(),
              " must match h0 ", in[2].str());
  const DType t = in[0].dtype();
  out[0] = {{d.T, d.B, d.H}, t};
  out[1] = {{d.T, d.B, d.H}, t};
  out[2] = {{d.T, d.B, 4 * d.H}, t};
}

// gx, w_hh, h0, c0 <- (gy, gc) (h_n and c_n are selections of y and c, so their gradients
// arrive here); a gradient reaching the saved gates is internal (the public form does not
// return them) and ignored.
void lstm_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const Device dev = c.device;
  const Shape& gx = c.in_specs[0].sizes;
  const TensorSpec seq{{gx[0], gx[1], gx[2] / 4}, c.in_specs[0].dtype};
  const Tensor in[8] = {or_zeros(c.grads[0], seq, dev),
                        or_zeros(c.grads[1], seq, dev),
                        c.outputs[2],
                        c.outputs[1],
                        c.outputs[0],
                        c.inputs[1],
                        c.inputs[2],
                        c.inputs[3]};
  Tensor out[4];
  call(OpId::LstmSequenceBackward, in, c.attrs, out);
  for (int i = 0; i < 4; ++i) {
    if (c.needs_grad(i)) gi[i] = out[i];
  }
}

void lstm_backward_infer(std::span<const Tensor> in, const Attrs&, std::span<TensorSpec> out) {
  const Dims d = check_sequence("lstm_sequence_backward", 4, in[2], in[5], in[6]);
  const Shape seq{d.T, d.B, d.H}, state{d.B, d.H};
  BRISK_CHECK(in[0].sizes() == seq && in[1].sizes() == seq && in[3].sizes() == seq && in[4].sizes() == seq &&
                  in[7].sizes() == state,
              "lstm_sequence_backward: gy, gc, c, y must be ", seq, " and c0 ", state, " for gates ", in[2].sizes());
  for (int i = 0; i < 8; ++i) {
    BRISK_CHECK(in[size_t(i)].dtype() == in[2].dtype(), "lstm_sequence_backward: operand ", i, " is ",
                in[size_t(i)].str(), ", expected ", in[2].str());
  }
  const DType t = in[2].dtype();
  out[0] = {in[2].sizes(), t};
  out[1] = {in[5].sizes(), t};
  out[2] = {state, t};
  out[3] = {state, t};
}

// ---- gru_sequence
void gru_infer(std::span<const Tensor> in, const Attrs&, std::span<TensorSpec> out) {
  const Dims d = check_sequence("gru_sequence", 3, in[0], in[1], in[3]);
  const Shape b_want{3 * d.H};
  BRISK_CHECK(in[2].sizes() == b_want && in[2].dtype() == in[0].dtype(), "gru_sequence: b_hh ", in[2].str(),
              " must be (", 3 * d.H, ") of gx's dtype");
  const DType t = in[0].dtype();
  out[0] = {{d.T, d.B, d.H}, t};
  out[1] = {{d.T, d.B, 4 * d.H}, t};
}

void gru_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const Shape& gx = c.in_specs[0].sizes;
  const TensorSpec seq{{gx[0], gx[1], gx[2] / 3}, c.in_specs[0].dtype};
  const Tensor in[5] = {or_zeros(c.grads[0], seq, c.device), c.outputs[1], c.outputs[0], c.inputs[1], c.inputs[3]};
  Tensor out[4];
  call(OpId::GruSequenceBackward, in, c.attrs, out);
  for (int i = 0; i < 4; ++i) {
    if (c.needs_grad(i)) gi[i] = out[i];
  }
}

void gru_backward_infer(std::span<const Tensor> in, const Attrs&, std::span<TensorSpec> out) {
  const Tensor& saved = in[1];
  BRISK_CHECK(saved.dim() == 3 && saved.size(2) % 4 == 0 && in[4].dim() == 2, "gru_sequence_backward: saved must be ",
              "(T, B, 4 * H) and h0 (B, H), got ", saved.sizes(), " and ", in[4].sizes());
  const int64_t H = saved.size(2) / 4, T = saved.size(0), B = saved.size(1);
  const Shape seq{T, B, H}, state{B, H}, w_want{3 * H, H};
  BRISK_CHECK(in[3].sizes() == w_want && in[0].sizes() == seq && in[2].sizes() == seq && in[4].sizes() == state,
              "gru_sequence_backward: gy, y must be ", seq, ", h0 ", state, " and w_hh ", w_want, " for saved ",
              saved.sizes());
  for (int i = 0; i < 5; ++i) {
    BRISK_CHECK(in[size_t(i)].dtype() == saved.dtype(), "gru_sequence_backward: operand ", i, " is ",
                in[size_t(i)].str(), ", expected ", saved.str());
  }
  const DType t = saved.dtype();
  out[0] = {{T, B, 3 * H}, t};
  out[1] = {{3 * H, H}, t};
  out[2] = {{3 * H}, t};
  out[3] = {state, t};
}

const OpDef kLstmSequence{.infer = lstm_infer,
                          .backward = lstm_bw,
                          .save_inputs = mask(1, 2, 3),     // w_hh, h0, c0
                          .save_outputs = mask(0, 1, 2),    // y, c, gates
                          .diff_inputs = mask(0, 1, 2, 3),  // gx, w_hh, h0, c0
                          .autocast = CastPolicy::Fp32};
const OpDef kLstmSequenceBackward{.infer = lstm_backward_infer, .autocast = CastPolicy::Fp32};
const OpDef kGruSequence{.infer = gru_infer,
                         .backward = gru_bw,
                         .save_inputs = mask(1, 3),        // w_hh, h0
                         .save_outputs = mask(0, 1),       // y, saved
                         .diff_inputs = mask(0, 1, 2, 3),  // gx, w_hh, b_hh, h0
                         .autocast = CastPolicy::Fp32};
const OpDef kGruSequenceBackward{.infer = gru_backward_infer, .autocast = CastPolicy::Fp32};

}  // namespace

// ---- the public forms (engine/functions.h)

LSTMResult lstm_sequence(const Tensor& gx, const Tensor& w_hh, const Tensor& h0, const Tensor& c0, bool reverse) {
  Attrs a;
  a.flag = reverse;
  const Tensor in[4] = {gx, w_hh, h0, c0};
  Tensor out[3];  // y, c, gates
  call(OpId::LstmSequence, in, a, out);
  const int64_t last = reverse ? 0 : gx.size(0) - 1;
  return {out[0], out[0].select(0, last), out[1].select(0, last)};
}

RNNResult gru_sequence(const Tensor& gx, const Tensor& w_hh, const Tensor& b_hh, const Tensor& h0, bool reverse) {
  Attrs a;
  a.flag = reverse;
  const Tensor in[4] = {gx, w_hh, b_hh, h0};
  Tensor out[2];  // y, saved
  call(OpId::GruSequence, in, a, out);
  return {out[0], out[0].select(0, reverse ? 0 : gx.size(0) - 1)};
}

namespace detail {

void define_recurrent_ops() {
  define(OpId::LstmSequence, kLstmSequence);
  define(OpId::LstmSequenceBackward, kLstmSequenceBackward);
  define(OpId::GruSequence, kGruSequence);
  define(OpId::GruSequenceBackward, kGruSequenceBackward);
}

}  // namespace detail

}  // namespace brisk
