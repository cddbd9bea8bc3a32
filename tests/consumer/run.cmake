# Installs the build into a scratch prefix, configures and builds tests/consumer against it and
# runs it. -DBUILD_DIR, -DSOURCE_DIR, -DWORK_DIR, -DGENERATOR, and -DPREFIX_PATH (the build's own
# CMAKE_PREFIX_PATH: where it found its dependencies, e.g. a TBB outside the system's paths).
string(REPLACE ";" "\\;" PREFIX_PATH "${PREFIX_PATH}")
file(REMOVE_RECURSE ${WORK_DIR})
foreach(step
    "${CMAKE_COMMAND};--install;${BUILD_DIR};--prefix;${WORK_DIR}/prefix"
    "${CMAKE_COMMAND};-S;${SOURCE_DIR}/tests/consumer;-B;${WORK_DIR}/build;-G;${GENERATOR};-DCMAKE_BUILD_TYPE=Release;-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix\\;${PREFIX_PATH}"
    "${CMAKE_COMMAND};--build;${WORK_DIR}/build"
    "${WORK_DIR}/build/consumer")
  execute_process(COMMAND ${step} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install.consumer: '${step}' failed (${rc})")
  endif()
endforeach()
