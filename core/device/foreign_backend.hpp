// The refusal of a release on another backend than the one a resource was
// made on (DeviceWeights, and Residency, which holds one): one text for
// both, naming the two backends.
#pragma once

#include <ballast/gpu_backend.hpp>
#include <ballast/status.hpp>

#include <string>

namespace ballast::device {

Error foreign_backend(const std::string& label, const GpuBackend& own, const GpuBackend& given);

}  // namespace ballast::device
