# cmake/cuda.cmake: the CUDA backend, the library brisk_cuda (alias brisk::cuda, the `cuda`
# component of the installed package), included when BRISK_CUDA is ON. It holds
# kernels/cuda/*.cu and *.cpp above brisk, links the CUDA runtime and the dynamic loader,
# registers itself with brisk::init() (Note [Backend libraries] in engine/backend.cpp; hence the `-u`
# link option), defines BRISK_WITH_CUDA (PUBLIC, so tests and examples that link it see it), so
# brisk itself has no CUDA dependency. It uses cuDNN's headers when cuDNN is
# found (and defines BRISK_WITH_CUDNN: conv2d and batch_norm kernels on CUDA; without it those
# two op families have no CUDA kernel and using them there is the dispatcher's "no kernel for
# device cuda" error), and locates NCCL for the issue that will use it (BRISK_NCCL_* variables;
# not linked yet). cuBLAS, cuBLASLt and cuDNN are not linked: kernels/cuda/dynload.cpp opens
# them on first use (Note [Lazy CUDA libraries]); the files found here are passed to it as
# BRISK_CUBLASLT_PATH / BRISK_CUBLAS_PATH / BRISK_CUDNN_PATH, the fallback after the soname.
# Hints: CUDNN_ROOT / NCCL_ROOT (cache or environment variables), the toolkit folder, and the
# Python wheels nvidia-cudnn-cu13 / nvidia-nccl-cu13 (site-packages/nvidia/{cudnn,nccl}).
# Not here: architectures (CMAKE_CUDA_ARCHITECTURES is set in the top-level CMakeLists.txt).

if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
endif()
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)

# C++20 for nvcc (CUDA follows CXX_STANDARD when CUDA_STANDARD is unset). CMake before 3.26 does
# not know nvcc's C++20 flag and fails at generate time, so it is told here; nvcc 13 with GCC 12
# accepts -std=c++20.
if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
endif()

file(GLOB BRISK_CUDA_SOURCES CONFIGURE_DEPENDS
  ${CMAKE_CURRENT_LIST_DIR}/../kernels/cuda/*.cu
  ${CMAKE_CURRENT_LIST_DIR}/../kernels/cuda/*.cpp)
add_library(brisk_cuda ${BRISK_CUDA_SOURCES})
add_library(brisk::cuda ALIAS brisk_cuda)
set_target_properties(brisk_cuda PROPERTIES EXPORT_NAME cuda
  CUDA_STANDARD 20 CUDA_STANDARD_REQUIRED ON CUDA_EXTENSIONS OFF)
target_compile_definitions(brisk_cuda PUBLIC BRISK_WITH_CUDA)
string(REPLACE ";" " " _brisk_cuda_archs "${CMAKE_CUDA_ARCHITECTURES}")
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/../kernels/cuda/env_report.cpp PROPERTIES
  COMPILE_DEFINITIONS "BRISK_CUDA_ARCHS=\"${_brisk_cuda_archs}\"")
# Keeps kernels/cuda/link.cpp, the object that registers the backend, in every link.
target_link_options(brisk_cuda INTERFACE "LINKER:-u,brisk_cuda_linked")
target_compile_options(brisk_cuda PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter -fno-math-errno>)
if(BRISK_NATIVE)
  target_compile_options(brisk_cuda PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-march=native>)
endif()
if(CMAKE_BUILD_TYPE STREQUAL "Release")
  target_compile_options(brisk_cuda PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-O3>)
endif()
# cuBLAS(Lt) are opened with dlopen on first use (kernels/cuda/dynload.cpp): linking them would
# map ~150 MB into every process at start, GPU or not. Their headers come with the toolkit's
# include folder, which CUDA::cudart carries.
target_link_libraries(brisk_cuda PUBLIC brisk CUDA::cudart ${CMAKE_DL_LIBS})
set(_brisk_dynload ${CMAKE_CURRENT_LIST_DIR}/../kernels/cuda/dynload.cpp)
foreach(_lib cublasLt cublas)
  string(TOUPPER ${_lib} _upper)
  if(CUDA_${_lib}_LIBRARY)
    set_property(SOURCE ${_brisk_dynload} APPEND PROPERTY COMPILE_DEFINITIONS
      BRISK_${_upper}_PATH="${CUDA_${_lib}_LIBRARY}")
  else()
    message(STATUS "brisk: ${_lib} not found in the toolkit: matmul on CUDA will look for it at run time only")
  endif()
endforeach()
# --expt-relaxed-constexpr: std::numeric_limits and friends in device code.
# 20012: Eigen-style "__host__ __device__ annotation ignored" noise from system headers.
target_compile_options(brisk_cuda PRIVATE
  $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -Xcudafe=--diag_suppress=20012>
  $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<CONFIG:Release>>:-O3>)

message(STATUS "brisk: CUDA ${CUDAToolkit_VERSION} at ${CUDAToolkit_BIN_DIR}, architectures ${CMAKE_CUDA_ARCHITECTURES}")

# ---- cuDNN (headers here, the library opened on first use) and NCCL (located now, linked by
# the issue that uses it).
set(_brisk_py_nvidia "")
find_program(_brisk_python3 NAMES python3)
if(_brisk_python3)
  execute_process(
    COMMAND ${_brisk_python3} -c "import site,os;p=[os.path.join(d,'nvidia') for d in site.getsitepackages()+[site.getusersitepackages()]];print(';'.join(x for x in p if os.path.isdir(x)))"
    OUTPUT_VARIABLE _brisk_py_nvidia OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _brisk_py_rc)
  if(NOT _brisk_py_rc EQUAL 0)
    set(_brisk_py_nvidia "")
  endif()
endif()

# brisk_find_cuda_lib(NAME HEADER LIBNAMES...): sets BRISK_<NAME>_INCLUDE_DIR / _LIBRARY / _FOUND.
function(brisk_find_cuda_lib name header)
  string(TOLOWER ${name} lower)
  set(roots "")
  if(DEFINED ${name}_ROOT)
    list(APPEND roots ${${name}_ROOT})
  endif()
  if(DEFINED ENV{${name}_ROOT})
    list(APPEND roots $ENV{${name}_ROOT})
  endif()
  list(APPEND roots ${CUDAToolkit_LIBRARY_ROOT} ${CUDAToolkit_TARGET_DIR})
  foreach(p ${_brisk_py_nvidia})
    list(APPEND roots ${p}/${lower} ${p}/cu13 ${p})
  endforeach()
  find_path(BRISK_${name}_INCLUDE_DIR ${header} HINTS ${roots} ${CUDAToolkit_INCLUDE_DIRS}
    PATH_SUFFIXES include NO_DEFAULT_PATH)
  find_library(BRISK_${name}_LIBRARY NAMES ${ARGN} HINTS ${roots} ${CUDAToolkit_LIBRARY_DIR}
    PATH_SUFFIXES lib lib64 NO_DEFAULT_PATH)
  if(BRISK_${name}_INCLUDE_DIR AND BRISK_${name}_LIBRARY)
    set(BRISK_${name}_FOUND ON PARENT_SCOPE)
    message(STATUS "brisk: ${name} found: ${BRISK_${name}_LIBRARY} (headers ${BRISK_${name}_INCLUDE_DIR})")
  else()
    set(BRISK_${name}_FOUND OFF PARENT_SCOPE)
    message(STATUS "brisk: ${name} not found (set ${name}_ROOT to its install folder); searched ${roots}")
  endif()
endfunction()

brisk_find_cuda_lib(CUDNN cudnn.h cudnn libcudnn.so.9)
brisk_find_cuda_lib(NCCL nccl.h nccl libnccl.so.2)

# cuDNN: only the headers are used at build time (the include folder stays PRIVATE: cudnn.h is
# seen by brisk's own sources only); the library is opened on first use, by its soname and
# then by the file found here, so neither brisk's link interface nor a find_package(brisk)
# consumer needs it.
if(BRISK_CUDNN_FOUND)
  target_include_directories(brisk_cuda PRIVATE ${BRISK_CUDNN_INCLUDE_DIR})
  set_property(SOURCE ${_brisk_dynload} APPEND PROPERTY COMPILE_DEFINITIONS
    BRISK_CUDNN_PATH="${BRISK_CUDNN_LIBRARY}")
  target_compile_definitions(brisk_cuda PUBLIC BRISK_WITH_CUDNN)
  set(BRISK_WITH_CUDNN ON)
  message(STATUS "brisk: conv2d and batch_norm on CUDA through cuDNN (opened on first use)")
else()
  set(BRISK_WITH_CUDNN OFF)
  message(STATUS "brisk: no cuDNN: conv2d and batch_norm have no CUDA kernel in this build")
endif()
