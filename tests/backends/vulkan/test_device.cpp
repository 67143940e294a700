#include "support.hpp"

#include <regex>

namespace ballast::vulkan::test {

TEST_CASE("device info, capabilities and the device list agree") {
  auto b = open();
  const DeviceInfo& info = b->info();
  CHECK(info.backend == "vulkan");
  CHECK(info.index == 0);
  CHECK_FALSE(info.name.empty());
  CHECK(std::regex_match(info.uuid, std::regex("GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")));
  CHECK(info.memory_bytes > 0);
  const Capabilities& c = b->capabilities();
  CHECK(c.max_single_allocation > 0);
  CHECK_FALSE(c.flushes_f16_subnormals);
  // lavapipe divides correctly: its quant_int8 codes are held to the reference exactly.
  if (info.name.find("llvmpipe") != std::string::npos) CHECK_FALSE(c.int8_codes_within_one);
  if (c.host_registration) {
    CHECK(c.read_only_registration);
    CHECK(c.import_alignment >= 1);
    CHECK((c.import_alignment & (c.import_alignment - 1)) == 0);
  } else {
    CHECK_FALSE(c.host_registration_note.empty());
  }
  auto list = list_devices();
  REQUIRE(list.ok());
  REQUIRE_FALSE(list->empty());
  CHECK(list->front().uuid == info.uuid);
  CHECK(list->front().name == info.name);
}

TEST_CASE("devices are chosen by index or by UUID") {
  auto first = open();
  auto by_uuid = open(":" + first->info().uuid);
  CHECK(by_uuid->info().uuid == first->info().uuid);
  auto by_index = open(":0");
  CHECK(by_index->info().name == first->info().name);

  auto missing = VulkanBackend::open(config(":57"));
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.code() == ErrorCode::not_found);
  CHECK(missing.error().message.find("no Vulkan device 57") != std::string::npos);

  auto wrong_uuid = VulkanBackend::open(config(":GPU-00000000-0000-0000-0000-000000000000"));
  REQUIRE_FALSE(wrong_uuid.ok());
  CHECK(wrong_uuid.code() == ErrorCode::not_found);
  CHECK(wrong_uuid.error().message.find(first->info().uuid) != std::string::npos);  // lists the ones there are
}

TEST_CASE("unknown and malformed options are refused, naming the known ones") {
  auto unknown = VulkanBackend::open(config("?colour=blue"));
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.code() == ErrorCode::invalid_argument);
  CHECK(unknown.error().message.find("colour") != std::string::npos);
  CHECK(unknown.error().message.find("validation") != std::string::npos);
  CHECK(unknown.error().message.find("max_workgroups") != std::string::npos);

  auto bad_value = VulkanBackend::open(config("?validation=maybe"));
  REQUIRE_FALSE(bad_value.ok());
  CHECK(bad_value.code() == ErrorCode::invalid_argument);

  auto bad_groups = VulkanBackend::open(config("?max_workgroups=0"));
  REQUIRE_FALSE(bad_groups.ok());
  CHECK(bad_groups.code() == ErrorCode::invalid_argument);

  auto capped = open("?max_workgroups=3");
  CHECK(capped->max_groups_per_dispatch() == 3);

  CHECK(unknown.error().message.find("max_allocation") != std::string::npos);
  for (const std::string bad : {"?max_allocation=0", "?max_allocation=-1", "?max_allocation=1k"}) {
    CAPTURE(bad);
    CHECK(VulkanBackend::open(config(bad)).code() == ErrorCode::invalid_argument);
  }
  // Below the device's limit it is the limit: larger requests are refused
  // by ballast, with the reason, before the driver sees them.
  auto small = open("?max_allocation=4096");
  CHECK(small->capabilities().max_single_allocation == 4096);
  auto refused = small->allocate(4097, 256);
  CHECK(refused.code() == ErrorCode::out_of_memory);
  CHECK(refused.error().message.find("largest single allocation (4096 bytes") != std::string::npos);
  auto fits = small->allocate(4096, 256);
  REQUIRE(fits.ok());
  CHECK(small->free(*fits).ok());
}

TEST_CASE("several backends on one device live side by side") {
  auto a = open();
  auto b = open("?validation=off");
  auto pa = a->allocate(64, 256);
  auto pb = b->allocate(64, 256);
  REQUIRE(pa.ok());
  REQUIRE(pb.ok());
  CHECK(b->free(*pa).code() == ErrorCode::invalid_argument);  // not b's
  CHECK(a->free(*pa).ok());
  CHECK(b->free(*pb).ok());
}

}  // namespace ballast::vulkan::test
