# cmake/dist.cmake: the libraries of dist/*.cpp above brisk: brisk_dist_core (brisk::dist_core:
# process groups' common parts, Gloo, DDP, ZeRO, pipelines; no MPI) and brisk_dist (brisk::dist:
# the MPI backend for CPU tensors, above the core). In a CUDA build with
# NCCL found (cmake/cuda.cmake: BRISK_NCCL_*), dist/nccl_group.cpp is the library
# brisk_dist_nccl (brisk::dist_nccl, the package's `nccl` component) above brisk_dist_core and
# brisk_cuda, linked to NCCL; it registers itself as dist's NCCL backend (Note [Backend
# libraries] in engine/backend.cpp), so a CPU-only program with brisk::dist needs no CUDA. Gloo
# (Debian's libgloo-dev), when found, is dist's backend for jobs started without mpirun
# (dist::init_from_env, the launcher brisk-run of dist/run/); without it those are clear errors.
# Not here: the tests' launches (tests/CMakeLists.txt, tests/dist/*.sh).

include(GNUInstallDirs)
# brisk_dist_core (brisk::dist_core): everything but the MPI and NCCL backends: process groups'
# common parts, Gloo, the rendezvous store, DDP, ZeRO, pipelines. No MPI: a program linked to it
# alone (started by brisk-run, init_from_env) needs no MPI to build or run.
file(GLOB BRISK_DIST_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/../dist/*.cpp)
list(REMOVE_ITEM BRISK_DIST_SOURCES ${CMAKE_CURRENT_LIST_DIR}/../dist/nccl_group.cpp
     ${CMAKE_CURRENT_LIST_DIR}/../dist/mpi_group.cpp)
add_library(brisk_dist_core ${BRISK_DIST_SOURCES})
add_library(brisk::dist_core ALIAS brisk_dist_core)
set_target_properties(brisk_dist_core PROPERTIES EXPORT_NAME dist_core)
target_link_libraries(brisk_dist_core PUBLIC brisk)
target_compile_definitions(brisk_dist_core PUBLIC BRISK_WITH_DIST)
target_compile_options(brisk_dist_core PRIVATE -Wall -Wextra -Wno-unused-parameter)
# brisk_dist (brisk::dist): the MPI backend above it (dist/mpi_group.cpp), which registers itself
# from a static initializer; `-u` keeps that object in every link (Note [Backend libraries]).
add_library(brisk_dist ${CMAKE_CURRENT_LIST_DIR}/../dist/mpi_group.cpp)
add_library(brisk::dist ALIAS brisk_dist)
set_target_properties(brisk_dist PROPERTIES EXPORT_NAME dist)
target_link_libraries(brisk_dist PUBLIC brisk_dist_core MPI::MPI_CXX)
target_link_options(brisk_dist INTERFACE "LINKER:-u,brisk_dist_mpi_linked")
target_compile_options(brisk_dist PRIVATE -Wall -Wextra -Wno-unused-parameter)
if(BRISK_NATIVE)
  target_compile_options(brisk_dist_core PRIVATE -march=native)
  target_compile_options(brisk_dist PRIVATE -march=native)
endif()
install(TARGETS brisk_dist_core brisk_dist EXPORT briskTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})

find_package(Gloo CONFIG QUIET)
set(BRISK_DIST_GLOO OFF)
if(Gloo_FOUND AND TARGET gloo)
  set(BRISK_DIST_GLOO ON)
  target_link_libraries(brisk_dist_core PRIVATE gloo)
  target_compile_definitions(brisk_dist_core PRIVATE BRISK_WITH_GLOO)
  message(STATUS "brisk: dist with Gloo (init_from_env, brisk-run)")
else()
  message(STATUS "brisk: dist without Gloo (install libgloo-dev for jobs started without mpirun)")
endif()

# brisk-run: the launcher (torchrun's pattern). A plain POSIX program: it needs neither brisk nor MPI
# (its agents' store, dist/store.cpp, uses only the header engine/error.h).
add_executable(brisk-run ${CMAKE_CURRENT_LIST_DIR}/../dist/run/brisk_run.cpp ${CMAKE_CURRENT_LIST_DIR}/../dist/store.cpp)
target_include_directories(brisk-run PRIVATE ${CMAKE_CURRENT_LIST_DIR}/..)
target_compile_options(brisk-run PRIVATE -Wall -Wextra -Wno-unused-parameter)
install(TARGETS brisk-run RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

set(BRISK_DIST_NCCL OFF)
set(BRISK_DIST_LIBS brisk::dist)  # what the project's distributed programs link
if(BRISK_CUDA AND BRISK_NCCL_FOUND)
  set(BRISK_DIST_NCCL ON)
  add_library(brisk_dist_nccl ${CMAKE_CURRENT_LIST_DIR}/../dist/nccl_group.cpp)
  add_library(brisk::dist_nccl ALIAS brisk_dist_nccl)
  set_target_properties(brisk_dist_nccl PROPERTIES EXPORT_NAME dist_nccl)
  target_include_directories(brisk_dist_nccl PRIVATE ${BRISK_NCCL_INCLUDE_DIR})
  target_link_libraries(brisk_dist_nccl PUBLIC brisk_dist_core brisk_cuda PRIVATE ${BRISK_NCCL_LIBRARY})
  target_compile_definitions(brisk_dist_nccl PUBLIC BRISK_WITH_NCCL)
  target_compile_options(brisk_dist_nccl PRIVATE -Wall -Wextra -Wno-unused-parameter)
  # Keeps the object that registers the backend in every link.
  target_link_options(brisk_dist_nccl INTERFACE "LINKER:-u,brisk_dist_nccl_linked")
  list(APPEND BRISK_DIST_LIBS brisk::dist_nccl)
  install(TARGETS brisk_dist_nccl EXPORT briskNcclTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  install(EXPORT briskNcclTargets NAMESPACE brisk:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/brisk)
  message(STATUS "brisk: dist with MPI, and NCCL as brisk::dist_nccl (${BRISK_NCCL_LIBRARY})")
else()
  message(STATUS "brisk: dist with MPI (no NCCL backend in this build)")
endif()
