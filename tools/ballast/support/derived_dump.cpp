#include "support/derived_dump.hpp"

#include <map>
#include <utility>

namespace ballast::cli {
namespace {

std::string npy_descr(DataType t) {
  switch (t) {
    case DataType::float32: return "<f4";
    case DataType::float16: return "<f2";
    case DataType::bfloat16: return "<u2";
    default: return "|u1";
  }
}

}  // namespace

std::vector<std::string> dump_stems(std::span<const PlannedDerivation> plan) {
  std::map<std::pair<std::string, int>, int> uses;
  for (const auto& p : plan) uses[{p.weight, static_cast<int>(p.kind)}] += 1;
  std::vector<std::string> stems;
  stems.reserve(plan.size());
  for (const auto& p : plan) {
    std::string stem = p.weight;
    if (uses[{p.weight, static_cast<int>(p.kind)}] > 1) stem += "@" + (p.node.empty() ? p.why : p.node);
    stems.push_back(std::move(stem));
  }
  return stems;
}

std::vector<DumpOutput> dump_outputs(const PlannedDerivation& p, const DerivationSizes& sizes,
                                     std::span<const std::int64_t> source_dims) {
  const DerivationLaunch& l = p.launch;
  const std::string kind(derivation_name(p.kind));
  switch (p.kind) {
    case Derivation::transpose:
      return {{kind, npy_descr(l.src_type), {l.cols, l.rows}, false, sizes.dst_bytes}};
    case Derivation::to_f16:
      return {{kind, "<f2", std::vector<std::uint64_t>(source_dims.begin(), source_dims.end()), false, sizes.dst_bytes}};
    case Derivation::dequant_int4:
      return {{kind, "<f2", {l.rows, l.cols}, false, sizes.dst_bytes}};
    case Derivation::repack_int4:
      return {{kind + ".words", "<u4", {l.rows, (l.cols + 7) / 8}, false, sizes.dst_bytes},
              {kind + ".scale_offset", "<f2", {l.rows, k_blocks(l.cols, l.block_size), 2}, true, sizes.dst2_bytes}};
    case Derivation::quant_int8:
      return {{kind + ".codes", "|i1", {l.rows, l.cols}, false, sizes.dst_bytes},
              {kind + ".scales", "<f4", {l.rows}, true, sizes.dst2_bytes}};
  }
  return {};
}

Result<DerivedDump> DerivedDump::open(const std::filesystem::path& dir) {
  BALLAST_ASSIGN_OR_RETURN(auto d, DumpDirectory::open(dir));
  return DerivedDump(std::move(d));
}

Status DerivedDump::write(GpuBackend& gpu, const PlannedDerivation& p, const std::string& stem,
                          std::span<const std::int64_t> source_dims, DevicePtr first, DevicePtr second) {
  DerivationLaunch l = p.launch;
  l.kind = p.kind;
  BALLAST_ASSIGN_OR_RETURN(auto sizes, derivation_sizes(l));
  for (const DumpOutput& o : dump_outputs(p, sizes, source_dims)) {
    std::vector<std::byte> host(o.bytes);
    BALLAST_RETURN_IF_ERROR(gpu.copy_to_host(host, o.second ? second : first, 0), "reading back ", o.suffix, " of ",
                            p.weight);
    BALLAST_RETURN_IF_ERROR(dir_.write_npy(stem, o.suffix, o.descr, o.shape, host));
  }
  return Status();
}

}  // namespace ballast::cli
