# ATTNRT_SANITIZE=<list>: builds the host code (C, C++, and the host side of .cu files through
# nvcc's host compiler, so every object agrees) with these sanitizers: "address,undefined" or
# "thread" (scripts/sanitize.sh drives both; it adds float-cast-overflow, which GCC and clang
# leave out of "undefined"). Device code is not instrumented. No sanitizer recovers, so a report
# fails the test. Tests run with the options in sanitizer_env.cmake below.
set(ATTNRT_SANITIZE "" CACHE STRING
    "Sanitize host code: address,undefined | thread (also address, undefined, float-cast-overflow alone)")
# The former switch, kept so that existing build directories and notes keep working.
option(ATTNRT_TSAN "Same as ATTNRT_SANITIZE=thread" OFF)
if(ATTNRT_TSAN)
  if(ATTNRT_SANITIZE AND NOT ATTNRT_SANITIZE STREQUAL "thread")
    message(FATAL_ERROR "ATTNRT_TSAN=ON conflicts with ATTNRT_SANITIZE=${ATTNRT_SANITIZE}")
  endif()
  set(ATTNRT_SANITIZE thread)
endif()

if(ATTNRT_SANITIZE)
  string(REPLACE "," ";" _attnrt_sanitizers "${ATTNRT_SANITIZE}")
  foreach(s ${_attnrt_sanitizers})
    if(NOT s MATCHES "^(address|undefined|float-cast-overflow|thread)$")
      message(FATAL_ERROR "ATTNRT_SANITIZE: unknown sanitizer '${s}' "
                          "(address, undefined, float-cast-overflow, thread)")
    endif()
  endforeach()
  if("thread" IN_LIST _attnrt_sanitizers AND "address" IN_LIST _attnrt_sanitizers)
    message(FATAL_ERROR "ATTNRT_SANITIZE=${ATTNRT_SANITIZE}: thread and address do not combine")
  endif()
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    message(FATAL_ERROR "ATTNRT_SANITIZE needs GCC or Clang (have ${CMAKE_CXX_COMPILER_ID})")
  endif()

  # Frame pointers and line tables (-g1) give whole stacks with file:line at small compile cost.
  # One -fsanitize= per sanitizer: nvcc splits -Xcompiler values at commas.
  list(TRANSFORM _attnrt_sanitizers PREPEND -fsanitize= OUTPUT_VARIABLE _attnrt_san_flags)
  list(APPEND _attnrt_san_flags -fno-omit-frame-pointer -g1 -fno-sanitize-recover=all)
  string(REPLACE ";" "," _attnrt_san_xcompiler "${_attnrt_san_flags}")
  if("thread" IN_LIST _attnrt_sanitizers AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    # GCC warns at every std::atomic_thread_fence (moodycamel, Boost.Asio, the scheduler's sleep
    # handshake) that TSan does not model fences; tests/sanitizers/tsan.supp covers the queue.
    add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-Wno-tsan>)
  endif()
  foreach(flag ${_attnrt_san_flags})
    add_compile_options($<$<COMPILE_LANGUAGE:C,CXX>:${flag}>)
  endforeach()
  add_compile_options($<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=${_attnrt_san_xcompiler}>)
  # Every link (C, C++ and CUDA executables) goes through the host compiler driver.
  add_link_options(-fsanitize=${ATTNRT_SANITIZE})
  message(STATUS "attnrt: host code sanitized with ${ATTNRT_SANITIZE}")

  # Runtime options for every ctest run in this build directory: ctest includes this file before
  # it runs (or lists) any test, and the tests and the processes they start inherit the
  # environment. Options the caller already set come after ours and win. Reports go to files in
  # sanitizer-reports/ (one per process, named after the program and pid), so that a report in a
  # child process whose exit code a test does not check is still seen: scripts/sanitize.sh fails
  # when that folder is not empty after the run.
  set(ATTNRT_SANITIZER_REPORT_DIR ${CMAKE_BINARY_DIR}/sanitizer-reports)
  set(_attnrt_log "log_path=${ATTNRT_SANITIZER_REPORT_DIR}/report:log_exe_name=1")
  # protect_shadow_gap=0: the CUDA driver maps memory where ASan's shadow gap would be
  # (google/sanitizers#629); without it, an ASan binary that finds a GPU fails in cudaMalloc.
  set(_attnrt_asan "${_attnrt_log}:halt_on_error=1:detect_leaks=1:protect_shadow_gap=0")
  set(_attnrt_lsan "")
  set(_attnrt_ubsan "${_attnrt_log}:halt_on_error=1:print_stacktrace=1")
  set(_attnrt_tsan "${_attnrt_log}:halt_on_error=1:second_deadlock_stack=1")
  # Suppressions, one file per sanitizer, each entry with its reason: tests/sanitizers/*.supp.
  foreach(tool asan lsan ubsan tsan)
    set(_attnrt_file ${PROJECT_SOURCE_DIR}/tests/sanitizers/${tool}.supp)
    if(EXISTS ${_attnrt_file})
      string(APPEND _attnrt_${tool} ":suppressions=${_attnrt_file}")
    endif()
  endforeach()
  file(WRITE ${CMAKE_BINARY_DIR}/sanitizer_env.cmake
    "# Written by cmake/AttnrtSanitize.cmake (ATTNRT_SANITIZE=${ATTNRT_SANITIZE}).\n"
    "file(MAKE_DIRECTORY \"${ATTNRT_SANITIZER_REPORT_DIR}\")\n"
    "set(ENV{ASAN_OPTIONS} \"${_attnrt_asan}:\$ENV{ASAN_OPTIONS}\")\n"
    "set(ENV{LSAN_OPTIONS} \"${_attnrt_lsan}:\$ENV{LSAN_OPTIONS}\")\n"
    "set(ENV{UBSAN_OPTIONS} \"${_attnrt_ubsan}:\$ENV{UBSAN_OPTIONS}\")\n"
    "set(ENV{TSAN_OPTIONS} \"${_attnrt_tsan}:\$ENV{TSAN_OPTIONS}\")\n")
  set_property(DIRECTORY ${PROJECT_SOURCE_DIR} APPEND PROPERTY TEST_INCLUDE_FILES
               ${CMAKE_BINARY_DIR}/sanitizer_env.cmake)
endif()
