// `derive --dump`: which files a plan's derived values are written to, and
// writing them. One piece for every path of derive (plain, and through each
// residency strategy), so that every path writes the same files under the
// same names (docs/tools.md, "derive --dump").
#pragma once

#include "support/npy.hpp"

#include <ballast/derive.hpp>
#include <ballast/gpu_backend.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace ballast::cli {

// The NumPy type string of elements of type `t`. bfloat16 has no NumPy
// type: its bits are written as uint16; types NumPy lacks (float8, GGUF
// blocks) as bytes ("|u1"). Every whole-byte type's string has its size.
std::string npy_descr(DataType t);

// The file stem of each planned derivation, in plan order: the weight's name;
// when the plan holds several derivations of one kind on one weight
// (consumers with other scales, or another shape on the same bytes), each
// also names its consumer node: "<weight>@<node>". Node names are never
// empty in a loaded model (an unnamed node is "<op_type>#<index>"); a plan
// entry without a node (planned from the weight alone) uses its `why`.
// A stem that would repeat one already taken for the same kind (a weight
// literally named "<weight>@<node>", two node-less entries with one `why`)
// gets "#2", "#3", ... in plan order. A stem depends only on the plan's
// entries of the same kind, so a plan filtered by kind (derive --only)
// keeps the whole plan's names.
std::vector<std::string> dump_stems(std::span<const PlannedDerivation> plan);

// One file of a derived value: the value, or one half of a pair
// (repack_int4: .words, .scale_offset; quant_int8: .codes, .scales).
struct DumpOutput {
  std::string suffix;  // "transpose", "repack_int4.words", ...
  std::string descr;   // the NumPy type string
  std::vector<std::uint64_t> shape;
  bool second = false;  // the pair's second half
  std::uint64_t bytes = 0;
};

// `layout`: derivation_layout(p.launch); `source_dims`: the source weight's
// dims (to_f16 keeps its shape).
std::vector<DumpOutput> dump_outputs(const PlannedDerivation& p, const DerivationLayout& layout,
                                     std::span<const std::int64_t> source_dims);

// The dump directory of one run, opened (and created) up front so that a bad
// path fails before any work.
class DerivedDump {
 public:
  // `sub`: as DumpDirectory::open's (a rank's folder, never through a symlink).
  static Result<DerivedDump> open(const std::filesystem::path& dir, const std::string& sub = {});

  // Reads the value at `first` (and a pair's `second`) back from `gpu` and
  // writes its file(s) under `stem`.
  Status write(GpuBackend& gpu, const PlannedDerivation& p, const std::string& stem,
               std::span<const std::int64_t> source_dims, DevicePtr first, DevicePtr second);

 private:
  explicit DerivedDump(DumpDirectory dir) : dir_(std::move(dir)) {}
  DumpDirectory dir_;
};

}  // namespace ballast::cli
