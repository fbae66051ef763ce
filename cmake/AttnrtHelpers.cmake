# attnrt_add_library(<target> <sources...>): a component library; includes are rooted at the repo.
function(attnrt_add_library target)
  if(NOT ARGN)  # a component whose first source has not landed yet
    add_library(${target} INTERFACE)
    target_include_directories(${target} INTERFACE ${PROJECT_SOURCE_DIR})
    return()
  endif()
  add_library(${target} STATIC ${ARGN})
  target_include_directories(${target} PUBLIC ${PROJECT_SOURCE_DIR})
  set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE ON)
endfunction()

# The component library a test or benchmark file belongs to: tests/<component>/x_test.cc and
# bench/<component>_x_bench.cc link attnrt_<component>; anything else links the whole attnrt.
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
  set(${out} attnrt PARENT_SCOPE)
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
