// What the CPU backend reports about the machine it runs on.
#pragma once

#include <cstdint>
#include <iosfwd>
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

// The readers above with their files named, so tests can give them
// fixtures (test_cpu_system_info). The "model name" of a /proc/cpuinfo text
// ("CPU" where none has a value).
std::string model_name_in(std::istream& cpuinfo);
// What cpu_uuid() hashes for the machine: the first line of the file at
// `machine_id_path`, trimmed, or the host name where that is missing or empty.
std::string machine_identity(const char* machine_id_path);
// The data (or unified) cache of `level` described under `cache_dir` (a
// sysfs .../cpu0/cache: index0, index1, ... with level, type and size
// files; sizes in bytes or with a K, M or G suffix), else sysconf's for
// levels 1 to 3; 0 when neither knows.
std::uint64_t cache_bytes_in(const std::string& cache_dir, unsigned level);

}  // namespace ballast::cpu
