# cmake/dist.cmake: the library brisk_dist (alias brisk::dist) of dist/*.cpp, above brisk:
# MPI process groups for CPU tensors, DistributedDataParallel, ZeRO-1. In a CUDA build with
# NCCL found (cmake/cuda.cmake: BRISK_NCCL_*), dist/nccl_group.cpp joins it, linked to NCCL
# (only programs that use dist pay for it) and BRISK_WITH_NCCL is defined.
# Not here: the tests' mpirun launch (tests/CMakeLists.txt, tests/dist/run.sh).

include(GNUInstallDirs)
file(GLOB BRISK_DIST_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/../dist/*.cpp)
list(REMOVE_ITEM BRISK_DIST_SOURCES ${CMAKE_CURRENT_LIST_DIR}/../dist/nccl_group.cpp)
add_library(brisk_dist ${BRISK_DIST_SOURCES})
add_library(brisk::dist ALIAS brisk_dist)
set_target_properties(brisk_dist PROPERTIES EXPORT_NAME dist)
target_link_libraries(brisk_dist PUBLIC brisk MPI::MPI_CXX)
target_compile_definitions(brisk_dist PUBLIC BRISK_WITH_DIST)
target_compile_options(brisk_dist PRIVATE -Wall -Wextra -Wno-unused-parameter)
if(BRISK_NATIVE)
  target_compile_options(brisk_dist PRIVATE -march=native)
endif()
if(BRISK_CUDA AND BRISK_NCCL_FOUND AND EXISTS ${CMAKE_CURRENT_LIST_DIR}/../dist/nccl_group.cpp)
  target_sources(brisk_dist PRIVATE ${CMAKE_CURRENT_LIST_DIR}/../dist/nccl_group.cpp)
  target_include_directories(brisk_dist PRIVATE ${BRISK_NCCL_INCLUDE_DIR})
  target_link_libraries(brisk_dist PRIVATE ${BRISK_NCCL_LIBRARY})
  target_compile_definitions(brisk_dist PRIVATE BRISK_WITH_NCCL)
  message(STATUS "brisk: dist with MPI and NCCL (${BRISK_NCCL_LIBRARY})")
else()
  message(STATUS "brisk: dist with MPI (no NCCL backend in this build)")
endif()
install(TARGETS brisk_dist EXPORT briskTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
