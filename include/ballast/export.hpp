// What libballast exports: the public API and nothing else. The library is
// compiled with hidden symbol visibility; every public header opens its
// declarations with BALLAST_API_BEGIN and closes them with BALLAST_API_END,
// so everything it declares (classes with their type information, free
// functions) is exported, and everything declared only in core/ stays
// private to the library. BALLAST_API marks a single declaration outside
// such a region (a plugin's exported entry point).
#pragma once

#if defined(__GNUC__) || defined(__clang__)
#define BALLAST_API __attribute__((visibility("default")))
#define BALLAST_HIDDEN __attribute__((visibility("hidden")))
#define BALLAST_API_BEGIN _Pragma("GCC visibility push(default)")
#define BALLAST_API_END _Pragma("GCC visibility pop")
#else
#define BALLAST_API
#define BALLAST_HIDDEN
#define BALLAST_API_BEGIN
#define BALLAST_API_END
#endif
