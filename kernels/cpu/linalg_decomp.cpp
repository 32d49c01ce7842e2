// kernels/cpu/linalg_decomp.cpp: CPU kernels of the decompositions of brisk::linalg
// (linalg_solve, linalg_cholesky, linalg_slogdet, linalg_qr, linalg_eigh) on Eigen's dense
// solvers, F32 and F64, one matrix of the batch per iteration of an OpenMP loop. Inputs are
// read through their strides (transposed and expanded views included); outputs are the dense
// tensors dispatch allocates. A failure (singular, not positive-definite) is raised after the
// loop for the lowest failing batch element, so the message does not depend on the threads.
// Not here: shapes, backward formulas and the composites (engine/ops/linalg.cpp, Note [Linear
// algebra ops]); GEMM (kernels/cpu/gemm.cpp).
#include <cmath>
#include <limits>
#include <vector>

// Eigen 3.4's AVX-512 code trips GCC 12's -Wmaybe-uninitialized, and -Wuninitialized in the
// sanitizer build (_mm512_undefined_ps() in its transposes; false positives, as in gemm.cpp).
// They are reported where Eigen's templates are instantiated, in this file's functions, so the
// pragmas span the whole file.
#pragma GCC diagnostic push
#ifndef __clang__  // GCC warnings; clang has no such groups
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <Eigen/Dense>

#include "engine/op.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/register.h"

namespace brisk::kernels::cpu {

namespace {

template <class T>
using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
template <class T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using Vec = Eigen::Matrix<T, Eigen::Dynamic, 1>;

template <class F>
void dispatch_real(DType t, const char* op, F f) {
  if (t == DType::F32) return f(float{});
  if (t == DType::F64) return f(double{});
  BRISK_FAIL(op, ": no kernel for dtype ", t, " (F32 and F64 only)");
}

// Number of matrices of a (..., rows, cols) tensor, and where matrix b starts (in elements).
int64_t batch_count(const Tensor& t) {
  int64_t n = 1;
  for (int d = 0; d + 2 < t.dim(); ++d) n *= t.sizes()[d];
  return n;
}

int64_t batch_offset(const Tensor& t, int64_t b) {
  int64_t off = 0;
  for (int d = t.dim() - 3; d >= 0; --d) {
    off += (b % t.sizes()[d]) * t.strides()[d];
    b /= t.sizes()[d];
  }
  return off;
}

// Matrix b of t (any strides).
template <class T>
Mat<T> load_matrix(const Tensor& t, int64_t b) {
  const T* p = static_cast<const T*>(t.data_ptr()) + batch_offset(t, b);
  const int64_t rows = t.size(-2), cols = t.size(-1);
  const int64_t rs = t.strides()[t.dim() - 2], cs = t.strides()[t.dim() - 1];
  Mat<T> m(rows, cols);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) m(i, j) = p[i * rs + j * cs];
  }
  return m;
}

// Matrix b of a dense (..., rows, cols) output.
template <class T, class M>
void store_matrix(const M& m, const Tensor& out, int64_t b) {
  T* p = static_cast<T*>(out.data_ptr()) + b * out.size(-2) * out.size(-1);
  Eigen::Map<RowMat<T>>(p, out.size(-2), out.size(-1)) = m;
}

// Runs f(b) for the `count` matrices (n x n work each); f returns -1, or a code that
// fail(b, code) turns into the error.
template <class F, class Fail>
void for_each_matrix(int64_t count, int64_t n, F f, Fail fail) {
  std::vector<int64_t> status(size_t(count), -1);
  const int nt = threads_for(count * n * n * n, kParallelGrain * 4);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
  for (int64_t b = 0; b < count; ++b) status[size_t(b)] = f(b);
  for (int64_t b = 0; b < count; ++b) {
    if (status[size_t(b)] >= 0) fail(b, status[size_t(b)]);
  }
}

// The first exactly zero diagonal element of U in a packed LU, or -1 (as LAPACK's info - 1).
template <class M>
int64_t first_zero_pivot(const M& lu) {
  for (Eigen::Index k = 0; k < lu.rows(); ++k) {
    if (lu(k, k) == 0) return k;
  }
  return -1;
}

// a: (..., n, n), b: (..., n, k) -> x: (..., n, k) with a x = b (partial-pivoting LU)
void solve_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const Tensor &a = in[0], &b = in[1];
  const char* op = attrs.flag ? "linalg_inv" : "linalg_solve";
  dispatch_real(a.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    auto one = [&](int64_t i) -> int64_t {
      const Eigen::PartialPivLU<Mat<T>> lu(load_matrix<T>(a, i));
      const int64_t zero = first_zero_pivot(lu.matrixLU());
      if (zero < 0) store_matrix<T>(lu.solve(load_matrix<T>(b, i)), out[0], i);
      return zero;
    };
    for_each_matrix(batch_count(a), a.size(-1), one, [&](int64_t i, int64_t zero) {
      BRISK_FAIL(op, ": (batch element ", i, ") the diagonal element ", zero + 1, " of the LU factor is zero: A ",
                 a.sizes(), " is singular");
    });
  });
}

// a: (..., n, n) -> l: (..., n, n) lower (or its transpose when attrs.flag)
void cholesky_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const Tensor& a = in[0];
  const bool upper = attrs.flag;
  dispatch_real(a.dtype(), "linalg_cholesky", [&](auto tag) {
    using T = decltype(tag);
    auto one = [&](int64_t i) -> int64_t {
      Mat<T> m = load_matrix<T>(a, i);
      // Eigen's LLT reports only success; the routine under it says where it stopped.
      const Eigen::Index failed = Eigen::internal::llt_inplace<T, Eigen::Lower>::blocked(m);
      if (failed >= 0) return int64_t(failed);
      const Mat<T> l = m.template triangularView<Eigen::Lower>();
      if (upper) {
        store_matrix<T>(l.transpose(), out[0], i);
      } else {
        store_matrix<T>(l, out[0], i);
      }
      return -1;
    };
    for_each_matrix(batch_count(a), a.size(-1), one, [&](int64_t i, int64_t failed) {
      BRISK_FAIL("linalg_cholesky: (batch element ", i, ") A ", a.sizes(),
                 " is not positive-definite (the leading minor of order ", failed + 1, " is not positive-definite)");
    });
  });
}

// a: (..., n, n) -> sign (...), logabsdet (...) from the partial-pivoting LU
void slogdet_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  const Tensor& a = in[0];
  dispatch_real(a.dtype(), "linalg_slogdet", [&](auto tag) {
    using T = decltype(tag);
    T* sign = static_cast<T*>(out[0].data_ptr());
    T* logabs = static_cast<T*>(out[1].data_ptr());
    auto one = [&](int64_t i) -> int64_t {
      const Eigen::PartialPivLU<Mat<T>> lu(load_matrix<T>(a, i));
      const Mat<T>& u = lu.matrixLU();
      T s = T(lu.permutationP().determinant()), l = 0;
      for (Eigen::Index k = 0; k < u.rows(); ++k) {
        const T d = u(k, k);
        if (d == 0) {
          s = 0;
          l = -std::numeric_limits<T>::infinity();
          break;
        }
        if (d < 0) s = -s;
        l += std::log(std::abs(d));
      }
      sign[i] = s;
      logabs[i] = l;
      return -1;
    };
    for_each_matrix(batch_count(a), a.size(-1), one, [](int64_t, int64_t) {});
  });
}

// a: (..., m, n) -> q: (..., m, k), r: (..., k, n); k = min(m, n) (Householder)
void qr_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  const Tensor& a = in[0];
  const int64_t m = a.size(-2), n = a.size(-1), k = std::min(m, n);
  dispatch_real(a.dtype(), "linalg_qr", [&](auto tag) {
    using T = decltype(tag);
    auto one = [&](int64_t i) -> int64_t {
      const Eigen::HouseholderQR<Mat<T>> qr(load_matrix<T>(a, i));
      const Mat<T> q = qr.householderQ() * Mat<T>::Identity(m, k);
      const Mat<T> r = qr.matrixQR().topRows(k).template triangularView<Eigen::Upper>();
      store_matrix<T>(q, out[0], i);
      store_matrix<T>(r, out[1], i);
      return -1;
    };
    for_each_matrix(batch_count(a), std::max(m, n), one, [](int64_t, int64_t) {});
  });
}

// a: (..., n, n) symmetric (lower triangle read) -> w: (..., n) ascending, v: (..., n, n)
void eigh_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  const Tensor& a = in[0];
  const int64_t n = a.size(-1);
  dispatch_real(a.dtype(), "linalg_eigh", [&](auto tag) {
    using T = decltype(tag);
    auto one = [&](int64_t i) -> int64_t {
      const Eigen::SelfAdjointEigenSolver<Mat<T>> es(load_matrix<T>(a, i));
      if (es.info() != Eigen::Success) return 0;
      Eigen::Map<Vec<T>>(static_cast<T*>(out[0].data_ptr()) + i * n, n) = es.eigenvalues();
      store_matrix<T>(es.eigenvectors(), out[1], i);
      return -1;
    };
    for_each_matrix(batch_count(a), n, one, [&](int64_t i, int64_t) {
      BRISK_FAIL("linalg_eigh: (batch element ", i, ") the eigenvalue algorithm did not converge for A ", a.sizes(),
                 " (non-finite values?)");
    });
  });
}

}  // namespace

void register_linalg_decomp() {
  constexpr DeviceType cpu = DeviceType::CPU;
  register_kernel(OpId::LinalgSolve, cpu, solve_kernel);
  register_kernel(OpId::LinalgCholesky, cpu, cholesky_kernel);
  register_kernel(OpId::LinalgSlogdet, cpu, slogdet_kernel);
  register_kernel(OpId::LinalgQr, cpu, qr_kernel);
  register_kernel(OpId::LinalgEigh, cpu, eigh_kernel);
}

}  // namespace brisk::kernels::cpu

#pragma GCC diagnostic pop
