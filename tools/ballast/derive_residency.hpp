// `ballast derive MODEL --residency STRATEGY`: every planned derivation
// pinned through a Residency, read back whole and hashed (cmd_derive.cpp
// parses the options; without --residency derive runs as before).
#pragma once

#include <string>

namespace ballast::cli {

struct DeriveResidencyOptions {
  std::string model;
  std::string backend = "cpu";
  std::string residency;  // upload | zero-copy | paged
  std::string budget;     // empty: not given; else a byte count or "auto"
  std::string only;       // empty: every kind; else "kind[,kind...]"
  std::string dump;       // empty: no --dump; else the directory (support/derived_dump.hpp)
  bool json = false;
  double max_amplification = 64;  // PlanOptions::max_amplification (0: no cap)
};

// CLI11 check for --only: empty when every comma-separated name is a
// derivation (transpose, to_f16, dequant_int4, repack_int4, quant_int8).
std::string check_derivation_kinds(const std::string& text);

int run_derive_residency(const DeriveResidencyOptions& opt);

}  // namespace ballast::cli
