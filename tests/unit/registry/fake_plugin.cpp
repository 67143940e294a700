// A stand-in plugin library, built several times with different
// descriptors and behaviours (see CMakeLists.txt) so the registry's checks
// and error paths can be exercised without any GPU.
//   FAKE_ABI_VERSION, FAKE_FINGERPRINT, FAKE_NAME: the descriptor fields
//   FAKE_BEHAVIOUR: fake::Behaviour::{working, unavailable, throws}
//   FAKE_FINGERPRINT_FIELD (optional): the core's own fingerprint with only
//     this ';'-separated field (0-based) changed, to prove that every field
//     of it is compared
#include <ballast/plugin_abi.hpp>

#include <stdexcept>
#include <string>

namespace fake {

enum class Behaviour { working, unavailable, throws };

ballast::DeviceInfo device(int index) {
  ballast::DeviceInfo d;
  d.backend = FAKE_NAME;
  d.index = index;
  d.name = "fake device " + std::to_string(index);
  d.uuid = "GPU-0000000" + std::to_string(index) + "-aaaa-bbbb-cccc-0123456789AB";
  d.memory_bytes = (std::uint64_t{1} << 30) * static_cast<std::uint64_t>(index + 1);
  return d;
}

// Remembers which device it was opened for; every operation is refused.
class Backend final : public ballast::GpuBackend {
 public:
  explicit Backend(ballast::DeviceInfo info) : info_(std::move(info)) {
    caps_.host_registration = false;
    caps_.host_registration_note = "fake backend: uploads only";
    caps_.max_single_allocation = 1 << 20;
  }
 private:
  const ballast::DeviceInfo& do_info() const override { return info_; }
  const ballast::Capabilities& do_capabilities() const override { return caps_; }
  ballast::Result<ballast::DevicePtr> do_allocate(std::uint64_t, std::uint64_t) override { return refuse(); }
  ballast::Status do_free(ballast::DevicePtr, std::uint64_t) override { return refuse(); }
  ballast::Status do_copy_to_device(ballast::DevicePtr, std::span<const std::byte>) override { return refuse(); }
  ballast::Status do_copy_to_host(std::span<std::byte>, ballast::DevicePtr) override { return refuse(); }
  ballast::Status do_copy_device(ballast::DevicePtr, ballast::DevicePtr, std::uint64_t) override { return refuse(); }
  ballast::Result<ballast::DevicePtr> do_register_host(const void*, std::uint64_t, ballast::HostAccess) override {
    return refuse();
  }
  ballast::Status do_unregister_host(ballast::DevicePtr, std::uint64_t, ballast::HostAccess) override { return refuse(); }
  ballast::Status do_launch(const ballast::DerivationLaunch&, const ballast::DerivationSizes&) override { return refuse(); }
  ballast::Status do_synchronize() override { return {}; }

  static ballast::Error refuse() { return ballast::make_error(ballast::ErrorCode::unsupported, "fake backend"); }
  ballast::DeviceInfo info_;
  ballast::Capabilities caps_;
};

class Plugin final : public ballast::BackendPlugin {
 public:
  ballast::Result<std::vector<ballast::DeviceInfo>> devices() override {
    switch (FAKE_BEHAVIOUR) {
      case Behaviour::unavailable:
        return ballast::make_error(ballast::ErrorCode::unavailable, "no fake physical device (test plugin)");
      case Behaviour::throws: throw std::runtime_error("fake plugin throws");
      case Behaviour::working: break;
    }
    return std::vector<ballast::DeviceInfo>{device(0), device(1)};
  }

  ballast::Result<std::unique_ptr<ballast::GpuBackend>> open(const ballast::BackendConfig& config) override {
    if (!config.options.empty() && config.options.begin()->first != "validation") {
      return ballast::make_error(ballast::ErrorCode::invalid_argument,
                                 "unknown option \"" + config.options.begin()->first + "\"; known: validation");
    }
    int index = config.device_index.value_or(0);
    if (config.device_uuid) index = config.device_uuid->find("00000001") != std::string::npos ? 1 : 0;
    return std::unique_ptr<ballast::GpuBackend>(std::make_unique<Backend>(device(index)));
  }
};

ballast::BackendPlugin* create() { return new Plugin(); }

}  // namespace fake

#ifdef FAKE_FINGERPRINT_FIELD
namespace fake {
// kFingerprint with one field altered: a character appended to it.
const char* one_field_changed() {
  static const std::string changed = [] {
    std::string f = ballast::plugin_detail::kFingerprint;
    std::size_t start = 0;
    for (int i = 0; i < FAKE_FINGERPRINT_FIELD; ++i) start = f.find(';', start) + 1;
    const std::size_t end = f.find(';', start);
    f.insert(end == std::string::npos ? f.size() : end, "x");
    return f;
  }();
  return changed.c_str();
}
}  // namespace fake
#undef FAKE_FINGERPRINT
#define FAKE_FINGERPRINT fake::one_field_changed()
#endif

extern "C" const BallastPluginDescriptor* ballast_plugin_descriptor() {
  static const BallastPluginDescriptor descriptor{FAKE_ABI_VERSION, FAKE_FINGERPRINT, FAKE_NAME, &fake::create};
  return &descriptor;
}
