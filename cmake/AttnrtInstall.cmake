# cmake --install: libattnrt (static, or shared with SOVERSION), the public headers under
# include/attnrt/, the CMake package (attnrtConfig.cmake, attnrtConfigVersion.cmake, the exported
# attnrt::attnrt target) and attnrt.pc for pkg-config.
include(CMakePackageConfigHelpers)

set(ATTNRT_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/attnrt)

install(TARGETS attnrt EXPORT attnrtTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} NAMELINK_COMPONENT Development
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/attnrt
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")
install(FILES ${ATTNRT_GENERATED_INCLUDE_DIR}/attnrt/version.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/attnrt)
install(EXPORT attnrtTargets NAMESPACE attnrt:: DESTINATION ${ATTNRT_CMAKE_DIR})

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/attnrtConfig.cmake.in
  ${PROJECT_BINARY_DIR}/attnrtConfig.cmake INSTALL_DESTINATION ${ATTNRT_CMAKE_DIR})
# 0.x: a new minor version may break callers, so only the same minor satisfies a request.
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(_attnrt_compatibility SameMinorVersion)
else()
  set(_attnrt_compatibility SameMajorVersion)
endif()
write_basic_package_version_file(${PROJECT_BINARY_DIR}/attnrtConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY ${_attnrt_compatibility})
install(FILES ${PROJECT_BINARY_DIR}/attnrtConfig.cmake ${PROJECT_BINARY_DIR}/attnrtConfigVersion.cmake
        DESTINATION ${ATTNRT_CMAKE_DIR})

# pkg-config. A static libattnrt needs its dependencies on the consumer's link line (Libs); a
# shared one carries them (Libs.private, for --static only).
set(_attnrt_pc_deps "-lstdc++ -lm -lpthread")
if(ATTNRT_WITH_CUDA)
  string(PREPEND _attnrt_pc_deps "-L${CUDAToolkit_LIBRARY_DIR} -lcublas -lcudart ")
endif()
if(BUILD_SHARED_LIBS)
  set(ATTNRT_PC_LIBS "-L\${libdir} -lattnrt")
  set(ATTNRT_PC_LIBS_PRIVATE "${_attnrt_pc_deps}")
  set(ATTNRT_PC_REQUIRES "")
  set(ATTNRT_PC_REQUIRES_PRIVATE "spdlog")
else()
  set(ATTNRT_PC_LIBS "-L\${libdir} -lattnrt ${_attnrt_pc_deps}")
  set(ATTNRT_PC_LIBS_PRIVATE "")
  set(ATTNRT_PC_REQUIRES "spdlog")
  set(ATTNRT_PC_REQUIRES_PRIVATE "")
endif()
# Relocatable: the prefix is found from the .pc file's own place (cmake --install --prefix).
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(ATTNRT_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH _attnrt_pc_up "/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/")
  string(REGEX REPLACE "/$" "" _attnrt_pc_up "${_attnrt_pc_up}")
  set(ATTNRT_PC_PREFIX "\${pcfiledir}/${_attnrt_pc_up}")
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/attnrt.pc.in ${PROJECT_BINARY_DIR}/attnrt.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/attnrt.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
