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
