# tests/consumer/check.cmake: installs the built brisk into a scratch prefix, extracts the
# README's C++ example, builds it as a separate project with find_package(brisk), runs it.
# Inputs: BUILD (brisk build dir), SRC (source dir), WORK (scratch dir).
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD} --prefix ${WORK}/prefix
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "install failed (${rc})")
endif()

file(READ ${SRC}/README.md readme)
string(REGEX MATCH "<!-- readme-example -->[^`]*```cpp\n(.*)```[^`]*<!-- /readme-example -->" found "${readme}")
if(NOT found)
  message(FATAL_ERROR "README.md has no <!-- readme-example --> C++ block")
endif()
file(WRITE ${WORK}/main.cpp "${CMAKE_MATCH_1}")

execute_process(COMMAND ${CMAKE_COMMAND} -S ${SRC}/tests/consumer -B ${WORK}/build -G Ninja
                        -DCMAKE_PREFIX_PATH=${WORK}/prefix -DCONSUMER_MAIN=${WORK}/main.cpp
                        -DCMAKE_BUILD_TYPE=Release
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configure failed:\n${out}\n${err}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK}/build RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "build failed:\n${out}\n${err}")
endif()
execute_process(COMMAND ${WORK}/build/consumer RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the README example failed (${rc}):\n${err}")
endif()
