// For test doubles that forward to another GpuBackend's public API: the
// range the inner backend handed out, with its own pointer as the cookie.
#pragma once

#include <ballast/gpu_backend.hpp>

namespace ballast::testing {

inline Result<BackendRange> forwarded(Result<DevicePtr> inner) {
  if (!inner) return std::move(inner.error());
  return BackendRange{*inner, *inner};
}

}  // namespace ballast::testing
