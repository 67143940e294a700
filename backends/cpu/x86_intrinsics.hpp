// <immintrin.h> for the CPU backend's x86 kernels. GCC 12's AVX-512
// headers initialise their "undefined" vectors from themselves, which
// -Wmaybe-uninitialized reports wherever they inline; the warning is
// silenced for the header alone.
#pragma once

#if defined(__x86_64__)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif
