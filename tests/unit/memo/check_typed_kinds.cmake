# Proves that wrong-kind calls with compile-time tags do not compile.
# Run as: cmake -DCXX=... -DSTD_FLAG=... -DINCLUDE_DIR=... -DSOURCE=.../calls.cpp -P check_typed_kinds.cmake
# One compile of SOURCE: every call filed (by #line) under a bad_* name must
# produce its own error, and no error may be filed under good_calls.
execute_process(COMMAND "${CXX}" ${STD_FLAG} -fsyntax-only "-I${INCLUDE_DIR}" "${SOURCE}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE log ERROR_VARIABLE log)
if(rc EQUAL 0)
  message(FATAL_ERROR "calls.cpp compiled, but its wrong-kind calls must not")
endif()
if(log MATCHES "good_calls:[0-9]+(:[0-9]+)?: error")
  message(FATAL_ERROR "a well-typed call was rejected, so the rejections prove nothing:\n${log}")
endif()
file(STRINGS "${SOURCE}" cases REGEX "^#line [0-9]+ \"bad_[a-z_]+\"")
list(LENGTH cases count)
if(count EQUAL 0)
  message(FATAL_ERROR "no bad_* cases found in ${SOURCE}")
endif()
foreach(line IN LISTS cases)
  string(REGEX REPLACE "^#line [0-9]+ \"(bad_[a-z_]+)\"" "\\1" name "${line}")
  if(NOT log MATCHES "${name}:[0-9]+(:[0-9]+)?: error")
    message(FATAL_ERROR "${name}: the wrong-kind call compiled, but must not:\n${log}")
  endif()
  message(STATUS "${name}: rejected as expected")
endforeach()
message(STATUS "${count} wrong-kind calls rejected at compile time")
