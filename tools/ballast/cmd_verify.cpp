// `ballast verify MODEL`: every external range lies inside its file and every
// external-data `checksum` (SHA-1 hex, as ONNX specifies) matches the bytes.
#include "command.hpp"
#include "support/format.hpp"
#include "support/hash.hpp"
#include "support/model.hpp"
#include "support/progress.hpp"

#include <ballast/onnx_loader.hpp>

#include <algorithm>
#include <cctype>
#include <iostream>
#include <string>

namespace ballast::cli {
namespace {

struct VerifyOptions {
  std::string model;
  LoadOptions load;
};

// Load failures that are findings about the data (the model itself parsed,
// but what it points at is wrong) rather than unusable input.
bool is_verification_failure(ErrorCode code) {
  return code == ErrorCode::out_of_bounds || code == ErrorCode::size_mismatch ||
         code == ErrorCode::checksum_mismatch;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string where(std::string_view name, const WeightRef& w) {
  return "tensor=" + std::string(name) + " file=" + w.external->resolved().string() +
         " offset=" + std::to_string(w.external->offset) + " length=" + std::to_string(w.external->length);
}

int run_verify(const VerifyOptions& opt) {
  Result<Model> loaded = load_onnx(opt.model, opt.load);
  if (!loaded) {
    if (is_verification_failure(loaded.code())) {
      // The loader stops at the first range it refuses: report it as a finding.
      std::cout << "FAIL " << loaded.error().to_string() << '\n' << "verify: failed\n";
      return kExitVerifyFailed;
    }
    report_error("verify", loaded.error());
    return kExitBadInput;
  }
  const Model& model = *loaded;
  const WeightStore& store = model.store();
  const std::vector<NamedWeight> weights = weights_in_order(model);

  std::uint64_t to_hash = 0;
  for (const auto& w : weights) {
    if (w.ref->is_external() && w.ref->external->checksum) to_hash += w.ref->external->length;
  }
  ProgressBar bar("verifying checksums", to_hash);

  std::size_t ranges = 0, ranges_bad = 0, checksums = 0, checksums_bad = 0;
  for (const auto& [name, ref] : weights) {
    if (!ref->is_external()) continue;
    ++ranges;
    const std::optional<Bytes> bytes = store.bytes(*ref);
    if (!bytes || bytes->size() != ref->external->length) {
      ++ranges_bad;
      std::cout << "FAIL out_of_bounds: range outside its file: " << where(name, *ref) << '\n';
      continue;
    }
    if (!ref->external->checksum) continue;
    ++checksums;
    const std::string expected = lower(*ref->external->checksum);
    const std::string actual = hex_digest(Digest::sha1, *bytes, [&bar](std::uint64_t n) { bar.advance(n); });
    if (actual != expected) {
      ++checksums_bad;
      std::cout << "FAIL checksum_mismatch: " << where(name, *ref) << " expected sha1 " << expected << ", got "
                << (actual.empty() ? "(digest failed)" : actual) << '\n';
    }
  }

  const bool ok = ranges_bad == 0 && checksums_bad == 0;
  std::cout << "verify: " << ranges - ranges_bad << '/' << ranges << " external ranges inside their files, "
            << checksums - checksums_bad << '/' << checksums << " checksums match (" << human_bytes(to_hash)
            << " hashed): " << (ok ? "ok" : "failed") << '\n';
  return ok ? kExitOk : kExitVerifyFailed;
}

const RegisterCommand kVerify{{
    "verify",
    "Check that every external range lies inside its file and every checksum (SHA-1) matches",
    [](CLI::App& sub) -> std::function<int()> {
      auto opt = std::make_shared<VerifyOptions>();
      sub.add_option("MODEL", opt->model, "the .onnx file")->required();
      sub.add_flag("--allow-model-real-dir,--allow-external-outside-model-dir", opt->load.allow_model_real_dir,
                   "also accept external data beneath the folder of the model file's real path (symlinked caches)");
      return [opt] { return run_verify(*opt); };
    },
}};

}  // namespace
}  // namespace ballast::cli
