// kernels/cuda/dynload.cpp: opening cuBLASLt, cuBLAS and cuDNN on first use and filling their
// tables (see Note [Lazy CUDA libraries] in kernels/cuda/dynload.h). The configured paths come
// from cmake/cuda.cmake as BRISK_CUBLASLT_PATH, BRISK_CUBLAS_PATH and BRISK_CUDNN_PATH (the
// files CMake found; empty when unknown). Host code only, compiled by the C++ compiler.
// Not here: the kernels that call through the tables (matmul.cu, conv.cu, norm.cu).
#include "kernels/cuda/dynload.h"

#include <dlfcn.h>

#include <iterator>
#include <sstream>

#include "engine/error.h"
#ifdef BRISK_WITH_CUDNN
#include "kernels/cuda/cudnn_handle.h"
#endif

#ifndef BRISK_CUBLASLT_PATH
#define BRISK_CUBLASLT_PATH ""
#endif
#ifndef BRISK_CUBLAS_PATH
#define BRISK_CUBLAS_PATH ""
#endif
#ifndef BRISK_CUDNN_PATH
#define BRISK_CUDNN_PATH ""
#endif

// The three list walkers (see the lists in dynload.h and cudnn_handle.h): a table's symbol
// names, filling a table from resolved addresses, counting a table's filled entries.
#define BRISK_DYNLOAD_NAME(name) #name,
#define BRISK_DYNLOAD_TYPED_NAME(name, type) #name,
#define BRISK_DYNLOAD_ASSIGN(name) api.name = reinterpret_cast<decltype(api.name)>(addresses[next++]);
#define BRISK_DYNLOAD_TYPED_ASSIGN(name, type) BRISK_DYNLOAD_ASSIGN(name)
#define BRISK_DYNLOAD_COUNT(name) resolved += api.name != nullptr;
#define BRISK_DYNLOAD_TYPED_COUNT(name, type) BRISK_DYNLOAD_COUNT(name)

namespace brisk::kernels::cuda {

namespace detail {

std::vector<std::string> library_candidates(const std::string& soname, const std::string& configured) {
  std::vector<std::string> out{soname};
  auto add = [&](const std::string& path) {
    if (path.empty()) return;
    for (const std::string& p : out) {
      if (p == path) return;
    }
    out.push_back(path);
  };
  const size_t slash = configured.rfind('/');
  if (slash != std::string::npos) add(configured.substr(0, slash + 1) + soname);
  add(configured);
  return out;
}

std::string open_library(const LibrarySpec& spec, std::span<void*> out) {
  BRISK_CHECK(out.size() == spec.symbols.size(), "open_library(", spec.name, "): ", spec.symbols.size(),
              " symbols but room for ", out.size());
  // dlerror() is per thread in glibc, so reading it right after the failed call is safe.
  std::ostringstream tried;
  void* handle = nullptr;
  std::string opened;
  for (const std::string& candidate : spec.candidates) {
    handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle) {
      opened = candidate;
      break;
    }
    // glibc's message names the file already ("<file>: cannot open shared object file: ...").
    const char* message = dlerror();
    const std::string why = message ? message : "unknown error";
    tried << "\n  " << (why.starts_with(candidate + ": ") ? "" : candidate + ": ") << why;
  }
  if (!handle) {
    BRISK_FAIL("CUDA: cannot load ", spec.name, ", which this operation needs on the GPU. Tried:", tried.str(), "\n",
               spec.remedy);
  }
  for (size_t i = 0; i < spec.symbols.size(); ++i) {
    dlerror();  // clear a stale message
    out[i] = dlsym(handle, spec.symbols[i]);
    if (!out[i]) {
      const char* why = dlerror();
      BRISK_FAIL("CUDA: ", spec.name, " loaded from ", opened, " has no function ", spec.symbols[i], " (",
                 why ? why : "null address", "): it is older than the headers brisk was built with. ", spec.remedy);
    }
  }
  return opened;  // the handle stays open: see Note [Lazy CUDA libraries]
}

}  // namespace detail

namespace {

// A table, the file it came from, and how many of its entries hold an address.
template <class Api>
struct Loaded {
  Api api;
  std::string path;
  int functions = 0;
  int resolved = 0;
};

// Each loader resolves its list's names in list order, then assigns them in the same order.
Loaded<CublasLtApi> load_cublas_lt() {
  static constexpr const char* kNames[] = {BRISK_CUBLASLT_FUNCTIONS(BRISK_DYNLOAD_NAME)};
  void* addresses[std::size(kNames)];
  const std::string major = std::to_string(CUBLAS_VER_MAJOR);
  const std::string remedy = "Install cuBLAS " + major +
                             " (part of the CUDA toolkit), or put the folder that holds libcublasLt.so." + major +
                             " on LD_LIBRARY_PATH.";
  Loaded<CublasLtApi> l;
  l.path = detail::open_library(
      {"cuBLASLt", detail::library_candidates("libcublasLt.so." + major, BRISK_CUBLASLT_PATH), kNames, remedy},
      addresses);
  CublasLtApi& api = l.api;
  size_t next = 0;
  int resolved = 0;
  BRISK_CUBLASLT_FUNCTIONS(BRISK_DYNLOAD_ASSIGN)
  BRISK_CUBLASLT_FUNCTIONS(BRISK_DYNLOAD_COUNT)
  l.functions = int(std::size(kNames));
  l.resolved = resolved;
  return l;
}

Loaded<CublasApi> load_cublas() {
  static constexpr const char* kNames[] = {BRISK_CUBLAS_FUNCTIONS(BRISK_DYNLOAD_NAME, BRISK_DYNLOAD_TYPED_NAME)};
  void* addresses[std::size(kNames)];
  const std::string major = std::to_string(CUBLAS_VER_MAJOR);
  const std::string remedy = "Install cuBLAS " + major +
                             " (part of the CUDA toolkit), or put the folder that holds libcublas.so." + major +
                             " on LD_LIBRARY_PATH.";
  Loaded<CublasApi> l;
  l.path = detail::open_library(
      {"cuBLAS", detail::library_candidates("libcublas.so." + major, BRISK_CUBLAS_PATH), kNames, remedy}, addresses);
  CublasApi& api = l.api;
  size_t next = 0;
  int resolved = 0;
  BRISK_CUBLAS_FUNCTIONS(BRISK_DYNLOAD_ASSIGN, BRISK_DYNLOAD_TYPED_ASSIGN)
  BRISK_CUBLAS_FUNCTIONS(BRISK_DYNLOAD_COUNT, BRISK_DYNLOAD_TYPED_COUNT)
  l.functions = int(std::size(kNames));
  l.resolved = resolved;
  return l;
}

#ifdef BRISK_WITH_CUDNN
Loaded<CudnnApi> load_cudnn() {
  static constexpr const char* kNames[] = {BRISK_CUDNN_FUNCTIONS(BRISK_DYNLOAD_NAME)};
  void* addresses[std::size(kNames)];
  const std::string major = std::to_string(CUDNN_MAJOR);
  const std::string remedy = "Install cuDNN " + major + " (libcudnn.so." + major + " and its libcudnn_*.so." + major +
                             " sub-libraries, side by side), or put its lib folder on LD_LIBRARY_PATH; to build "
                             "against a cuDNN elsewhere, reconfigure with CUDNN_ROOT=<its install folder>.";
  Loaded<CudnnApi> l;
  l.path = detail::open_library(
      {"cuDNN", detail::library_candidates("libcudnn.so." + major, BRISK_CUDNN_PATH), kNames, remedy}, addresses);
  CudnnApi& api = l.api;
  size_t next = 0;
  int resolved = 0;
  BRISK_CUDNN_FUNCTIONS(BRISK_DYNLOAD_ASSIGN)
  BRISK_CUDNN_FUNCTIONS(BRISK_DYNLOAD_COUNT)
  l.functions = int(std::size(kNames));
  l.resolved = resolved;
  return l;
}
#endif

// The tables, loaded once (function-local statics: thread-safe; a load that threw is retried
// by the next call).
const Loaded<CublasLtApi>& loaded_cublas_lt() {
  static const Loaded<CublasLtApi> lib = load_cublas_lt();
  return lib;
}

const Loaded<CublasApi>& loaded_cublas() {
  static const Loaded<CublasApi> lib = load_cublas();
  return lib;
}

#ifdef BRISK_WITH_CUDNN
const Loaded<CudnnApi>& loaded_cudnn() {
  static const Loaded<CudnnApi> lib = load_cudnn();
  return lib;
}
#endif

template <class Api>
LoadedLibrary report(const char* name, const Loaded<Api>& l) {
  return {name, l.path, l.functions, l.resolved};
}

}  // namespace

const CublasLtApi& cublas_lt() { return loaded_cublas_lt().api; }
const CublasApi& cublas() { return loaded_cublas().api; }
#ifdef BRISK_WITH_CUDNN
const CudnnApi& cudnn() { return loaded_cudnn().api; }
#endif

std::vector<LoadedLibrary> load_all() {
  std::vector<LoadedLibrary> out;
  out.push_back(report("cuBLASLt", loaded_cublas_lt()));
  out.push_back(report("cuBLAS", loaded_cublas()));
#ifdef BRISK_WITH_CUDNN
  out.push_back(report("cuDNN", loaded_cudnn()));
#endif
  return out;
}

}  // namespace brisk::kernels::cuda
