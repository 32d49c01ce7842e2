# tests/consumer/check.cmake: installs the built brisk into a scratch prefix, extracts the
# README's C++ examples, builds each as a separate project with find_package(brisk), runs it.
# Inputs: BUILD (brisk build dir), SRC (source dir), WORK (scratch dir).
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD} --prefix ${WORK}/prefix
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "install failed (${rc})")
endif()

file(READ ${SRC}/README.md readme)

# Each marked C++ block of the README is built as its own find_package(brisk) program and run.
foreach(example readme-example readme-example-train)
  string(REGEX MATCH "<!-- ${example} -->[^`]*```cpp\n(.*)```[^`]*<!-- /${example} -->" found "${readme}")
  if(NOT found)
    message(FATAL_ERROR "README.md has no <!-- ${example} --> C++ block")
  endif()
  set(dir ${WORK}/${example})
  file(MAKE_DIRECTORY ${dir})
  file(WRITE ${dir}/main.cpp "${CMAKE_MATCH_1}")

  execute_process(COMMAND ${CMAKE_COMMAND} -S ${SRC}/tests/consumer -B ${dir}/build -G Ninja
                          -DCMAKE_PREFIX_PATH=${WORK}/prefix -DCONSUMER_MAIN=${dir}/main.cpp
                          -DCMAKE_BUILD_TYPE=Release
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${example}: configure failed:\n${out}\n${err}")
  endif()
  execute_process(COMMAND ${CMAKE_COMMAND} --build ${dir}/build RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${example}: build failed:\n${out}\n${err}")
  endif()
  # Run in its own folder: the training example writes its files there.
  execute_process(COMMAND ${dir}/build/consumer WORKING_DIRECTORY ${dir}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("${example}: ${out}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "the README's ${example} failed (${rc}):\n${out}\n${err}")
  endif()
endforeach()

# The same first example built without CMake, by pkg-config's flags (cmake/brisk.pc.in).
find_program(PKG_CONFIG pkg-config)
find_program(CXX_COMPILER NAMES c++ g++)
if(PKG_CONFIG AND CXX_COMPILER)
  file(GLOB pcdirs ${WORK}/prefix/lib*/pkgconfig)
  set(ENV{PKG_CONFIG_PATH} "${pcdirs}")
  execute_process(COMMAND ${PKG_CONFIG} --cflags --libs brisk RESULT_VARIABLE rc OUTPUT_VARIABLE flags
                  ERROR_VARIABLE err OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "pkg-config brisk failed: ${err}")
  endif()
  separate_arguments(flag_list UNIX_COMMAND "${flags}")
  set(dir ${WORK}/readme-example)
  execute_process(COMMAND ${CXX_COMPILER} -O1 ${dir}/main.cpp ${flag_list} -o ${dir}/pkgconfig_consumer
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "building the README example with pkg-config's flags (${flags}) failed:\n${err}")
  endif()
  execute_process(COMMAND ${dir}/pkgconfig_consumer RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "the pkg-config build of the README example failed (${rc}):\n${out}\n${err}")
  endif()
  message("readme-example through pkg-config: ${out}")
else()
  message("pkg-config or a C++ compiler not found: the pkg-config build is skipped")
endif()
