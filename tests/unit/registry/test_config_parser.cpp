#include <ballast/backend_registry.hpp>
#include <doctest/doctest.h>

#include <map>
#include <optional>
#include <string>

using namespace ballast;

namespace {

struct Good {
  std::string text;
  std::string name;
  std::optional<int> index;
  std::optional<std::string> uuid;
  std::map<std::string, std::string, std::less<>> options;
};

struct Bad {
  std::string text;
  std::size_t position;
  std::string why;  // a fragment of the explanation
};

}  // namespace

TEST_CASE("well-formed config strings parse into name, device and options") {
  const Good table[] = {
      {"cpu", "cpu", {}, {}, {}},
      {"cuda:0", "cuda", 0, {}, {}},
      {"vulkan:1", "vulkan", 1, {}, {}},
      {"hip:2147483647", "hip", 2147483647, {}, {}},
      {"cuda:007", "cuda", 7, {}, {}},
      {"vulkan?validation=on", "vulkan", {}, {}, {{"validation", "on"}}},
      {"vulkan:1?validation=on&queue=2", "vulkan", 1, {}, {{"validation", "on"}, {"queue", "2"}}},
      {"cuda:GPU-1f2e3d4c-0000-1111-2222-aAbBcCdDeEfF", "cuda", {}, "GPU-1f2e3d4c-0000-1111-2222-aabbccddeeff", {}},
      {"vulkan:GPU-00000000-0000-0000-0000-000000000000?x.y-z_w=/opt/a:b",
       "vulkan",
       {},
       "GPU-00000000-0000-0000-0000-000000000000",
       {{"x.y-z_w", "/opt/a:b"}}},
      {"opencl", "opencl", {}, {}, {}},  // unknown names are open_backend's business
      {"my_backend2:3", "my_backend2", 3, {}, {}},
      {"b0123456789_z", "b0123456789_z", {}, {}, {}},  // every digit in a name
  };
  for (const auto& row : table) {
    CAPTURE(row.text);
    auto parsed = parse_backend_config(row.text);
    REQUIRE_MESSAGE(parsed.ok(), parsed.status().to_string());
    CHECK(parsed->text == row.text);
    CHECK(parsed->name == row.name);
    CHECK(parsed->device_index == row.index);
    CHECK(parsed->device_uuid == row.uuid);
    CHECK(parsed->options == row.options);
  }
}

TEST_CASE("malformed config strings are invalid_argument errors quoting the string and the position") {
  const Bad table[] = {
      {"", 0, "empty"},
      {":0", 0, "backend name"},
      {"?a=b", 0, "backend name"},
      {"CUDA", 0, "backend name"},
      {" cpu", 0, "backend name"},
      {"cpu ", 3, "unexpected ' '"},
      {"cu-da", 2, "unexpected '-'"},
      {"cpu:", 4, "device index or GPU-<uuid> after ':'"},
      {"cpu:?a=b", 4, "device index or GPU-<uuid> after ':'"},
      {"cuda:-1", 5, "device index"},
      {"cuda:+1", 5, "device index"},
      {"cuda:1x", 6, "unexpected 'x'"},
      {"cuda:0:1", 6, "unexpected ':'"},
      {"cuda:2147483648", 5, "too large"},
      {"cuda:99999999999999999999", 5, "too large"},
      {"cuda:gpu-1f2e3d4c-0000-1111-2222-aabbccddeeff", 5, "device index"},
      {"cuda:GPU-", 9, "hex digit"},
      {"cuda:GPU-1f2e3d4c", 17, "expected '-'"},
      {"cuda:GPU-1f2e3d4g-0000-1111-2222-aabbccddeeff", 16, "hex digit"},
      {"cuda:GPU-1f2e3d4c-000-1111-2222-aabbccddeeff", 21, "hex digit"},
      {"cuda:GPU-1f2e3d4c-0000-1111-2222-aabbccddeef", 44, "hex digit"},
      {"cuda:GPU-1f2e3d4c-0000-1111-2222-aabbccddeeff0", 45, "unexpected '0'"},
      {"cuda:GPU-1f2e3d4c00001111-2222-aabbccddeeff", 17, "expected '-'"},
      {"vulkan?", 7, "option key"},
      {"vulkan?validation", 17, "expected '='"},
      {"vulkan?validation=", 18, "value"},
      {"vulkan?=on", 7, "option key"},
      {"vulkan?a=1&", 11, "option key"},
      {"vulkan?a=1&&b=2", 11, "option key"},
      {"vulkan?a=1&a=2", 11, "given twice"},
      {"vulkan?a=1?b=2", 10, "unexpected '?'"},
      {"vulkan?a=b=c", 10, "unexpected '='"},
      {"vulkan?a=has space", 12, "unexpected ' '"},
      {"vulkan?k\xff=1", 8, "expected '='"},
      {std::string("cpu\0:0", 6), 3, "unexpected '\\x00'"},
  };
  for (const auto& row : table) {
    CAPTURE(row.text);
    auto parsed = parse_backend_config(row.text);
    REQUIRE_FALSE(parsed.ok());
    CHECK(parsed.code() == ErrorCode::invalid_argument);
    const std::string message = parsed.error().message;
    CAPTURE(message);
    CHECK(message.find("at position " + std::to_string(row.position) + ":") != std::string::npos);
    CHECK(message.find(row.why) != std::string::npos);
    CHECK(message.find('\n') == std::string::npos);
  }
}

TEST_CASE("the error quotes the offending string itself") {
  auto parsed = parse_backend_config("vulkan:1?validation");
  REQUIRE_FALSE(parsed.ok());
  CHECK(parsed.status().to_string() ==
        "invalid_argument: invalid backend config \"vulkan:1?validation\" at position 19: "
        "expected '=' after option key \"validation\"");
  // Unprintable bytes are shown escaped so the message stays one readable line.
  auto binary = parse_backend_config(std::string("cpu\x01", 4));
  REQUIRE_FALSE(binary.ok());
  CHECK(binary.error().message.find("\"cpu\\x01\"") != std::string::npos);
}

TEST_CASE("the string is read to its end and no further: a view into a longer buffer") {
  // The bytes after the view ("=on") are not the config's: a key that ends
  // where the view ends has no '='.
  const std::string buffer = "cpu?validation=on";
  auto parsed = parse_backend_config(std::string_view(buffer).substr(0, 14));
  REQUIRE_FALSE(parsed.ok());
  CHECK(parsed.error().message.find("at position 14: expected '=' after option key \"validation\"") !=
        std::string::npos);
}

TEST_CASE("a long config string is refused, and no message carries it whole") {
  // At the cap a well-formed string parses (its value is not checked here).
  const std::string at_cap = "cpu?threads=" + std::string(1024 - 12, '9');
  REQUIRE(at_cap.size() == 1024);
  CHECK(parse_backend_config(at_cap).ok());
  auto over = parse_backend_config(at_cap + "9");
  REQUIRE_FALSE(over.ok());
  CHECK(over.code() == ErrorCode::invalid_argument);
  CHECK(over.error().message.find("of 1025 bytes: at most 1024") != std::string::npos);
  CHECK(over.error().message.size() < 200);
  // An error inside a long (but not too long) string quotes its start.
  auto bad = parse_backend_config("cpu?threads=" + std::string(900, '9') + "&");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message.find("...\" at position 913") != std::string::npos);
  CHECK(bad.error().message.size() < 300);
}
