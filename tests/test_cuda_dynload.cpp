// tests/test_cuda_dynload.cpp: cuBLASLt, cuBLAS and cuDNN opened on first use
// (kernels/cuda/dynload.h, Note [Lazy CUDA libraries]): a run that has used no GPU kernel maps
// none of them; every function of every table resolves (loaded from several threads at once);
// the order of the candidate files; the errors for a missing library and a missing function.
// Needs the libraries a CUDA build found, not a GPU. Not here: the kernels that call through
// the tables (tests/test_cuda.cpp, with a GPU).
#include <doctest/doctest.h>

#ifdef BRISK_WITH_CUDA

#include <cuda_runtime_api.h>

#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "engine/error.h"
#include "kernels/cuda/cuda.h"
#include "kernels/cuda/dynload.h"

namespace {

namespace cu = brisk::kernels::cuda;

// Whether a file whose path contains `name` is mapped into this process.
bool mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find(name) != std::string::npos) return true;
  }
  return false;
}

// The message of the brisk::Error that open_library throws for `spec` ("" when it does not).
std::string open_error(const cu::detail::LibrarySpec& spec) {
  std::vector<void*> out(spec.symbols.size());
  try {
    cu::detail::open_library(spec, out);
  } catch (const brisk::Error& e) {
    return e.what();
  }
  return "";
}

const std::string kCudart = "libcudart.so." + std::to_string(CUDART_VERSION / 1000);

}  // namespace

TEST_CASE("cuda dynload: the libraries are mapped on first use only, and every function resolves") {
  if (cu::device_count() == 0) {
    // Without a GPU no kernel has run, so nothing before this test opened them.
    CHECK_FALSE(mapped("libcublasLt.so"));
    CHECK_FALSE(mapped("libcublas.so"));
    CHECK_FALSE(mapped("libcudnn"));
  }
  // The first load, from several threads at once: one load, the same tables for all.
  std::vector<std::vector<cu::LoadedLibrary>> reports(4);
  std::vector<std::thread> threads;
  for (auto& r : reports) threads.emplace_back([&r] { r = cu::load_all(); });
  for (auto& t : threads) t.join();

  const std::vector<cu::LoadedLibrary>& libs = reports[0];
  std::vector<std::string> names;
  for (const cu::LoadedLibrary& lib : libs) {
    INFO(lib.name, " from ", lib.path);
    names.push_back(lib.name);
    CHECK_FALSE(lib.path.empty());
    CHECK(lib.functions > 0);
    CHECK(lib.resolved == lib.functions);
  }
#ifdef BRISK_WITH_CUDNN
  CHECK(names == std::vector<std::string>{"cuBLASLt", "cuBLAS", "cuDNN"});
  CHECK(mapped("libcudnn"));
#else
  CHECK(names == std::vector<std::string>{"cuBLASLt", "cuBLAS"});
#endif
  CHECK(mapped("libcublasLt.so"));
  CHECK(mapped("libcublas.so"));
  for (const auto& r : reports) {
    REQUIRE(r.size() == libs.size());
    for (size_t i = 0; i < r.size(); ++i) CHECK(r[i].path == libs[i].path);
  }
  CHECK(&cu::cublas_lt() == &cu::cublas_lt());
  CHECK(bool(cu::cublas().cublasGemmStridedBatchedEx));

  // A call through the table that needs no GPU lands in the right function.
  CHECK(std::string(cu::cublas_lt().cublasLtGetStatusName(CUBLAS_STATUS_NOT_SUPPORTED)) ==
        "CUBLAS_STATUS_NOT_SUPPORTED");
}

TEST_CASE("cuda dynload: candidates are the soname, then the soname beside the configured file, then that file") {
  using V = std::vector<std::string>;
  CHECK(cu::detail::library_candidates("libfoo.so.3", "/opt/foo/lib/libfoo.so") ==
        V{"libfoo.so.3", "/opt/foo/lib/libfoo.so.3", "/opt/foo/lib/libfoo.so"});
  CHECK(cu::detail::library_candidates("libfoo.so.3", "/opt/foo/lib/libfoo.so.3") ==
        V{"libfoo.so.3", "/opt/foo/lib/libfoo.so.3"});
  CHECK(cu::detail::library_candidates("libfoo.so.3", "") == V{"libfoo.so.3"});
}

TEST_CASE("cuda dynload: a missing library is an error naming it, every path tried, the reason and the remedy") {
  const char* const symbols[] = {"cuFakeCreate"};
  const cu::detail::LibrarySpec spec{
      "cuFake",
      {"libbrisk_no_such_library.so.1", "/nonexistent/lib/libbrisk_no_such_library.so.1"},
      symbols,
      "Install cuFake 1."};
  const std::string msg = open_error(spec);
  INFO(msg);
  CHECK(msg.find("cannot load cuFake") != std::string::npos);
  CHECK(msg.find("\n  libbrisk_no_such_library.so.1: ") != std::string::npos);
  CHECK(msg.find("\n  /nonexistent/lib/libbrisk_no_such_library.so.1: ") != std::string::npos);
  CHECK(msg.find("No such file") != std::string::npos);  // dlerror()'s reason
  CHECK(msg.find("Install cuFake 1.") != std::string::npos);
}

TEST_CASE("cuda dynload: the next candidate is tried when one does not load") {
  const char* const symbols[] = {"cudaGetDeviceCount", "cudaRuntimeGetVersion"};
  const cu::detail::LibrarySpec spec{"CUDA runtime", {"/nonexistent/lib/" + kCudart, kCudart}, symbols, ""};
  std::vector<void*> out(2);
  CHECK(cu::detail::open_library(spec, out) == kCudart);
  CHECK(out[0] != nullptr);
  CHECK(out[1] != nullptr);
}

TEST_CASE("cuda dynload: a missing function is an error naming the function and the file") {
  const char* const symbols[] = {"cudaGetDeviceCount", "brisk_no_such_function"};
  const std::string msg = open_error({"CUDA runtime", {kCudart}, symbols, "Install CUDA."});
  INFO(msg);
  CHECK(msg.find("CUDA runtime loaded from " + kCudart + " has no function brisk_no_such_function") !=
        std::string::npos);
  CHECK(msg.find("Install CUDA.") != std::string::npos);
}

#endif  // BRISK_WITH_CUDA
