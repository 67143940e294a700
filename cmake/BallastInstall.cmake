# The CMake package engines consume: find_package(ballast) -> ballast::ballast.
include(CMakePackageConfigHelpers)

install(TARGETS ballast ballast_plugin_sdk EXPORT ballastTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY include/ballast DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} PATTERN plugin_abi.hpp EXCLUDE PATTERN plugin_api.h EXCLUDE)
install(EXPORT ballastTargets NAMESPACE ballast:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ballast)
# The plugin SDK, its own install component (plugin_sdk): the plugin ABI
# (plugin_api.h, C), its C++ adapter (plugin_abi.hpp) and ballast_add_plugin(). ballast::plugin_sdk is in the
# export set either way; find_package(ballast COMPONENTS plugin_sdk) finds
# the component only where its header was installed.
install(FILES include/ballast/plugin_abi.hpp include/ballast/plugin_api.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ballast COMPONENT plugin_sdk)
install(FILES cmake/ballastPluginSdk.cmake DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ballast COMPONENT plugin_sdk)
set(BALLAST_INSTALL_CONFORMANCE "${CMAKE_INSTALL_BINDIR}/ballast-conformance")
set(BALLAST_INSTALL_PLUGIN_ABI_HEADER "${CMAKE_INSTALL_INCLUDEDIR}/ballast/plugin_abi.hpp")
configure_package_config_file(cmake/ballastConfig.cmake.in
  "${CMAKE_BINARY_DIR}/ballastConfig.cmake"
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ballast
  PATH_VARS BALLAST_INSTALL_PLUGIN_DIR BALLAST_INSTALL_CONFORMANCE BALLAST_INSTALL_PLUGIN_ABI_HEADER)
write_basic_package_version_file("${CMAKE_BINARY_DIR}/ballastConfigVersion.cmake"
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES "${CMAKE_BINARY_DIR}/ballastConfig.cmake" "${CMAKE_BINARY_DIR}/ballastConfigVersion.cmake"
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ballast)
# The Python module (docs/python.md): pure Python over the C API, found by
# an engine that adds <prefix>/<libdir>/python3/dist-packages to sys.path;
# it loads libballast from ../../../ of its own folder, so a moved prefix works.
install(DIRECTORY python/ballast DESTINATION ${CMAKE_INSTALL_LIBDIR}/python3/dist-packages
  PATTERN __pycache__ EXCLUDE PATTERN "*.pyc" EXCLUDE)
