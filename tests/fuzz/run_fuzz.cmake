# Runs a libFuzzer target for a fixed time over a scratch copy of the seed
# corpus, so that the corpus in the repository is never modified.
#   cmake -DFUZZER=... -DSEEDS=... -DWORK=... -DSECONDS=... [-DKEEP=ON] [-DLOG=file] -P run_fuzz.cmake
# KEEP=ON keeps the corpus grown by earlier runs in WORK/corpus (the seeds
# are copied in again) for long runs (`tools/dev fuzz`); LOG sends
# libFuzzer's output to a file instead of the console.
# UBSan reports stop the run like ASan's: the fuzz preset compiles with
# recoverable UBSan checks, which would otherwise only print.
if(NOT KEEP)
  file(REMOVE_RECURSE "${WORK}")
endif()
file(REMOVE_RECURSE "${WORK}/artifacts")
file(MAKE_DIRECTORY "${WORK}/corpus" "${WORK}/artifacts")
file(GLOB seeds "${SEEDS}/*")
file(COPY ${seeds} DESTINATION "${WORK}/corpus")
set(output)
if(LOG)
  set(output OUTPUT_FILE "${LOG}" ERROR_FILE "${LOG}")
endif()
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env "UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1"
          "${FUZZER}" "${WORK}/corpus" -max_total_time=${SECONDS} -rss_limit_mb=2048 -timeout=10
          -print_final_stats=1 "-artifact_prefix=${WORK}/artifacts/"
  RESULT_VARIABLE rc ${output})
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "fuzzer failed (exit ${rc}); the crashing input is in ${WORK}/artifacts")
endif()
