// Khronos validation-layer messages as ballast errors.
//
// With `?validation=on` every warning or error the layer reports through
// VK_EXT_debug_utils is counted and held; the backend's next call returns it
// (once) as a device_error, so a misuse surfaces at the call after the one
// that caused it instead of scrolling past on stderr.
#pragma once

#include "vk_api.hpp"

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

namespace ballast::vulkan {

inline constexpr const char* kValidationLayer = "VK_LAYER_KHRONOS_validation";

class ValidationLog {
 public:
  // For VkInstanceCreateInfo::pNext and vkCreateDebugUtilsMessengerEXT.
  VkDebugUtilsMessengerCreateInfoEXT messenger_info();

  // Total messages since the backend opened.
  std::uint64_t message_count() const;
  // The oldest message not yet reported, as an error; clears it.
  std::optional<Error> take_pending();

  void record(const VkDebugUtilsMessengerCallbackDataEXT& data, VkDebugUtilsMessageSeverityFlagBitsEXT severity);

 private:
  mutable std::mutex mutex_;
  std::uint64_t count_ = 0;
  std::optional<std::string> pending_;
  std::uint64_t dropped_since_pending_ = 0;
};

// Whether the loader can find the validation layer on this machine.
bool validation_layer_installed();

}  // namespace ballast::vulkan
