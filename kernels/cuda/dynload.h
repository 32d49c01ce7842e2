// kernels/cuda/dynload.h: cuBLASLt, cuBLAS and cuDNN opened on first use (dlopen/dlsym) as
// tables of function pointers typed from the libraries' own headers, so that a process which
// never runs a GEMM or a cuDNN kernel never maps them (Note [Lazy CUDA libraries]). Kernels call
// cublas_lt().cublasLtMatmul(...), cublas().cublasCreate(...), cudnn().cudnnCreate(...); a
// library or function that cannot be loaded is a brisk::Error saying what was tried and what to
// do. Not here: the cuDNN table's list (kernels/cuda/cudnn_handle.h: only brisk's own sources
// see cudnn.h), the CUDA runtime (linked normally: small, and needed to count devices).
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>

#include <span>
#include <string>
#include <vector>

namespace brisk::kernels::cuda {

// Note [Lazy CUDA libraries]
// Loading libcublasLt alone adds ~150 MB of resident memory (its relocations and ~6,500 static
// constructors run at load). Linked normally (DT_NEEDED), every program linked with a CUDA
// build of brisk paid it at start, GPU or not: a CPU-only training run (bench_train mlp) peaked
// at 248 MB RSS against 96 MB in a CPU-only build, and 98 MB with lazy loading. So the three
// big libraries are opened the first time a kernel needs them, as TensorFlow does for cuBLAS
// and cuDNN: one table of function pointers per library, filled once (a function-local static:
// thread-safe, and retried on the next call when loading threw). Each library is looked for by
// its soname first (libcublasLt.so.<CUBLAS_VER_MAJOR>, libcudnn.so.<CUDNN_MAJOR>: the ABI the
// headers describe; LD_LIBRARY_PATH, RUNPATH and the ldconfig cache apply), then by the same
// file name in the folder CMake found the library in, then by the exact file CMake found (so a
// build against a toolkit outside the loader's path runs without LD_LIBRARY_PATH). Handles are
// never closed (kernels cache handles and plans that point into the libraries until exit).
// Cost: nothing per call beyond an indirect call and the check of the accessor's static guard
// (one load, predicted); the first kernel that needs a library pays its dlopen (~60 ms for
// cuBLASLt here, what every process paid at start before). A missing library becomes an error
// at the first matmul or conv on a GPU, instead of a program that cannot start.
// Each table comes from one X-macro list, as the op list (engine/ops.def): the member's name,
// its type decltype(&::name) and the symbol looked up are one token, so a signature cannot
// drift from the header and no name can be paired with the wrong pointer. A direct call of a
// function (one missing from a list) is a link error, since brisk no longer links these
// libraries, never a silent eager load.

// cuBLASLt: the GEMM path of kernels/cuda/matmul.cu, and status names for BRISK_CUBLAS_CHECK.
#define BRISK_CUBLASLT_FUNCTIONS(X)       \
  X(cublasLtCreate)                       \
  X(cublasLtMatmul)                       \
  X(cublasLtMatmulAlgoGetHeuristic)       \
  X(cublasLtMatmulDescCreate)             \
  X(cublasLtMatmulDescDestroy)            \
  X(cublasLtMatmulDescSetAttribute)       \
  X(cublasLtMatmulPreferenceCreate)       \
  X(cublasLtMatmulPreferenceDestroy)      \
  X(cublasLtMatmulPreferenceSetAttribute) \
  X(cublasLtMatrixLayoutCreate)           \
  X(cublasLtMatrixLayoutDestroy)          \
  X(cublasLtMatrixLayoutSetAttribute)     \
  X(cublasLtGetStatusName)                \
  X(cublasLtGetStatusString)              \
  X(cublasLtGetVersion)

// cuBLAS: the fallback GEMM of kernels/cuda/matmul.cu. The exported names of cublasCreate and
// cublasSetStream carry _v2 (cublas_v2.h maps the plain names onto them, so call sites keep the
// plain names). X_TYPED(name, type): a function C++ sees overloaded (see below).
#define BRISK_CUBLAS_FUNCTIONS(X, X_TYPED) \
  X(cublasCreate_v2)                       \
  X(cublasSetStream_v2)                    \
  X_TYPED(cublasGemmStridedBatchedEx, CublasGemmStridedBatchedExFn)

// cublas_api.h adds a C++ inline overload of cublasGemmStridedBatchedEx (compute type given as
// a cudaDataType), so &::cublasGemmStridedBatchedEx has no single type: the exported
// function's type is written out, and the static_assert picks that overload from the header
// (it fails to compile if the declaration changes).
using CublasGemmStridedBatchedExFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                                        int, const void*, const void*, cudaDataType, int, long long,
                                                        const void*, cudaDataType, int, long long, const void*, void*,
                                                        cudaDataType, int, long long, int, cublasComputeType_t,
                                                        cublasGemmAlgo_t);
static_assert(sizeof(static_cast<CublasGemmStridedBatchedExFn>(&::cublasGemmStridedBatchedEx)) > 0);

#define BRISK_DYNLOAD_MEMBER(name) decltype(&::name) name = nullptr;
#define BRISK_DYNLOAD_TYPED_MEMBER(name, type) type name = nullptr;

struct CublasLtApi {
  BRISK_CUBLASLT_FUNCTIONS(BRISK_DYNLOAD_MEMBER)
};

struct CublasApi {
  BRISK_CUBLAS_FUNCTIONS(BRISK_DYNLOAD_MEMBER, BRISK_DYNLOAD_TYPED_MEMBER)
};

// Defined in kernels/cuda/cudnn_handle.h (its types need cudnn.h).
struct CudnnApi;

// The tables, loaded on first call (thread-safe). Throws brisk::Error naming the library, the
// paths tried, the loader's message and the remedy when the library or a function is missing.
const CublasLtApi& cublas_lt();
const CublasApi& cublas();
#ifdef BRISK_WITH_CUDNN
const CudnnApi& cudnn();
#endif

// One library as load_all() found it.
struct LoadedLibrary {
  std::string name;   // "cuBLASLt", "cuBLAS", "cuDNN"
  std::string path;   // the candidate that opened (a soname or an absolute path)
  int functions = 0;  // entries in its table
  int resolved = 0;   // entries holding an address (== functions once loaded)
};

// Loads every table of this build (cuBLASLt, cuBLAS, and cuDNN when built with it) and reports
// them; throws as the accessors do. For tests and diagnostics: kernels use the accessors.
std::vector<LoadedLibrary> load_all();

namespace detail {

// What it takes to open one library.
struct LibrarySpec {
  const char* name;                      // for messages: "cuBLASLt"
  std::vector<std::string> candidates;   // tried in order with dlopen(RTLD_NOW | RTLD_LOCAL)
  std::span<const char* const> symbols;  // resolved with dlsym, in this order
  std::string remedy;                    // what the user can do when it is not found
};

// Opens the first candidate that loads, resolves every symbol into out (out.size() ==
// symbols.size()) and returns that candidate; the handle stays open for the process's life.
// Throws brisk::Error naming the library, every candidate with dlerror()'s message, and the
// remedy; or, for a missing function, the function, the file and dlerror()'s message.
std::string open_library(const LibrarySpec& spec, std::span<void*> out);

// The candidates for a library: `soname`, then `soname` in the folder of `configured` (the
// file CMake found, may be empty), then `configured` itself; duplicates dropped.
std::vector<std::string> library_candidates(const std::string& soname, const std::string& configured);

}  // namespace detail

}  // namespace brisk::kernels::cuda
