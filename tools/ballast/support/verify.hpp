// The checks behind `ballast verify`, apart from the command line so that
// tests can run them on a model they changed after loading it.
#pragma once

#include <ballast/onnx_loader.hpp>

#include <cstdint>
#include <functional>
#include <ostream>

namespace ballast::cli {

struct VerifyCounts {
  std::size_t ranges = 0, ranges_bad = 0;
  std::size_t checksums = 0, checksums_bad = 0;  // bad: mismatched, or not hashed because the file changed
  std::size_t files_changed = 0;                 // changed since opened, or the path names another file now
  bool ok() const noexcept { return ranges_bad == 0 && checksums_bad == 0 && files_changed == 0; }
};

// Bytes that carry a checksum (what verify_weights hashes).
std::uint64_t checksummed_bytes(const Model& model);

// Every external range lies inside its file; every checksum (SHA-1) matches
// the bytes; then every mapped data file is still the file that was opened
// (size, modification time) and its path still names it (a file renamed
// over the path is reported; the bytes verified are the opened file's).
// One "FAIL <error>" line per finding on `out`. Bytes are copied out of the
// files with WeightStore::copy_bytes, never read through the mappings: a
// file truncated while verify runs is a finding, not SIGBUS.
VerifyCounts verify_weights(const Model& model, std::ostream& out,
                            const std::function<void(std::uint64_t)>& on_hashed = {});

}  // namespace ballast::cli
