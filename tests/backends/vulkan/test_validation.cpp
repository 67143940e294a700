#include "support.hpp"

#include <ballast/log.hpp>

#include <numeric>
#include <string>
#include <vector>

namespace ballast::vulkan::test {

TEST_CASE("with validation on, a full workload raises zero validation messages") {
  auto attempt = VulkanBackend::open(config("?validation=on"));
  if (!attempt && attempt.code() == ErrorCode::unavailable &&
      attempt.error().message.find("not installed") != std::string::npos) {
    MESSAGE("validation layer not installed: " << attempt.status().to_string());
    CHECK(attempt.error().message.find("VK_LAYER_KHRONOS_validation") != std::string::npos);
    return;
  }
  INFO(attempt.status().to_string());
  REQUIRE(attempt.ok());
  Checked checked(std::move(*attempt));
  auto& b = checked;
  CHECK(b.validation_enabled());

  std::vector<float> f(5000);
  std::iota(f.begin(), f.end(), -2500.0f);
  const DevicePtr src = upload(b, f);
  auto dst = b.allocate(f.size() * 4, 256);
  REQUIRE(dst.ok());
  for (Derivation kind : {Derivation::transpose, Derivation::to_f16, Derivation::quant_int8}) {
    DerivationLaunch l;
    l.kind = kind;
    l.src_type = DataType::float32;
    l.rows = 50;
    l.cols = 100;
    l.src = src;
    l.dst = *dst;
    l.dst2 = *dst + 5000 + 3;  // codes take 5000 bytes; scales after them, unaligned
    const Status s = b.launch(l);
    INFO(s.to_string());
    CHECK(s.ok());
  }
  DerivationLaunch int4;
  int4.kind = Derivation::repack_int4;
  int4.src_type = DataType::float16;
  int4.rows = 4;
  int4.cols = 40;
  int4.block_size = 16;
  int4.src = src;
  int4.scales = src + 1000;
  int4.dst = *dst;
  int4.dst2 = *dst + 1001;
  CHECK(b.launch(int4).ok());
  int4.kind = Derivation::dequant_int4;
  int4.zero_points = ZeroPoints::packed_u4;
  int4.zero_point = src + 2000;
  CHECK(b.launch(int4).ok());
  CHECK(b.synchronize().ok());
  std::vector<std::byte> back(100);
  CHECK(b.copy_to_host(back, *dst, 7).ok());
  CHECK(b.copy_device(*dst, 1001, *dst, 0, 1000).ok());
  if (b.capabilities().host_registration) {
    auto reg = b.register_host(f.data() + 1, 1000, HostAccess::read_only);
    REQUIRE(reg.ok());
    CHECK(b.copy_to_host(back, *reg, 0).ok());
    CHECK(b.unregister_host(*reg).ok());
  }
  CHECK(b.free(src).ok());
  CHECK(b.free(*dst).ok());
  CHECK(b.synchronize().ok());
  CHECK(b.validation_messages() == 0);
  // Teardown (destroying the device and the instance) is validated too.
  auto log = b.validation_log();
  attempt = make_error(ErrorCode::internal, "closed");
  CHECK(log->message_count() == 0);
}

}  // namespace ballast::vulkan::test

namespace ballast::vulkan::test {

TEST_CASE("a validation message is counted and reported once as an error") {
  ValidationLog log;
  auto instance = Instance::create(&log);
  if (!instance) {
    MESSAGE("skipped: validation layer unavailable: " << instance.status().to_string());
    CHECK_FALSE(instance.status().to_string().empty());
    return;
  }
  CHECK(log.message_count() == 0);
  CHECK_FALSE(log.take_pending().has_value());
  std::vector<std::string> logged;  // each message also reaches the engine's log sink as it arrives
  ballast::set_log_sink([&](const ballast::LogMessage& m) {
    if (m.source == "vulkan" && m.level == ballast::LogLevel::error) logged.emplace_back(m.text);
  });
  // A deliberate misuse the layer must flag: a messenger whose pNext chain
  // carries a structure that does not belong there.
  VkDebugUtilsMessengerCreateInfoEXT info = log.messenger_info();
  VkValidationFeaturesEXT stray{};
  stray.sType = VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT;
  info.pNext = &stray;
  VkDebugUtilsMessengerEXT messenger = VK_NULL_HANDLE;
  const VkResult r = (*instance)->fns().CreateDebugUtilsMessengerEXT((*instance)->handle(), &info, nullptr, &messenger);
  if (r == VK_SUCCESS) (*instance)->fns().DestroyDebugUtilsMessengerEXT((*instance)->handle(), messenger, nullptr);
  ballast::set_log_sink({});
  CHECK(log.message_count() >= 1);
  CHECK(logged.size() == log.message_count());
  CHECK((!logged.empty() && logged[0].find("validation error") != std::string::npos));
  auto e = log.take_pending();
  REQUIRE(e.has_value());
  CHECK(e->code == ErrorCode::device_error);
  CHECK(e->native == "VK_LAYER_KHRONOS_validation");
  CHECK(e->message.find("validation error") != std::string::npos);
  CHECK_FALSE(log.take_pending().has_value());  // reported once
}

}  // namespace ballast::vulkan::test
