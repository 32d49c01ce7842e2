# tests/consumer/check.cmake: installs the built brisk into a scratch prefix, extracts the
# marked C++ examples of README.md and docs/*.md, builds each as a separate project with
# find_package(brisk), runs it.
# In a CUDA build (CUDA_ROOT set: the toolkit's folder) it also shows Note [Backend libraries]
# (engine/backend.cpp): the CPU-only program has no CUDA library among its dependencies and builds and
# runs with the toolkit hidden (tests/consumer/no_cuda.sh, a private mount namespace); the same
# example with the `cuda` component registers the CUDA backend; pkg-config's brisk-cuda too.
# Inputs: BUILD (brisk build dir), SRC (source dir), WORK (scratch dir), CUDA_ROOT (optional),
# CXX (the build's C++ compiler: a sanitizer build's library links only with its own compiler).
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD} --prefix ${WORK}/prefix
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "install failed (${rc})")
endif()

# run_checked(what dir command...): runs it in dir; fails the test with its output otherwise.
function(run_checked what dir)
  execute_process(COMMAND ${ARGN} WORKING_DIRECTORY ${dir} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}\n${err}")
  endif()
  set(run_output "${out}" PARENT_SCOPE)
endfunction()

# consumer(name main.cpp cuda): configures and builds tests/consumer in WORK/name, runs both programs.
function(consumer name main cuda)
  set(dir ${WORK}/${name})
  file(MAKE_DIRECTORY ${dir})
  run_checked("${name}: configure" ${dir} ${CMAKE_COMMAND} -S ${SRC}/tests/consumer -B ${dir}/build -G Ninja
              -DCMAKE_PREFIX_PATH=${WORK}/prefix -DCONSUMER_MAIN=${main} -DCONSUMER_CUDA=${cuda}
              -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=${CXX})
  run_checked("${name}: build" ${dir} ${CMAKE_COMMAND} --build ${dir}/build)
  # Run in its own folder: the training example writes its files there.
  run_checked("the documented ${name}" ${dir} ${dir}/build/consumer)
  message("${name}: ${run_output}")
  run_checked("${name}: backends" ${dir} ${dir}/build/backends)
  message("${name}: ${run_output}")
endfunction()

# The marked C++ blocks live in README.md (the first example) and in the docs pages
# (docs/training.md, docs/kernel-research.md); each is looked for file by file, README.md first.
file(GLOB doc_pages ${SRC}/docs/*.md)
list(SORT doc_pages)
set(doc_files ${SRC}/README.md ${doc_pages})

# Each marked C++ block is built as its own find_package(brisk) program and run.
foreach(example readme-example readme-example-train readme-example-opcheck)
  set(found "")
  foreach(doc ${doc_files})
    file(READ ${doc} text)
    string(REGEX MATCH "<!-- ${example} -->[^`]*```cpp\n(.*)```[^`]*<!-- /${example} -->" found "${text}")
    if(found)
      break()
    endif()
  endforeach()
  if(NOT found)
    string(REPLACE ";" ", " looked "${doc_files}")
    message(FATAL_ERROR "no <!-- ${example} --> C++ block in README.md or docs/*.md (looked in ${looked})")
  endif()
  file(WRITE ${WORK}/${example}.cpp "${CMAKE_MATCH_1}")
  consumer(${example} ${WORK}/${example}.cpp OFF)
endforeach()

# The same first example built without CMake, by pkg-config's flags (cmake/brisk.pc.in, and
# cmake/brisk-cuda.pc.in in a CUDA build).
find_program(PKG_CONFIG pkg-config)
set(CXX_COMPILER ${CXX})
if(PKG_CONFIG AND CXX_COMPILER)
  file(GLOB pcdirs ${WORK}/prefix/lib*/pkgconfig)
  set(ENV{PKG_CONFIG_PATH} "${pcdirs}")
  set(packages brisk)
  if(CUDA_ROOT)
    list(APPEND packages brisk-cuda)
  endif()
  foreach(pc ${packages})
    execute_process(COMMAND ${PKG_CONFIG} --cflags --libs ${pc} RESULT_VARIABLE rc OUTPUT_VARIABLE flags
                    ERROR_VARIABLE err OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "pkg-config ${pc} failed: ${err}")
    endif()
    separate_arguments(flag_list UNIX_COMMAND "${flags}")
    set(expect "")
    if(pc STREQUAL "brisk-cuda")
      set(expect -DEXPECT_CUDA=1)
    endif()
    set(dir ${WORK}/pkgconfig-${pc})
    file(MAKE_DIRECTORY ${dir})
    run_checked("building the README example with `pkg-config ${pc}` (${flags})" ${dir}
                ${CXX_COMPILER} -O1 ${WORK}/readme-example.cpp ${flag_list} -o ${dir}/consumer)
    run_checked("building backends.cpp with `pkg-config ${pc}`" ${dir}
                ${CXX_COMPILER} -O1 ${expect} ${SRC}/tests/consumer/backends.cpp ${flag_list} -o ${dir}/backends)
    run_checked("the pkg-config (${pc}) build of the README example" ${dir} ${dir}/consumer)
    run_checked("the pkg-config (${pc}) build of backends.cpp" ${dir} ${dir}/backends)
    message("readme-example through pkg-config ${pc}: ${run_output}")
  endforeach()
else()
  message("pkg-config or a C++ compiler not found: the pkg-config build is skipped")
endif()

if(NOT CUDA_ROOT)
  return()
endif()
# A CPU-only program of a CUDA build: no CUDA library among what it loads ...
find_program(READELF readelf)
if(READELF)
  run_checked("readelf" ${WORK} ${READELF} -d ${WORK}/readme-example/build/consumer)
  if(run_output MATCHES "cuda|cublas|cudnn|nccl")
    message(FATAL_ERROR "the CPU-only consumer depends on a CUDA library:\n${run_output}")
  endif()
endif()
# ... and it builds and runs where the toolkit is not there at all.
execute_process(COMMAND bash ${SRC}/tests/consumer/no_cuda.sh ${CUDA_ROOT} ${SRC} ${WORK}/prefix
                        ${WORK}/readme-example.cpp ${WORK}/no-cuda
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 77)
  message("no-cuda: skipped (${out}${err})")
elseif(NOT rc EQUAL 0)
  message(FATAL_ERROR "the CPU-only consumer with the CUDA toolkit hidden failed (${rc}):\n${out}\n${err}")
else()
  message("${out}")
endif()
# The `cuda` component: the same example with the CUDA backend linked.
consumer(readme-example-cuda ${WORK}/readme-example.cpp ON)
