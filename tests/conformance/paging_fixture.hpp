// The orphaned-prefix model on disk, loaded and planned, for the paging
// suites (test_paging.cpp, test_paging_groups.cpp): one fixture, so both
// read the same model and budgets. tests/support/orphaned_prefix_model.hpp
// has its exact sizes.
#pragma once

#include "conformance/conformance.hpp"

#include <ballast/derive.hpp>
#include <ballast/onnx_loader.hpp>
#include <ballast/residency.hpp>

#include <support/orphaned_prefix_model.hpp>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <unistd.h>
#include <vector>

namespace conformance {

using OrphanedPrefix = ballast::test_models::OrphanedPrefixModel;

// Below it, create() refuses: quant_int8 of w0 pins w0 (24576) beside its
// transposed copy (24576) while the copy is built.
inline constexpr std::uint64_t kLargestNeed = 2 * OrphanedPrefix::kW0Bytes;

struct PagingFixture {
  std::filesystem::path dir = std::filesystem::temp_directory_path() /
                              ("ballast_conformance_paging_" + std::to_string(::getpid()));
  ballast::Model model;
  std::vector<ballast::PlannedDerivation> plan;

  PagingFixture() {
    std::filesystem::remove_all(dir);
    OrphanedPrefix::write(dir);
    auto m = ballast::load_onnx(dir / "model.onnx");
    REQUIRE_MESSAGE(m.ok(), m.status().to_string());
    model = std::move(*m);
    auto p = ballast::plan_derivations(model);
    REQUIRE(p.ok());
    plan = std::move(*p);
    REQUIRE(plan.size() == OrphanedPrefix::kDerivations);
  }
  ~PagingFixture() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  PagingFixture(const PagingFixture&) = delete;
  PagingFixture& operator=(const PagingFixture&) = delete;

  std::unique_ptr<ballast::Residency> open(ballast::ResidencyStrategy s,
                                           std::optional<std::uint64_t> budget = std::nullopt) {
    ballast::ResidencyOptions o;
    o.strategy = s;
    o.budget_bytes = budget;
    auto r = ballast::Residency::create(gpu(), model, o);
    REQUIRE_MESSAGE(r.ok(), r.status().to_string());
    return std::move(*r);
  }
};

}  // namespace conformance
