// <immintrin.h> for the CPU backend's x86 kernels. GCC 12's AVX-512
// headers initialise their "undefined" vectors from themselves, which
// -Wmaybe-uninitialized (and at -O2, the demo preset's, -Wuninitialized)
// reports wherever they inline; both are silenced for the header alone.
#pragma once

#if defined(__x86_64__)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif
