#pragma once

// The one place the version is written; CMakeLists.txt reads it from here.
#define BALLAST_VERSION_MAJOR 0
#define BALLAST_VERSION_MINOR 1
#define BALLAST_VERSION_PATCH 0
#define BALLAST_VERSION_STRING "0.1.0"
