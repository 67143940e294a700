// libFuzzer target: the backend config-string parser (issue 12), the one
// piece of ballast an engine may feed from user input ("--device ...").
// Any byte string must give a config or a typed error, never a crash; a
// config it accepts names a backend and keeps the text it came from.
#include <ballast/backend_registry.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto config = ballast::parse_backend_config(text);
  if (!config.ok()) {
    if (config.code() == ballast::ErrorCode::ok || config.error().to_string().empty()) std::abort();
    return 0;
  }
  if (config->name.empty() || config->text != text) std::abort();
  if (config->device_index && *config->device_index < 0) std::abort();
  return 0;
}
