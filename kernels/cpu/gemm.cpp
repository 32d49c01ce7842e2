// kernels/cpu/gemm.cpp: the CPU matmul kernel and the GEMM driver behind it (gemm.h).
// F32 runs brisk's own AVX-512 GEMM where the CPU has it (kernels/cpu/gemm_f32.cpp, Note
// [F32 GEMM]); F64, vector products and F32 without AVX-512 (or with BRISK_GEMM=eigen) run
// Eigen's packed GEMM kernel directly, with a cached per-thread workspace and brisk's own
// OpenMP split (Note [CPU GEMM]); BF16 runs the BF16 GEMM of
// kernels/cpu/gemm_bf16.h into F32 and rounds once; F16 is converted to F32, multiplied and
// rounded once; integer dtypes run a plain wrapping loop (exact, slow, rarely used).
// Not here: the shape rules of matmul (1-D operands, broadcasting) and its backward
// (engine/ops/linalg.cpp); the BF16 kernels themselves (kernels/cpu/gemm_bf16.cpp).
#include "kernels/cpu/gemm.h"

#include <omp.h>

#include <algorithm>
#include <type_traits>

// Eigen 3.4's AVX-512 code trips GCC 12's -Wmaybe-uninitialized, and -Wuninitialized in the
// sanitizer build (_mm512_undefined_ps() in its transposes; false positives). The warnings
// are reported where Eigen's templates are instantiated, in this file's functions, so the
// pragmas span the whole file.
#pragma GCC diagnostic push
#ifndef __clang__  // GCC warnings; clang has no such groups
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <Eigen/Core>

#include "engine/allocator.h"
#include "engine/op.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/gemm_f32.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/register.h"
#include "kernels/cpu/scratch.h"
#include "kernels/cpu/vmath.h"

namespace brisk::kernels::cpu {

// Note [CPU GEMM]
// Eigen's `Map * Map` product mallocs its packing workspace (blockA, blockB) on every call;
// above 128 KiB that is a fresh mmap, and first-touch page faults (~11 us per 4 KiB page on
// the project's VMs) made a 256^3 product 4x slower. It also runs its own OpenMP split whose
// threads spin while waiting for each other. So brisk calls the layer below the expression:
// general_matrix_matrix_product::run, with a level3_blocking whose blockA/blockB point into
// a per-thread workspace taken from cpu_allocator() and kept (grown, never freed per call).
// Storage order and leading dimension are arguments of that call, so an operand with a unit
// stride in either dim (a transposed view) is read in place. Threads (one OpenMP pool): a
// large product is cut along its larger output dim into one slab per thread, each slab an
// independent serial GEMM (each thread packs its own panels); a batch of products is shared
// out whole across threads; small products run on the calling thread. Vector products
// (M or N of 1) go to Eigen's GEMV, which does not pack.

namespace {

using Index = Eigen::Index;
using Traits = Eigen::internal::gebp_traits<float, float>;  // register block (slab alignment)
constexpr int kRowMajor = Eigen::RowMajor;
constexpr int kColMajor = Eigen::ColMajor;

// Multiply-adds below which a product runs on one thread: waking the team costs a few
// microseconds, about what 2 * 64^3 multiply-adds take on one core.
constexpr double kParallelMacs = 2.0 * 64 * 64 * 64;

// The same for brisk's F32 kernel (Note [F32 GEMM]): 2 * 128 * 128 * 128 multiply-adds, about
// 20 us on one core here (the MLP's 128 x 128 x 256 products stay on one thread).
constexpr double kF32ParallelMacs = 2.0 * 128 * 128 * 128 + 1;

Index ceil_div(Index a, Index b) { return (a + b - 1) / b; }
size_t round_up(size_t a, size_t b) { return (a + b - 1) / b * b; }

thread_local Workspace t_workspace;

// Eigen's blocking sizes (cache-sized panels) with the buffers in this thread's workspace.
// m, n, k are the product as Eigen's column-major kernel sees it (see gemm_kernel).
template <class T>
class Blocking : public Eigen::internal::level3_blocking<T, T> {
 public:
  Blocking(Index m, Index n, Index k) {
    Index kc = k, mc = m, nc = n;
    Eigen::internal::computeProductBlockingSizes<T, T, 1>(kc, mc, nc, Index(1));
    const size_t a_bytes = round_up(size_t(mc) * size_t(kc) * sizeof(T), 64);
    const size_t b_bytes = size_t(kc) * size_t(nc) * sizeof(T);
    char* ws = static_cast<char*>(t_workspace.get(a_bytes + b_bytes));
    this->m_mc = mc;
    this->m_nc = nc;
    this->m_kc = kc;
    this->m_blockA = reinterpret_cast<T*>(ws);
    this->m_blockB = reinterpret_cast<T*>(ws + a_bytes);
  }
};

// A matrix as Eigen's kernels read it: storage order and leading dimension.
template <class T>
struct Operand {
  const T* data;
  Index ld;
  bool row_major;

  const T* row(Index i) const { return data + i * (row_major ? ld : 1); }
  const T* col(Index j) const { return data + j * (row_major ? 1 : ld); }
  Operand transposed() const { return {data, ld, !row_major}; }
};

// A unit stride in either dim is read in place; a size-1 dim takes any stride.
template <class T>
Operand<T> operand(const MatrixRef<const T>& m, const char* name) {
  if (m.col_stride == 1 || m.cols == 1) return {m.data, m.rows == 1 ? m.cols : m.row_stride, true};
  if (m.row_stride == 1 || m.rows == 1) return {m.data, m.cols == 1 ? m.rows : m.col_stride, false};
  BRISK_FAIL("gemm: operand ", name, " (", m.rows, ", ", m.cols, ") has strides (", m.row_stride, ", ", m.col_stride,
             "); one of them must be 1 (copy it to a dense matrix first)");
}

// c (row-major: unit column stride, row stride ldc) += a @ b. a: (m, k), b: (k, n).
// Eigen computes a row-major product as the column-major c^T = b^T a^T, hence (n, m, k).
template <class T, int AOrder, int BOrder>
void gemm_kernel(Index m, Index n, Index k, const T* a, Index lda, const T* b, Index ldb, T* c, Index ldc) {
  using Product =
      Eigen::internal::general_matrix_matrix_product<Index, T, AOrder, false, T, BOrder, false, kRowMajor, 1>;
  Blocking<T> blocking(n, m, k);
  Product::run(m, n, k, a, lda, b, ldb, c, 1, ldc, T(1), blocking, nullptr);
}

// y (rows, stride incy) += a (rows, depth) @ x (depth, stride incx).
template <class T, int Order>
void gemv_kernel(Index rows, Index depth, const T* a, Index lda, const T* x, Index incx, T* y, Index incy) {
  using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Order>;
  using Vector = Eigen::Matrix<T, Eigen::Dynamic, 1>;
  Eigen::Map<const Matrix, 0, Eigen::OuterStride<>> am(a, rows, depth, Eigen::OuterStride<>(lda));
  Eigen::Map<const Vector, 0, Eigen::InnerStride<>> xv(x, depth, Eigen::InnerStride<>(incx));
  Eigen::Map<Vector, 0, Eigen::InnerStride<>> yv(y, rows, Eigen::InnerStride<>(incy));
  yv.noalias() += am * xv;
}

template <class T>
void gemv(Index rows, Index depth, Operand<T> a, const T* x, Index incx, T* y, Index incy) {
  if (a.row_major) {
    gemv_kernel<T, kRowMajor>(rows, depth, a.data, a.ld, x, incx, y, incy);
  } else {
    gemv_kernel<T, kColMajor>(rows, depth, a.data, a.ld, x, incx, y, incy);
  }
}

// c (row-major, row stride ldc) += a @ b on the calling thread. a: (m, k), b: (k, n).
template <class T>
void gemm_serial(Index m, Index n, Index k, Operand<T> a, Operand<T> b, T* c, Index ldc) {
  if (m == 0 || n == 0 || k == 0) return;
  if (n == 1) {  // matrix @ vector
    gemv(m, k, a, b.data, b.row_major ? b.ld : 1, c, ldc);
  } else if (m == 1) {  // vector @ matrix, as c^T = b^T a^T
    gemv(n, k, b.transposed(), a.data, a.row_major ? 1 : a.ld, c, 1);
  } else if (a.row_major && b.row_major) {
    gemm_kernel<T, kRowMajor, kRowMajor>(m, n, k, a.data, a.ld, b.data, b.ld, c, ldc);
  } else if (a.row_major) {
    gemm_kernel<T, kRowMajor, kColMajor>(m, n, k, a.data, a.ld, b.data, b.ld, c, ldc);
  } else if (b.row_major) {
    gemm_kernel<T, kColMajor, kRowMajor>(m, n, k, a.data, a.ld, b.data, b.ld, c, ldc);
  } else {
    gemm_kernel<T, kColMajor, kColMajor>(m, n, k, a.data, a.ld, b.data, b.ld, c, ldc);
  }
}

// Zeroes rows [0, m) x cols [0, n) of a row-major c.
template <class T>
void zero(T* c, Index m, Index n, Index ldc) {
  if (ldc == n) {
    std::fill(c, c + m * n, T(0));
    return;
  }
  for (Index i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, T(0));
}

template <class T>
MatrixRef<T> transposed(const MatrixRef<T>& m) {
  return {m.data, m.cols, m.rows, m.col_stride, m.row_stride};
}

// Whether Eigen's kernels can read m in place (see operand()).
template <class T>
bool readable_in_place(const MatrixRef<const T>& m) {
  return m.col_stride == 1 || m.cols == 1 || m.row_stride == 1 || m.rows == 1;
}

thread_local Workspace t_dense_a, t_dense_b;  // dense copies of operands Eigen cannot read

// m copied into ws as a dense row-major matrix.
template <class T>
MatrixRef<const T> dense_copy(const MatrixRef<const T>& m, Workspace& ws) {
  T* out = ws.get<T>(m.rows * m.cols);
  for (Index i = 0; i < m.rows; ++i) {
    for (Index j = 0; j < m.cols; ++j) out[i * m.cols + j] = m.data[i * m.row_stride + j * m.col_stride];
  }
  return {out, m.rows, m.cols, m.cols, 1};
}

// Threads for `macs` multiply-adds of work.
int threads_for_macs(double macs) {
  if (omp_in_parallel() || macs < kParallelMacs) return 1;
  return omp_get_max_threads();
}

}  // namespace

int gemm_threads(int64_t m, int64_t n, int64_t k) {
  if (m == 1 || n == 1) return 1;  // GEMV: memory-bound, and Eigen's runs on one thread
  return threads_for_macs(double(m) * double(n) * double(k));
}

template <class T>
void gemm(MatrixRef<const T> a, MatrixRef<const T> b, MatrixRef<T> c, bool accumulate, int threads) {
  BRISK_CHECK(a.rows == c.rows && b.cols == c.cols && a.cols == b.rows, "gemm: sizes do not match: (", a.rows, ", ",
              a.cols, ") @ (", b.rows, ", ", b.cols, ") -> (", c.rows, ", ", c.cols, ")");
  if (c.rows == 0 || c.cols == 0) return;
  // A column-major c is the row-major c^T = b^T a^T.
  if (!(c.col_stride == 1 || c.cols == 1)) {
    BRISK_CHECK(c.row_stride == 1 || c.rows == 1, "gemm: the output (", c.rows, ", ", c.cols, ") has strides (",
                c.row_stride, ", ", c.col_stride, "); one of them must be 1");
    gemm(transposed(b), transposed(a), transposed(c), accumulate, threads);
    return;
  }
  const Index m = c.rows, n = c.cols, k = a.cols;
  const Index ldc = m == 1 ? n : c.row_stride;
  const int nt = threads > 0 ? threads : gemm_threads(m, n, k);
  // F32 products (not GEMVs, which Eigen does without packing) run brisk's own kernel where the
  // CPU has it; see Note [F32 GEMM] in kernels/cpu/gemm_f32.cpp.
  if constexpr (std::is_same_v<T, float>) {
    if (m > 1 && n > 1 && f32_gemm_path() == F32GemmPath::Avx512) {
      // This kernel finishes a product below kF32ParallelMacs in about the time two threads take
      // to meet (with OMP_WAIT_POLICY=passive a wake-up is a futex and a reschedule), so it
      // keeps those on one thread unless told otherwise.
      const bool small = double(m) * double(n) * double(k) < kF32ParallelMacs;
      gemm_f32_avx512(m, n, k, a.data, a.row_stride, a.col_stride, b.data, b.row_stride, b.col_stride, c.data, ldc,
                      accumulate, threads == 0 && small ? 1 : nt);
      return;
    }
  }
  // Eigen reads operands with a unit stride in one dim; others are copied densely first.
  if (!readable_in_place(a)) a = dense_copy(a, t_dense_a);
  if (!readable_in_place(b)) b = dense_copy(b, t_dense_b);
  const Operand<T> oa = operand(a, "a"), ob = operand(b, "b");
  if (nt <= 1) {
    if (!accumulate) zero(c.data, m, n, ldc);
    gemm_serial(m, n, k, oa, ob, c.data, ldc);
    return;
  }
  // One slab of the larger output dim per thread (rows on a tie), cut at multiples of Eigen's
  // register block along M and of a SIMD packet along N: equal slabs matter more than whole
  // register blocks (cutting N at Eigen's 48 rows left 144 + 112 of 256).
  const bool split_n = n > m;
  const Index extent = split_n ? n : m;
  const Index align = split_n ? Index(Eigen::internal::packet_traits<T>::size) : Index(Traits::nr);
  const Index chunk = ceil_div(ceil_div(extent, nt), align) * align;
  const int slabs = int(ceil_div(extent, chunk));
#pragma omp parallel for num_threads(slabs) schedule(static, 1)
  for (int s = 0; s < slabs; ++s) {
    const Index lo = s * chunk, len = std::min(extent, lo + chunk) - lo;
    if (split_n) {  // c[:, lo:lo+len] = a @ b[:, lo:lo+len]
      T* cs = c.data + lo;
      if (!accumulate) zero(cs, m, len, ldc);
      gemm_serial(m, len, k, oa, Operand<T>{ob.col(lo), ob.ld, ob.row_major}, cs, ldc);
    } else {  // c[lo:lo+len, :] = a[lo:lo+len, :] @ b
      T* cs = c.data + lo * ldc;
      if (!accumulate) zero(cs, len, n, ldc);
      gemm_serial(len, n, k, Operand<T>{oa.row(lo), oa.ld, oa.row_major}, ob, cs, ldc);
    }
  }
}

template void gemm<float>(MatrixRef<const float>, MatrixRef<const float>, MatrixRef<float>, bool, int);
template void gemm<double>(MatrixRef<const double>, MatrixRef<const double>, MatrixRef<double>, bool, int);

// ---- the matmul kernel: a (..., M, K) @ b (..., K, N) -> out (batch..., M, N), where the
// batch dims of a and b broadcast (engine/ops/linalg.cpp has already checked the shapes).
namespace {

// Where each batch entry's matrix starts in a, b and out (element offsets): out's batch dims,
// with a's and b's strides aligned to them from the right (0 where they broadcast).
struct BatchLayout {
  int ndim = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[3][kMaxDims] = {};  // a, b, out
  int64_t count = 1;

  BatchLayout(const Tensor& a, const Tensor& b, const Tensor& out) {
    ndim = out.dim() - 2;
    const Tensor* ts[3] = {&a, &b, &out};
    for (int d = 0; d < ndim; ++d) {
      sizes[d] = out.sizes()[d];
      count *= sizes[d];
      for (int t = 0; t < 3; ++t) {
        int td = d - (ndim - (ts[t]->dim() - 2));
        strides[t][d] = (td < 0 || ts[t]->sizes()[td] == 1) ? 0 : ts[t]->strides()[td];
      }
    }
  }

  void offsets(int64_t i, int64_t off[3]) const {
    off[0] = off[1] = off[2] = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      int64_t idx = i % sizes[d];
      i /= sizes[d];
      for (int t = 0; t < 3; ++t) off[t] += idx * strides[t][d];
    }
  }

  // True when b is the same matrix for every entry and a's batch dims continue its rows at
  // a uniform stride: the whole batch is then one (count * M, K) @ (K, N) product.
  bool folds_into_rows(int64_t m, int64_t a_row_stride) const {
    int64_t expected = m * a_row_stride;
    for (int d = ndim - 1; d >= 0; --d) {
      if (strides[1][d] != 0 && sizes[d] != 1) return false;
      if (sizes[d] == 1) continue;
      if (strides[0][d] != expected) return false;
      expected *= sizes[d];
    }
    return true;
  }
};

// dst = src elementwise (same sizes, any strides): a copy, or a conversion between floating
// dtypes.
void convert_into(const Tensor& dst, const Tensor& src) {
  if (dst.dtype() == src.dtype()) {
    dispatch_all(dst.dtype(), "matmul", [&](auto tag) {
      using T = decltype(tag);
      elementwise<T, T>(dst, {&src}, [](auto x) { return x; });
    });
    return;
  }
  dispatch_float(dst.dtype(), "matmul", [&](auto out_tag) {
    using O = decltype(out_tag);
    dispatch_float(src.dtype(), "matmul", [&](auto in_tag) {
      using I = decltype(in_tag);
      elementwise<O, I>(dst, {&src}, [](auto x) { return x; });
    });
  });
}

Tensor converted(const Tensor& t, DType dtype) {
  Tensor out = make_empty(t.sizes(), dtype, t.device());
  convert_into(out, t);
  return out;
}

// `t` when its matrices can be read in place (a unit stride in one of the last two dims), else
// a dense copy. An expanded matrix dim (stride 0 over several rows or columns, a broadcast
// vector) is copied too: folding a batch into rows would otherwise build a matrix with no unit
// stride at all, which the BF16 packer refuses (the op checker's expanded layout found it).
Tensor readable(const Tensor& t) {
  const int64_t rows = t.size(-2), cols = t.size(-1);
  const bool expanded = (t.stride(-1) == 0 && cols > 1) || (t.stride(-2) == 0 && rows > 1);
  if (!expanded && (t.stride(-1) == 1 || t.stride(-2) == 1 || rows == 1 || cols == 1)) return t;
  return converted(t, t.dtype());
}

// out = a @ b for float and double (Acc = T), and for bfloat16 operands into a float out.
// out: dense (batch..., M, N).
template <class T, class Acc = T>
void matmul_float(const Tensor& a_in, const Tensor& b_in, const Tensor& out) {
  const Tensor a = readable(a_in), b = readable(b_in);
  const int64_t m = out.size(-2), n = out.size(-1), k = a.size(-1);
  const T* pa = static_cast<const T*>(a.data_ptr());
  const T* pb = static_cast<const T*>(b.data_ptr());
  Acc* pc = static_cast<Acc*>(out.data_ptr());
  if (out.numel() == 0) return;
  if (k == 0) {  // an empty sum: zeros (a and b hold no elements, possibly no memory to offset)
    std::fill(pc, pc + out.numel(), Acc(0));
    return;
  }
  // a: (M, K), b: (K, N), c: (M, N) at the given element offsets.
  auto mat_a = [&](int64_t off) { return MatrixRef<const T>{pa + off, m, k, a.stride(-2), a.stride(-1)}; };
  auto mat_b = [&](int64_t off) { return MatrixRef<const T>{pb + off, k, n, b.stride(-2), b.stride(-1)}; };
  auto mat_c = [&](int64_t off) { return MatrixRef<Acc>{pc + off, m, n, n, 1}; };

  const BatchLayout batch(a, b, out);
  if (batch.count == 1) {
    gemm_into<T, Acc>(mat_a(0), mat_b(0), mat_c(0));
    return;
  }
  if (batch.folds_into_rows(m, a.stride(-2))) {  // (B, M, K) @ (K, N): one tall product
    const int64_t rows = batch.count * m;
    gemm_into<T, Acc>(MatrixRef<const T>{pa, rows, k, a.stride(-2), a.stride(-1)}, mat_b(0),
                      MatrixRef<Acc>{pc, rows, n, n, 1});
    return;
  }
  // Whole products per thread when they share out evenly (or there are many); otherwise one
  // product at a time, each split across the threads.
  const int nt = threads_for_macs(double(batch.count) * double(m) * double(n) * double(k));
  const bool per_entry = nt > 1 && (batch.count % nt == 0 || batch.count >= 4 * nt);
  if (per_entry) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t i = 0; i < batch.count; ++i) {
      int64_t off[3];
      batch.offsets(i, off);
      gemm_into<T, Acc>(mat_a(off[0]), mat_b(off[1]), mat_c(off[2]), false, 1);
    }
    return;
  }
  for (int64_t i = 0; i < batch.count; ++i) {
    int64_t off[3];
    batch.offsets(i, off);
    gemm_into<T, Acc>(mat_a(off[0]), mat_b(off[1]), mat_c(off[2]));
  }
}

// dst = src rounded to BF16 (BFloat16::from_float: nearest even, NaN kept quiet), dense, as a
// loop the compiler vectorizes: the generic conversion took 1.3 ns an element, and a BF16
// product's F32 result is as large as its output (38.6M elements for GPT-2's tied-head
// weight gradient: ~50 ms before, a few ms now).
void round_to_bf16(const float* src, BFloat16* dst, int64_t n) {
  const int nt = threads_for(n);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
  for (int64_t i = 0; i < n; ++i) dst[i].bits = BFloat16::from_float(src[i]);
}

// out = a @ b for integer dtypes: a plain loop that wraps on overflow, as PyTorch's does.
// Arithmetic is done in uint64_t, where wrapping is defined, and narrowed once.
template <class T>
void matmul_int(const Tensor& a, const Tensor& b, const Tensor& out) {
  const int64_t m = out.size(-2), n = out.size(-1), k = a.size(-1);
  const int64_t ars = a.stride(-2), acs = a.stride(-1), brs = b.stride(-2), bcs = b.stride(-1);
  const T* pa = static_cast<const T*>(a.data_ptr());
  const T* pb = static_cast<const T*>(b.data_ptr());
  T* pc = static_cast<T*>(out.data_ptr());
  auto wide = [](T v) { return static_cast<uint64_t>(static_cast<int64_t>(v)); };
  const BatchLayout batch(a, b, out);
  for (int64_t e = 0; e < batch.count; ++e) {
    int64_t off[3];
    batch.offsets(e, off);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        uint64_t acc = 0;
        for (int64_t p = 0; p < k; ++p) {
          acc += wide(pa[off[0] + i * ars + p * acs]) * wide(pb[off[1] + p * brs + j * bcs]);
        }
        pc[off[2] + i * n + j] = static_cast<T>(acc);
      }
    }
  }
}

void matmul_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  const Tensor &a = in[0], &b = in[1];
  // Products are written densely; a strided output (a caller's) gets a copy.
  const bool dense = out[0].is_contiguous();
  const Tensor c = dense ? out[0] : make_empty(out[0].sizes(), out[0].dtype(), out[0].device());
  if (c.numel() > 0) {
    switch (c.dtype()) {
      case DType::F32: matmul_float<float>(a, b, c); break;
      case DType::F64: matmul_float<double>(a, b, c); break;
      case DType::F16: {  // in F32, rounded once
        Tensor c32 = make_empty(c.sizes(), DType::F32, c.device());
        matmul_float<float>(converted(a, DType::F32), converted(b, DType::F32), c32);
        convert_into(c, c32);
        break;
      }
      case DType::BF16: {  // BF16 operands summed in F32 (kernels/cpu/gemm_bf16.h), rounded once
        Tensor c32 = make_empty(c.sizes(), DType::F32, c.device());
        auto bf16 = [](const Tensor& t) { return t.dtype() == DType::BF16 ? t : converted(t, DType::BF16); };
        matmul_float<BFloat16, float>(bf16(a), bf16(b), c32);
        round_to_bf16(static_cast<const float*>(c32.data_ptr()), static_cast<BFloat16*>(c.data_ptr()), c.numel());
        break;
      }
      case DType::I8: matmul_int<int8_t>(a, b, c); break;
      case DType::U8: matmul_int<uint8_t>(a, b, c); break;
      case DType::I32: matmul_int<int32_t>(a, b, c); break;
      case DType::I64: matmul_int<int64_t>(a, b, c); break;
      default: BRISK_FAIL("matmul: no CPU kernel for dtype ", c.dtype(), " (", a.str(), " @ ", b.str(), ")");
    }
  }
  if (!dense) convert_into(out[0], c);
}

// linear_gelu's GELU (Note [Linear with GELU] in engine/ops/linalg.cpp): y (dense, of the
// output's sizes and dtype) = gelu(h), written by linear's kernel where it has a pass of its
// own to share (done), else by the caller from h.
struct GeluOut {
  Tensor y{};
  bool tanh_form = false;
  bool done = false;
};

// h = src rounded to BF16 and y = gelu(h) (computed on h widened, as the Gelu op's BF16 kernel
// does: Note [BF16 through F32 blocks] in kernels/cpu/vmath.cpp), dense, n elements, threaded:
// linear's rounding pass and the Gelu op's pass in one read of src.
void round_gelu_bf16(const float* src, BFloat16* h, BFloat16* y, int64_t n, bool tanh_form) {
  constexpr int64_t kChunk = 1 << 14, kBlock = 256;
  const int64_t parts = (n + kChunk - 1) / kChunk;
  const int nt = threads_for(n);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
  for (int64_t part = 0; part < parts; ++part) {
    float hf[kBlock], yf[kBlock];
    const int64_t end = std::min(n, (part + 1) * kChunk);
    for (int64_t i = part * kChunk; i < end; i += kBlock) {
      const int64_t m = std::min(kBlock, end - i);
      for (int64_t j = 0; j < m; ++j) {
        h[i + j].bits = BFloat16::from_float(src[i + j]);
        hf[j] = float(h[i + j]);
      }
      vmath::gelu(hf, yf, m, tanh_form);
      for (int64_t j = 0; j < m; ++j) y[i + j].bits = BFloat16::from_float(yf[j]);
    }
  }
}

// c (rows, n) dense = x (rows, k) @ wt (k, n, the weight as the product's b), both read in
// place; each row of c starts at bias (n) when given and the product is accumulated onto it.
// A BF16 x takes a BF16 or an F32 wt (read as its BF16 rounding: Note [Mixed linear] in
// engine/ops/linalg.cpp).
template <class T, class W, class Acc>
void linear_rows(MatrixRef<const T> x, MatrixRef<const W> wt, const Acc* bias, Acc* c, int64_t rows, int64_t n,
                 int64_t k) {
  if (k == 0 && !bias) {  // an empty sum: zeros
    std::fill(c, c + rows * n, Acc(0));
    return;
  }
  if (bias) {
    const int nt = threads_for(rows * n);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (int64_t i = 0; i < rows; ++i) std::copy(bias, bias + n, c + i * n);
  }
  if (k == 0) return;
  const MatrixRef<Acc> out{c, rows, n, n, 1};
  if constexpr (std::is_same_v<T, BFloat16>) {
    gemm_bf16(x, wt, out, bias != nullptr);
  } else {
    static_assert(std::is_same_v<T, W> && std::is_same_v<T, Acc>);
    gemm<T>(x, wt, out, bias != nullptr);
  }
}

// x (*, k) as a (rows, k) matrix read in place: a 2-D x with a unit stride in one dim (a
// transposed gradient in backward) or a dense one; anything else is copied first.
template <class T>
MatrixRef<const T> rows_of(const Tensor& x, int64_t rows, int64_t k) {
  const T* p = static_cast<const T*>(x.data_ptr());
  if (x.dim() == 2) return {p, rows, k, x.stride(0), x.stride(1)};
  return {p, rows, k, k, 1};
}

// y (*, n) = x (*, k) @ w (n, k)^T + bias (n) (Note [Linear is an op] in engine/ops/linalg.cpp):
// the product is accumulated onto rows that start at the bias, so the bias costs no pass of
// its own. 16-bit floats are summed in F32 and rounded once, as matmul's, or not at all when
// the result is F32 (flag2). Mixed inputs (a 16-bit x with an F32 w and bias) read w at x's
// precision and round the bias the same way (Note [Mixed linear]).
// linear_gelu's shares it: gelu (not null) asks for gelu->y as well (see GeluOut).
void linear_into(std::span<const Tensor> in, const Tensor& result, bool in_out, GeluOut* gelu) {
  // in_out: w (k, n) rather than (n, k)
  const Tensor& x_in = in[0];
  const bool x_in_place = x_in.is_contiguous() || (x_in.dim() == 2 && readable(x_in).impl() == x_in.impl());
  const Tensor x = x_in_place ? x_in : converted(x_in, x_in.dtype());
  const Tensor w = readable(in[1]);  // a unit stride in one dim, read in place
  const bool dense = result.is_contiguous();
  const Tensor c = dense ? result : make_empty(result.sizes(), result.dtype(), result.device());
  const int64_t k = w.size(in_out ? 0 : 1), n = w.size(in_out ? 1 : 0), rows = n == 0 ? 0 : c.numel() / n;
  // The product's b (k, n): w itself, or w (n, k) read transposed.
  auto b_rs_of = [&](const Tensor& wt) { return in_out ? wt.stride(0) : wt.stride(1); };
  auto b_cs_of = [&](const Tensor& wt) { return in_out ? wt.stride(1) : wt.stride(0); };
  const int64_t b_rs = b_rs_of(w), b_cs = b_cs_of(w);
  const bool has_bias = in.size() == 3;
  auto f32 = [](const Tensor& t) { return t.dtype() == DType::F32 ? t : converted(t, DType::F32); };
  auto bias_ptr = [&](const Tensor& b) { return has_bias ? static_cast<const float*>(b.data_ptr()) : nullptr; };
  // 16-bit products sum into F32: c itself when it is F32, else a buffer rounded once.
  auto f32_out = [&] { return c.dtype() == DType::F32 ? c : make_empty(c.sizes(), DType::F32, c.device()); };
  if (c.numel() > 0) {
    switch (x.dtype()) {
      case DType::F32:
      case DType::F64:
        dispatch_float(x.dtype(), "linear", [&](auto tag) {
          using T = decltype(tag);
          if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
            const Tensor b = has_bias ? (in[2].is_contiguous() ? in[2] : converted(in[2], in[2].dtype())) : Tensor();
            linear_rows<T, T, T>(
                rows_of<T>(x, rows, k), MatrixRef<const T>{static_cast<const T*>(w.data_ptr()), k, n, b_rs, b_cs},
                has_bias ? static_cast<const T*>(b.data_ptr()) : nullptr, static_cast<T*>(c.data_ptr()), rows, n, k);
          }
        });
        break;
      case DType::F16: {  // in F32, rounded once
        const Tensor c32 = f32_out();
        const Tensor x32 = f32(x), w32 = f32(w), b32 = has_bias ? f32(in[2]) : Tensor();
        const int64_t rs = b_rs_of(w32), cs = b_cs_of(w32);
        linear_rows<float, float, float>(
            rows_of<float>(x32, rows, k),
            MatrixRef<const float>{static_cast<const float*>(w32.data_ptr()), k, n, rs, cs}, bias_ptr(b32),
            static_cast<float*>(c32.data_ptr()), rows, n, k);
        if (c32.impl() != c.impl()) convert_into(c, c32);
        break;
      }
      case DType::BF16: {  // BF16 operands summed in F32 (kernels/cpu/gemm_bf16.h), rounded once
        const Tensor c32 = f32_out();
        // The bias at BF16 precision, as autocast's cast of it would be, widened.
        const Tensor b32 =
            has_bias ? f32(in[2].dtype() == DType::BF16 ? in[2] : converted(in[2], DType::BF16)) : Tensor();
        const MatrixRef<const BFloat16> xm = rows_of<BFloat16>(x, rows, k);
        float* cp = static_cast<float*>(c32.data_ptr());
        if (w.dtype() == DType::F32) {
          linear_rows<BFloat16, float, float>(
              xm, MatrixRef<const float>{static_cast<const float*>(w.data_ptr()), k, n, b_rs, b_cs}, bias_ptr(b32), cp,
              rows, n, k);
        } else {
          linear_rows<BFloat16, BFloat16, float>(
              xm, MatrixRef<const BFloat16>{static_cast<const BFloat16*>(w.data_ptr()), k, n, b_rs, b_cs},
              bias_ptr(b32), cp, rows, n, k);
        }
        if (gelu && dense && c.dtype() == DType::BF16) {  // linear_gelu: h and y from one read of the sums
          round_gelu_bf16(cp, static_cast<BFloat16*>(c.data_ptr()), static_cast<BFloat16*>(gelu->y.data_ptr()),
                          c.numel(), gelu->tanh_form);
          gelu->done = true;
        } else if (c32.impl() != c.impl()) {
          round_to_bf16(cp, static_cast<BFloat16*>(c.data_ptr()), c.numel());
        }
        break;
      }
      default:
        BRISK_FAIL(gelu ? "linear_gelu" : "linear", ": no CPU kernel for dtype ", x.dtype(), " (", x.str(), ", weight ",
                   w.str(), ")");
    }
  }
  if (!dense) convert_into(result, c);
}

void linear_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  linear_into(in, out[0], attrs.flag, nullptr);
}

// (y = gelu(h), h) = linear_gelu(x, w[, bias]) (Note [Linear with GELU] in
// engine/ops/linalg.cpp): linear's kernel, whose BF16 rounding pass writes y as well; other
// dtypes run the Gelu op's CPU kernel on h right after the product.
void linear_gelu_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const bool dense = out[0].is_contiguous() && out[1].is_contiguous();
  auto dense_of = [&](const Tensor& t) { return dense ? t : make_empty(t.sizes(), t.dtype(), t.device()); };
  const Tensor y = dense_of(out[0]), h = dense_of(out[1]);
  GeluOut gelu{.y = y, .tanh_form = attrs.flag2};
  linear_into(in, h, attrs.flag, &gelu);
  if (!gelu.done) {
    const Tensor gin[1] = {h};
    Tensor gout[1] = {y};
    op_def(OpId::Gelu)
        .kernels[int(DeviceType::CPU)](std::span<const Tensor>(gin), std::span<Tensor>(gout),
                                       Attrs{.flag = attrs.flag2});
  }
  if (!dense) {
    convert_into(out[0], y);
    convert_into(out[1], h);
  }
}

}  // namespace

void register_linalg() {
  register_kernel(OpId::Matmul, DeviceType::CPU, matmul_kernel);
  register_kernel(OpId::Linear, DeviceType::CPU, linear_kernel);
  register_kernel(OpId::LinearGelu, DeviceType::CPU, linear_gelu_kernel);
}

}  // namespace brisk::kernels::cpu

#pragma GCC diagnostic pop
