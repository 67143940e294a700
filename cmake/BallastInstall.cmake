# The CMake package engines consume: find_package(ballast) -> ballast::ballast.
include(CMakePackageConfigHelpers)

install(TARGETS ballast EXPORT ballastTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY include/ballast DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT ballastTargets NAMESPACE ballast:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ballast)
set(BALLAST_INSTALL_CONFORMANCE "${CMAKE_INSTALL_BINDIR}/ballast-conformance")
configure_package_config_file(cmake/ballastConfig.cmake.in
  "${CMAKE_BINARY_DIR}/ballastConfig.cmake"
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ballast
  PATH_VARS BALLAST_INSTALL_PLUGIN_DIR BALLAST_INSTALL_CONFORMANCE)
write_basic_package_version_file("${CMAKE_BINARY_DIR}/ballastConfigVersion.cmake"
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES "${CMAKE_BINARY_DIR}/ballastConfig.cmake" "${CMAKE_BINARY_DIR}/ballastConfigVersion.cmake"
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ballast)
