# Proves that wrong-kind calls with compile-time tags do not compile.
# Run as: cmake -DCXX=... -DSTD_FLAG=... -DINCLUDE_DIR=... -DCASES=... -P check_typed_kinds.cmake
# good.cpp must compile (so the failures below are about the calls, not
# a broken include path); every bad_*.cpp must fail, with a diagnostic that
# names the method it misuses (its "// expect:" line).
function(compile file out_rc out_log)
  execute_process(COMMAND "${CXX}" ${STD_FLAG} -fsyntax-only "-I${INCLUDE_DIR}" "${file}"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE log ERROR_VARIABLE log)
  set(${out_rc} "${rc}" PARENT_SCOPE)
  set(${out_log} "${log}" PARENT_SCOPE)
endfunction()

compile("${CASES}/good.cpp" rc log)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "good.cpp must compile but did not:\n${log}")
endif()

file(GLOB bad_cases "${CASES}/bad_*.cpp")
list(LENGTH bad_cases count)
if(count EQUAL 0)
  message(FATAL_ERROR "no bad_*.cpp cases found in ${CASES}")
endif()
foreach(bad IN LISTS bad_cases)
  get_filename_component(name "${bad}" NAME)
  file(STRINGS "${bad}" expect_line REGEX "^// expect: ")
  string(REPLACE "// expect: " "" expect "${expect_line}")
  compile("${bad}" rc log)
  if(rc EQUAL 0)
    message(FATAL_ERROR "${name} compiled, but a wrong-kind call must not")
  endif()
  if(NOT log MATCHES "no matching" OR NOT log MATCHES "${expect}")
    message(FATAL_ERROR "${name} failed to compile, but not with 'no matching ... ${expect}':\n${log}")
  endif()
  message(STATUS "${name}: rejected as expected")
endforeach()
message(STATUS "${count} wrong-kind calls rejected at compile time")
