#include "support/derived_dump.hpp"

#include <map>
#include <set>
#include <utility>

namespace ballast::cli {

std::string npy_descr(DataType t) {
  switch (t) {
    case DataType::float32: return "<f4";
    case DataType::float16: return "<f2";
    case DataType::float64: return "<f8";
    case DataType::bfloat16: return "<u2";
    case DataType::uint16: return "<u2";
    case DataType::int16: return "<i2";
    case DataType::uint32: return "<u4";
    case DataType::int32: return "<i4";
    case DataType::uint64: return "<u8";
    case DataType::int64: return "<i8";
    case DataType::int8: return "|i1";
    case DataType::bool_: return "|b1";
    // NumPy's complex64 is two little-endian float32, as ONNX and
    // safetensors (C64) store it; "|u1" would say 1 byte per element and
    // cut a transposed complex weight's file to an eighth.
    case DataType::complex64: return "<c8";
    case DataType::complex128: return "<c16";
    default: return "|u1";
  }
}

std::vector<std::string> dump_stems(std::span<const PlannedDerivation> plan) {
  std::map<std::pair<std::string, int>, int> uses;
  for (const auto& p : plan) uses[{p.weight, static_cast<int>(p.kind())}] += 1;
  // A weight may itself be named like another's "<weight>@<node>" stem:
  // a (stem, kind) already taken gets "#2", "#3", ... in plan order, so
  // every entry has a file of its own.
  std::set<std::pair<std::string, int>> taken;
  for (const auto& p : plan)
    if (uses[{p.weight, static_cast<int>(p.kind())}] == 1) taken.insert({p.weight, static_cast<int>(p.kind())});
  std::vector<std::string> stems;
  stems.reserve(plan.size());
  for (const auto& p : plan) {
    const int kind = static_cast<int>(p.kind());
    std::string stem = p.weight;
    if (uses[{p.weight, kind}] > 1) {
      stem += "@" + (p.node.empty() ? p.why : p.node);
      const std::string base = stem;
      for (int n = 2; !taken.insert({stem, kind}).second; ++n) stem = base + "#" + std::to_string(n);
    }
    stems.push_back(std::move(stem));
  }
  return stems;
}

std::vector<DumpOutput> dump_outputs(const PlannedDerivation& p, const DerivationLayout& layout,
                                     std::span<const std::int64_t> source_dims) {
  // Each output of the kind's row (derivation_kinds.hpp), named
  // "<kind><suffix>" and shaped as the row says.
  std::vector<DumpOutput> out;
  const std::string kind(derivation_name(p.kind()));
  for (const kinds::Slot slot : {kinds::Slot::dst, kinds::Slot::dst2}) {
    const OperandLayout& o = layout[slot];
    if (!o.present) continue;
    DumpOutput d{kind + o.row->suffix, npy_descr(o.type), std::vector<std::uint64_t>(o.dims, o.dims + o.rank),
                 slot == kinds::Slot::dst2, o.bytes};
    if (layout.kind->output_keeps_source_dims) d.shape.assign(source_dims.begin(), source_dims.end());
    out.push_back(std::move(d));
  }
  return out;
}

Result<DerivedDump> DerivedDump::open(const std::filesystem::path& dir, const std::string& sub) {
  BALLAST_ASSIGN_OR_RETURN(auto d, DumpDirectory::open(dir, sub));
  return DerivedDump(std::move(d));
}

Status DerivedDump::write(GpuBackend& gpu, const PlannedDerivation& p, const std::string& stem,
                          std::span<const std::int64_t> source_dims, DevicePtr first, DevicePtr second) {
  DerivationLaunch l = p.launch;
  BALLAST_ASSIGN_OR_RETURN(const DerivationLayout layout, derivation_layout(l));
  for (const DumpOutput& o : dump_outputs(p, layout, source_dims)) {
    std::vector<std::byte> host(o.bytes);
    BALLAST_RETURN_IF_ERROR(gpu.copy_to_host(host, o.second ? second : first, 0), "reading back ", o.suffix, " of ",
                            p.weight);
    BALLAST_RETURN_IF_ERROR(dir_.write_npy(stem, o.suffix, o.descr, o.shape, host));
  }
  return Status();
}

}  // namespace ballast::cli
