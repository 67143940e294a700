#include "validation.hpp"

#include <ballast/log.hpp>

#include <cstring>
#include <vector>

namespace ballast::vulkan {
namespace {

VKAPI_ATTR VkBool32 VKAPI_CALL on_message(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                          VkDebugUtilsMessageTypeFlagsEXT /*types*/,
                                          const VkDebugUtilsMessengerCallbackDataEXT* data, void* user) {
  if (data != nullptr && user != nullptr) static_cast<ValidationLog*>(user)->record(*data, severity);
  return VK_FALSE;  // never abort the call: the error is reported by ballast instead
}

}  // namespace

VkDebugUtilsMessengerCreateInfoEXT ValidationLog::messenger_info() {
  VkDebugUtilsMessengerCreateInfoEXT info{};
  info.sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT;
  info.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
  info.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                     VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
  info.pfnUserCallback = on_message;
  info.pUserData = this;
  return info;
}

void ValidationLog::record(const VkDebugUtilsMessengerCallbackDataEXT& data,
                           VkDebugUtilsMessageSeverityFlagBitsEXT severity) {
  std::string text = severity == VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT ? "validation error" : "validation warning";
  if (data.pMessageIdName != nullptr) text += std::string(" [") + data.pMessageIdName + "]";
  if (data.pMessage != nullptr) text += std::string(": ") + data.pMessage;
  // Every message reaches the engine's log as it arrives; the oldest one
  // also becomes the next call's error (below).
  log_message(severity == VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT ? LogLevel::error : LogLevel::warning, "vulkan",
              text);
  std::lock_guard lock(mutex_);
  ++count_;
  if (pending_)
    ++dropped_since_pending_;
  else
    pending_ = std::move(text);
}

std::uint64_t ValidationLog::message_count() const {
  std::lock_guard lock(mutex_);
  return count_;
}

std::optional<Error> ValidationLog::take_pending() {
  std::lock_guard lock(mutex_);
  if (!pending_) return std::nullopt;
  std::string message = std::move(*pending_);
  if (dropped_since_pending_ > 0) message += " (and " + std::to_string(dropped_since_pending_) + " more messages)";
  pending_.reset();
  dropped_since_pending_ = 0;
  auto e = make_error(ErrorCode::device_error, std::move(message));
  e.native = kValidationLayer;
  e.with_context("reported by the Vulkan validation layer during an earlier call");
  return e;
}

bool validation_layer_installed() {
  uint32_t count = 0;
  if (vkEnumerateInstanceLayerProperties(&count, nullptr) != VK_SUCCESS) return false;
  std::vector<VkLayerProperties> layers(count);
  if (vkEnumerateInstanceLayerProperties(&count, layers.data()) != VK_SUCCESS) return false;
  for (const auto& layer : layers)
    if (std::strcmp(layer.layerName, kValidationLayer) == 0) return true;
  return false;
}

}  // namespace ballast::vulkan
