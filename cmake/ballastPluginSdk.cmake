# Part of the plugin SDK (the package's plugin_sdk component, docs/plugins.md).
#
# ballast_add_plugin(<target> <backend-name> <source>...)
#   A backend plugin library: a MODULE named libballast-<backend-name>.so,
#   the name the registry looks for, linked to ballast::plugin_sdk, with
#   only BALLAST_PLUGIN_ENTRY's ballast_plugin_entry exported (a version
#   script: ballast_export_only below). The backend name is a
#   lowercase identifier ([a-z][a-z0-9_]*) and must be the one given to
#   BALLAST_PLUGIN_ENTRY. Linked with --no-undefined, so a symbol the
#   plugin uses and nothing provides fails its build, not its first load
#   on a user's machine; not under -fsanitize (in any flags variable, the
#   build type's included, or the directory's or target's options, set
#   before or after this call), whose runtime a module leaves for the
#   program to provide; BALLAST_PLUGIN_NO_UNDEFINED=OFF leaves it out.
#
# ballast_export_only(<target> <symbol>)
#   Links the MODULE <target> with a version script that exports <symbol>
#   alone. Hidden visibility is not enough: the C++ runtime's weak template
#   instances (std::call_once's, std::map's) keep default visibility, are
#   exported, and a plugin's own references to them then bind to the first
#   copy loaded, libballast's or the program's, built from other headers.
#   With the script every other symbol binds inside the plugin.
function(ballast_export_only target symbol)
  set(script "${CMAKE_CURRENT_BINARY_DIR}/${target}.exports")
  file(CONFIGURE OUTPUT "${script}" CONTENT "{ global: ${symbol}; local: *; };\n")
  target_link_options(${target} PRIVATE "LINKER:--version-script=${script}")
  set_property(TARGET ${target} APPEND PROPERTY LINK_DEPENDS "${script}")
endfunction()

function(ballast_add_plugin target name)
  if(NOT name MATCHES "^[a-z][a-z0-9_]*$")
    message(FATAL_ERROR "ballast_add_plugin: backend name '${name}' is not a lowercase identifier [a-z][a-z0-9_]*")
  endif()
  if(NOT ARGN)
    message(FATAL_ERROR "ballast_add_plugin: no sources given for ${target}")
  endif()
  add_library(${target} MODULE ${ARGN})
  target_link_libraries(${target} PRIVATE ballast::plugin_sdk)
  set_target_properties(${target} PROPERTIES
    PREFIX "lib"
    OUTPUT_NAME "ballast-${name}"
    SUFFIX ".so"
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  ballast_export_only(${target} ballast_plugin_entry)
  # Decided once the directory is read: a sanitizer given after this call
  # (target_compile_options, CMAKE_CXX_FLAGS_DEBUG, add_compile_options)
  # counts as much as one given before.
  # (EVAL: a deferred call's arguments are read when it runs, `target` here.)
  cmake_language(EVAL CODE "cmake_language(DEFER CALL _ballast_plugin_no_undefined [[${target}]])")
endfunction()

# --no-undefined for ballast_add_plugin's <target>, unless a sanitizer is
# asked for anywhere its build reads flags from: clang leaves a sanitizer's
# runtime out of a module (the program provides it), so every module
# instrumented by one has undefined references. BALLAST_PLUGIN_NO_UNDEFINED
# set OFF leaves the flag out in any case.
function(_ballast_plugin_no_undefined target)
  if(DEFINED BALLAST_PLUGIN_NO_UNDEFINED AND NOT BALLAST_PLUGIN_NO_UNDEFINED)
    return()
  endif()
  set(flags "${CMAKE_C_FLAGS} ${CMAKE_CXX_FLAGS} ${CMAKE_MODULE_LINKER_FLAGS}")
  foreach(config IN LISTS CMAKE_BUILD_TYPE CMAKE_CONFIGURATION_TYPES)
    string(TOUPPER "${config}" config)
    string(APPEND flags " ${CMAKE_C_FLAGS_${config}} ${CMAKE_CXX_FLAGS_${config}} ${CMAKE_MODULE_LINKER_FLAGS_${config}}")
  endforeach()
  get_directory_property(directory_compile COMPILE_OPTIONS)
  get_directory_property(directory_link LINK_OPTIONS)
  get_target_property(target_compile ${target} COMPILE_OPTIONS)
  get_target_property(target_link ${target} LINK_OPTIONS)
  string(APPEND flags " ${directory_compile} ${directory_link} ${target_compile} ${target_link}")
  if(NOT flags MATCHES "-fsanitize")
    target_link_options(${target} PRIVATE "LINKER:--no-undefined")
  endif()
endfunction()
