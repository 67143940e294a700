// `ballast verify MODEL`: every external range lies inside its file, every
// external-data `checksum` (SHA-1 hex, as ONNX specifies) matches the bytes,
// and every data file is still the one opened, at its path (support_verify).
#include "command.hpp"
#include "command_context.hpp"
#include "command_options.hpp"
#include "support/format.hpp"
#include "support/hash.hpp"
#include "support/model.hpp"
#include "support/progress.hpp"
#include "support/verify.hpp"

#include <ballast/printable.hpp>
#include <ballast/onnx_loader.hpp>

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

int run_verify(const VerifyOptions& opt) {
  CommandContext ctx("verify");
  // Not ctx.load_model(): a load failure that is a finding goes to stdout
  // as one, with exit 1; only the others are errors.
  Result<Model> loaded = open_model(opt.model, opt.load);
  if (!loaded) {
    if (is_verification_failure(loaded.code())) {
      // The loader stops at the first range it refuses: report it as a finding.
      std::cout << "FAIL " << printable(loaded.error().to_string()) << '\n' << "verify: failed\n";
      return kExitVerifyFailed;
    }
    return ctx.fail(loaded.error());
  }
  const Model& model = *loaded;
  const std::uint64_t to_hash = checksummed_bytes(model);
  ProgressBar bar("verifying checksums", to_hash);
  const VerifyCounts n = verify_weights(model, std::cout, [&bar](std::uint64_t bytes) { bar.advance(bytes); });

  std::cout << "verify: " << n.ranges - n.ranges_bad << '/' << n.ranges << " external ranges inside their files, "
            << n.checksums - n.checksums_bad << '/' << n.checksums << " checksums match (" << human_bytes(to_hash)
            << " hashed)";
  if (n.files_changed != 0)
    std::cout << ", " << n.files_changed << " data file" << (n.files_changed == 1 ? "" : "s")
              << " changed or replaced since opened";
  std::cout << ": " << (n.ok() ? "ok" : "failed") << '\n';
  return n.ok() ? kExitOk : kExitVerifyFailed;
}

const RegisterCommand kVerify{{
    "verify",
    "Check that every external range lies inside its file and every checksum (SHA-1) matches",
    [](CLI::App& sub) -> std::function<int()> {
      auto opt = std::make_shared<VerifyOptions>();
      sub.add_option("MODEL", opt->model, "the model: .onnx, .safetensors, a *.safetensors.index.json, or .gguf")
          ->required();
      add_allow_holes_option(sub, opt->load);
      add_model_real_dir_option(sub, opt->load);
      return [opt] { return run_verify(*opt); };
    },
}};

}  // namespace
}  // namespace ballast::cli
