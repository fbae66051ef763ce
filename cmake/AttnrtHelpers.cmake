# attnrt_add_library(<target> <sources...>): a component library; includes are rooted at the repo
# (inside the build only: the installed package is one library, attnrt, with include/ alone).
# Static and position independent: the components' objects also make up libattnrt (static or
# shared); symbols are hidden unless marked ATTNRT_EXPORT, so a shared libattnrt exports the
# public API only.
function(attnrt_add_library target)
  if(NOT ARGN)  # a component whose first source has not landed yet
    add_library(${target} INTERFACE)
    target_include_directories(${target} INTERFACE $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>)
    return()
  endif()
  add_library(${target} STATIC ${ARGN})
  target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>)
  set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE ON
    CXX_VISIBILITY_PRESET hidden CUDA_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
endfunction()

# attnrt_needs_cuda(<file> <out>): TRUE when a source needs the CUDA toolkit: a .cu/.cuh file, or
# one that includes a CUDA header or a tree header that (transitively) does. A build without
# CUDA (ATTNRT_WITH_CUDA=OFF) leaves such files out, so a new CUDA-only file needs no list.
# A file that tests ATTNRT_WITH_CUDA (#if ATTNRT_WITH_CUDA, from <attnrt/version.h>) builds
# either way: its includes count as none.
function(_attnrt_includes file out)
  file(STRINGS ${file} lines REGEX "^[ \t]*#[ \t]*(include[ \t]*[<\"]|if.*ATTNRT_WITH_CUDA)")
  set(names "")
  foreach(line IN LISTS lines)
    if(line MATCHES "^[ \t]*#[ \t]*if")
      set(${out} "" PARENT_SCOPE)
      return()
    elseif(line MATCHES "include[ \t]*[<\"]([^>\"]+)[>\"]")
      list(APPEND names ${CMAKE_MATCH_1})
    endif()
  endforeach()
  set(${out} ${names} PARENT_SCOPE)
endfunction()
function(_attnrt_includes_cuda names cuda_headers out)
  foreach(name IN LISTS names)
    if(name MATCHES "^(cuda|cublas|cub/|cuda/|cute/|cutlass/|nvtx|curand|cufft|thrust/)"
       OR name IN_LIST cuda_headers)
      set(${out} TRUE PARENT_SCOPE)
      return()
    endif()
  endforeach()
  set(${out} FALSE PARENT_SCOPE)
endfunction()
function(_attnrt_cuda_headers out)
  get_property(known GLOBAL PROPERTY ATTNRT_CUDA_HEADERS SET)
  if(known)
    get_property(headers GLOBAL PROPERTY ATTNRT_CUDA_HEADERS)
    set(${out} ${headers} PARENT_SCOPE)
    return()
  endif()
  set(all "")
  foreach(dir api kvcache kernels runtime scheduler tests bench examples)
    file(GLOB_RECURSE found RELATIVE ${PROJECT_SOURCE_DIR} CONFIGURE_DEPENDS
         ${PROJECT_SOURCE_DIR}/${dir}/*.h ${PROJECT_SOURCE_DIR}/${dir}/*.cuh
         ${PROJECT_SOURCE_DIR}/${dir}/*.inc)
    list(APPEND all ${found})
  endforeach()
  set(cuda "")
  foreach(h IN LISTS all)
    _attnrt_includes(${PROJECT_SOURCE_DIR}/${h} "inc_${h}")
    if(h MATCHES "\\.cuh$")
      list(APPEND cuda ${h})
    endif()
  endforeach()
  set(changed TRUE)
  while(changed)  # to a fixed point: a header including a CUDA-only header is CUDA-only
    set(changed FALSE)
    foreach(h IN LISTS all)
      if(NOT h IN_LIST cuda)
        _attnrt_includes_cuda("${inc_${h}}" "${cuda}" needs)
        if(needs)
          list(APPEND cuda ${h})
          set(changed TRUE)
        endif()
      endif()
    endforeach()
  endwhile()
  set_property(GLOBAL PROPERTY ATTNRT_CUDA_HEADERS ${cuda})
  set(${out} ${cuda} PARENT_SCOPE)
endfunction()
function(attnrt_needs_cuda file out)
  if(file MATCHES "\\.(cu|cuh)$")
    set(${out} TRUE PARENT_SCOPE)
    return()
  endif()
  _attnrt_cuda_headers(cuda_headers)
  _attnrt_includes(${file} names)
  _attnrt_includes_cuda("${names}" "${cuda_headers}" needs)
  set(${out} ${needs} PARENT_SCOPE)
endfunction()

# attnrt_drop_cuda_sources(<list var> <what>): without CUDA, removes the files that need it from
# the list and says which (as "<what> not built without CUDA: ..."); with CUDA, does nothing.
function(attnrt_drop_cuda_sources var what)
  if(ATTNRT_WITH_CUDA)
    return()
  endif()
  set(kept "")
  set(dropped "")
  foreach(file IN LISTS ${var})
    get_filename_component(abs ${file} ABSOLUTE)
    attnrt_needs_cuda(${abs} needs)
    if(needs)
      get_filename_component(name ${file} NAME)
      list(APPEND dropped ${name})
    else()
      list(APPEND kept ${file})
    endif()
  endforeach()
  if(dropped)
    list(JOIN dropped ", " dropped_text)
    message(STATUS "attnrt: ${what} not built without CUDA: ${dropped_text}")
  endif()
  set(${var} ${kept} PARENT_SCOPE)
endfunction()

# The component library a test or benchmark file belongs to: tests/<component>/x_test.cc and
# bench/<component>_x_bench.cc link attnrt_<component>; anything else links the whole library
# with its internals (attnrt_facade).
function(attnrt_component_of file out)
  get_filename_component(dir ${file} DIRECTORY)
  get_filename_component(dir ${dir} NAME)
  get_filename_component(name ${file} NAME_WE)
  string(REGEX MATCH "^[a-z]+" prefix ${name})
  foreach(candidate ${dir} ${prefix})
    if(TARGET attnrt_${candidate})
      set(${out} attnrt_${candidate} PARENT_SCOPE)
      return()
    endif()
  endforeach()
  set(${out} attnrt_facade PARENT_SCOPE)
endfunction()

# attnrt_add_test(<file>): one GoogleTest binary per file, named after it, linking its component.
# GPU tests call GTEST_SKIP() with their reason where no device is present; ctest reports those
# as skipped (not passed) through SKIP_REGULAR_EXPRESSION. The regex must not end in "]": CMake 4.x
# writes it into a [[bracket argument]] that a trailing "]" breaks.
function(attnrt_add_test file)
  get_filename_component(name ${file} NAME_WE)
  attnrt_component_of(${file} component)
  add_executable(${name} ${file})
  target_link_libraries(${name} PRIVATE ${component} GTest::gtest GTest::gtest_main)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR})
  gtest_discover_tests(${name}
    DISCOVERY_MODE PRE_TEST
    DISCOVERY_TIMEOUT 60
    PROPERTIES SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\] ")
endfunction()

# attnrt_link(<target> <libs...>): PUBLIC links, INTERFACE while the target has no sources yet.
function(attnrt_link target)
  get_target_property(type ${target} TYPE)
  if(type STREQUAL "INTERFACE_LIBRARY")
    target_link_libraries(${target} INTERFACE ${ARGN})
  else()
    target_link_libraries(${target} PUBLIC ${ARGN})
  endif()
endfunction()
