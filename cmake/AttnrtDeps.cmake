# Every dependency comes from the distro (scripts/setup.sh installs them); nothing is vendored
# and nothing is downloaded at configure time.
if(ATTNRT_WITH_CUDA)
  find_package(CUDAToolkit REQUIRED)
endif()
find_package(Threads REQUIRED)
find_package(spdlog REQUIRED)
find_package(Boost 1.74 REQUIRED)

# moodycamel ConcurrentQueue is header-only; Debian puts it under /usr/include/concurrentqueue.
# A copy under .deps/concurrentqueue (git-ignored) serves machines without the package.
find_path(CONCURRENTQUEUE_INCLUDE_DIR concurrentqueue.h
  HINTS ${PROJECT_SOURCE_DIR}/.deps/concurrentqueue ${CONCURRENTQUEUE_ROOT}
  PATH_SUFFIXES concurrentqueue concurrentqueue/moodycamel moodycamel)
if(NOT CONCURRENTQUEUE_INCLUDE_DIR)
  message(FATAL_ERROR "moodycamel concurrentqueue.h not found: run scripts/setup.sh "
                      "(apt package libconcurrentqueue-dev) or set CONCURRENTQUEUE_ROOT")
endif()
add_library(attnrt_concurrentqueue INTERFACE)
target_include_directories(attnrt_concurrentqueue SYSTEM INTERFACE ${CONCURRENTQUEUE_INCLUDE_DIR})

if(ATTNRT_BUILD_TESTS)
  find_package(GTest REQUIRED)
  include(GoogleTest)
endif()
if(ATTNRT_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()
