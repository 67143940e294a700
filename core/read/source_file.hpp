// Opening a planned file for the reader: by the path it was mapped under,
// and only if that path still names the very file that was mapped, as it
// was then (a reader that followed a path to a new file would hand an
// engine bytes the plan never described). When the path names another
// file or none (a re-export renamed over it, a deleted file), the mapped
// inode is reachable only through its mapping: the reader copies from
// that instead, as the pins would.
#pragma once

#include <ballast/status.hpp>

#include "store/mapped_file.hpp"
#include "store/safe_open.hpp"

#include <cstdint>

namespace ballast::read {

struct SourceFile {
  store::Fd fd;
  bool direct = false;  // opened with O_DIRECT
  bool mapped = false;  // no descriptor: the path no longer names the mapped file; read its mapping
};

// Opens `mapping`'s file read-only, with O_DIRECT when `direct` and the
// file system takes it (otherwise buffered, said once through the log
// sink). `mapped` (said once through the log sink) when the path names
// another inode or nothing. io error naming the file when it cannot be
// opened otherwise or changed since it was mapped.
Result<SourceFile> open_source(const store::MappedFile& mapping, bool direct);

// The errors of a read, worded the same by both engines.
Error read_failed(const store::MappedFile& mapping, std::uint64_t offset, std::uint64_t length, int error);
Error file_ended(const store::MappedFile& mapping, std::uint64_t at, std::uint64_t begin, std::uint64_t end);

// O_DIRECT's alignment: offsets, lengths and buffers in multiples of this.
inline constexpr std::uint64_t kDirectAlign = 4096;

}  // namespace ballast::read
