// What the CPU backend reports about the machine it runs on.
#pragma once

#include <cstdint>
#include <string>

namespace ballast::cpu {

// "model name" from /proc/cpuinfo, or "CPU" when it cannot be read.
std::string cpu_model_name();
// Physical memory in bytes (0 when unknown).
std::uint64_t physical_memory_bytes();
// A stable identifier in the uniform "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
// form, so a config string can name the CPU by UUID like any device: a hash
// of /etc/machine-id (or the host name when that is missing) and the CPU
// model. Hashed, never the machine id itself, which should stay private.
std::string cpu_uuid();
// Hardware threads available to this process (at least 1).
unsigned hardware_threads();
// The data (or unified) cache of `level` (1, 2, 3) that CPU 0 uses, in
// bytes: sysfs first (the cache this core shares, where sysconf may report
// a whole package's L3), sysconf where sysfs has none; 0 when unknown.
// Read once per process (the kernels size their tiles from it).
std::uint64_t cache_bytes(unsigned level);

}  // namespace ballast::cpu
