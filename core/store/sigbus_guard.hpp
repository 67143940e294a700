// Copies out of a file mapping that survive the file being truncated.
//
// A read of a mapped page past the end of a truncated file raises SIGBUS.
// guarded_copy() catches exactly that: a process-wide SIGBUS handler,
// installed on first use and chaining to whatever handler was there before,
// siglongjmps back into guarded_copy() only when the faulting thread is
// inside a guarded copy AND the fault address lies in the source range that
// copy guards. Any other SIGBUS (another thread, another address, the
// destination, a kill(2)) goes to the previous handler, or, where there was
// none, kills the process exactly as it would have without ballast.
// docs/reliability.md has the reasoning.
#pragma once

#include <cstddef>

namespace ballast::store {

// memcpy(dst, src, n), except that a SIGBUS from reading [src, src + n)
// ends the copy and returns false (dst then holds a partial copy). Only
// memcpy runs under the guard: nothing that holds a lock is ever jumped out
// of. Thread-safe; async-signal-safe state only.
bool guarded_copy(void* dst, const void* src, std::size_t n) noexcept;

// Whether the handler has been installed (it is, on the first copy).
bool sigbus_guard_installed() noexcept;

}  // namespace ballast::store
