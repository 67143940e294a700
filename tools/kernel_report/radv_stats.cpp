// radv_stats: compiles compute pipelines with the Vulkan driver the loader
// gives it (tools/kernel-report runs it with RADV and RADV_FORCE_FAMILY, so
// RADV's null winsys compiles for a chosen AMD family with no GPU present)
// and prints the driver's statistics for each, read through
// VK_KHR_pipeline_executable_properties.
//
//   radv_stats NAME FILE.spv WORKGROUP VARIANT ZERO_POINTS FAST [NAME FILE ...]
//
// One line per pipeline:
//   stat <TAB> NAME <TAB> VGPRs <TAB> spilled VGPRs+SGPRs <TAB> scratch bytes
//        <TAB> LDS bytes <TAB> instructions <TAB> subgroups per SIMD (the
//        driver's theoretical occupancy)
// then one line per global memory instruction of the driver's assembly:
//   mem <TAB> NAME <TAB> mnemonic (global_load_dwordx4, global_store_dword, ...)
// With RADV_STATS_ASM set, the assembly itself goes to stderr.
// The specialization constants are the Vulkan backend's (backends/vulkan/
// kernels.cpp): 0 workgroup size, 1 variant, 2 zero-point form, 3 packet
// pipeline; the layout
// has the backend's push-constant block (76 bytes; 128 reserved).
#include <vulkan/vulkan.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace {

[[noreturn]] void die(const std::string& what, VkResult r) {
  std::printf("error: %s (VkResult %d)\n", what.c_str(), static_cast<int>(r));
  std::exit(2);
}

void check(VkResult r, const char* what) {
  if (r != VK_SUCCESS) die(what, r);
}

std::uint64_t stat_value(const VkPipelineExecutableStatisticKHR& s) {
  switch (s.format) {
    case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR: return s.value.b32;
    case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR: return static_cast<std::uint64_t>(s.value.i64);
    case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR: return s.value.u64;
    case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_FLOAT64_KHR: return static_cast<std::uint64_t>(s.value.f64);
    default: return 0;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 7 || (argc - 1) % 6 != 0) {
    std::printf("usage: radv_stats NAME FILE.spv WORKGROUP VARIANT ZERO_POINTS FAST [...]\n");
    return 2;
  }
  VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.apiVersion = VK_API_VERSION_1_2;
  VkInstanceCreateInfo ici{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  ici.pApplicationInfo = &app;
  VkInstance instance;
  check(vkCreateInstance(&ici, nullptr, &instance), "vkCreateInstance");
  std::uint32_t count = 0;
  check(vkEnumeratePhysicalDevices(instance, &count, nullptr), "vkEnumeratePhysicalDevices");
  if (count == 0) die("no Vulkan device (is RADV_FORCE_FAMILY set and the RADV ICD selected?)", VK_ERROR_INITIALIZATION_FAILED);
  std::vector<VkPhysicalDevice> devices(count);
  check(vkEnumeratePhysicalDevices(instance, &count, devices.data()), "vkEnumeratePhysicalDevices");
  VkPhysicalDeviceProperties props;
  vkGetPhysicalDeviceProperties(devices[0], &props);
  std::fprintf(stderr, "device: %s\n", props.deviceName);

  VkPhysicalDeviceBufferDeviceAddressFeatures bda{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_BUFFER_DEVICE_ADDRESS_FEATURES};
  bda.bufferDeviceAddress = VK_TRUE;
  VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR exe{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR};
  exe.pipelineExecutableInfo = VK_TRUE;
  exe.pNext = &bda;
  const float priority = 1.0f;
  VkDeviceQueueCreateInfo queue{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  queue.queueCount = 1;
  queue.pQueuePriorities = &priority;
  const char* extensions[] = {VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME};
  VkDeviceCreateInfo dci{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  dci.pNext = &exe;
  dci.queueCreateInfoCount = 1;
  dci.pQueueCreateInfos = &queue;
  dci.enabledExtensionCount = 1;
  dci.ppEnabledExtensionNames = extensions;
  VkDevice device;
  check(vkCreateDevice(devices[0], &dci, nullptr, &device), "vkCreateDevice");
  auto get_executables = reinterpret_cast<PFN_vkGetPipelineExecutablePropertiesKHR>(
      vkGetDeviceProcAddr(device, "vkGetPipelineExecutablePropertiesKHR"));
  auto get_statistics = reinterpret_cast<PFN_vkGetPipelineExecutableStatisticsKHR>(
      vkGetDeviceProcAddr(device, "vkGetPipelineExecutableStatisticsKHR"));
  auto get_representations = reinterpret_cast<PFN_vkGetPipelineExecutableInternalRepresentationsKHR>(
      vkGetDeviceProcAddr(device, "vkGetPipelineExecutableInternalRepresentationsKHR"));
  if (!get_executables || !get_statistics || !get_representations) die("VK_KHR_pipeline_executable_properties missing", VK_ERROR_EXTENSION_NOT_PRESENT);

  VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, 128};
  VkPipelineLayoutCreateInfo lci{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
  lci.pushConstantRangeCount = 1;
  lci.pPushConstantRanges = &range;
  VkPipelineLayout layout;
  check(vkCreatePipelineLayout(device, &lci, nullptr, &layout), "vkCreatePipelineLayout");

  for (int a = 1; a + 5 < argc; a += 6) {
    const std::string name = argv[a];
    std::ifstream in(argv[a + 1], std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (bytes.empty() || bytes.size() % 4 != 0) die("cannot read " + std::string(argv[a + 1]), VK_ERROR_UNKNOWN);
    std::vector<std::uint32_t> words(bytes.size() / 4);
    std::memcpy(words.data(), bytes.data(), bytes.size());
    VkShaderModuleCreateInfo mci{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
    mci.codeSize = bytes.size();
    mci.pCode = words.data();
    VkShaderModule module;
    check(vkCreateShaderModule(device, &mci, nullptr, &module), "vkCreateShaderModule");
    std::uint32_t constants[4];
    for (int i = 0; i < 4; ++i) constants[i] = static_cast<std::uint32_t>(std::atoi(argv[a + 2 + i]));
    VkSpecializationMapEntry entries[4] = {{0, 0, 4}, {1, 4, 4}, {2, 8, 4}, {3, 12, 4}};
    VkSpecializationInfo spec{4, entries, sizeof constants, constants};
    VkComputePipelineCreateInfo pci{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
    pci.flags = VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR | VK_PIPELINE_CREATE_CAPTURE_INTERNAL_REPRESENTATIONS_BIT_KHR;
    pci.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
    pci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
    pci.stage.module = module;
    pci.stage.pName = "main";
    pci.stage.pSpecializationInfo = &spec;
    pci.layout = layout;
    VkPipeline pipeline;
    check(vkCreateComputePipelines(device, VK_NULL_HANDLE, 1, &pci, nullptr, &pipeline), ("pipeline " + name).c_str());

    VkPipelineInfoKHR pinfo{VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR};
    pinfo.pipeline = pipeline;
    std::uint32_t n = 0;
    check(get_executables(device, &pinfo, &n, nullptr), "vkGetPipelineExecutablePropertiesKHR");
    std::map<std::string, std::uint64_t> stats;
    std::vector<std::string> mem;
    for (std::uint32_t e = 0; e < n; ++e) {
      VkPipelineExecutableInfoKHR einfo{VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR};
      einfo.pipeline = pipeline;
      einfo.executableIndex = e;
      std::uint32_t sn = 0;
      check(get_statistics(device, &einfo, &sn, nullptr), "vkGetPipelineExecutableStatisticsKHR");
      std::vector<VkPipelineExecutableStatisticKHR> s(sn, {VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR});
      check(get_statistics(device, &einfo, &sn, s.data()), "vkGetPipelineExecutableStatisticsKHR");
      for (const auto& st : s) {
        stats[st.name] += stat_value(st);
        if (std::getenv("RADV_STATS_ALL")) std::fprintf(stderr, "  %s %s = %llu\n", name.c_str(), st.name,
                                                         static_cast<unsigned long long>(stat_value(st)));
      }
      std::uint32_t rn = 0;
      check(get_representations(device, &einfo, &rn, nullptr), "vkGetPipelineExecutableInternalRepresentationsKHR");
      std::vector<VkPipelineExecutableInternalRepresentationKHR> reps(
          rn, {VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INTERNAL_REPRESENTATION_KHR});
      check(get_representations(device, &einfo, &rn, reps.data()), "vkGetPipelineExecutableInternalRepresentationsKHR");
      std::vector<std::vector<char>> texts(rn);
      for (std::uint32_t r = 0; r < rn; ++r) {
        texts[r].resize(reps[r].dataSize);
        reps[r].pData = texts[r].data();
      }
      check(get_representations(device, &einfo, &rn, reps.data()), "vkGetPipelineExecutableInternalRepresentationsKHR");
      for (std::uint32_t r = 0; r < rn; ++r) {
        if (std::strcmp(reps[r].name, "Assembly") != 0) continue;
        const std::string text(texts[r].data(), strnlen(texts[r].data(), texts[r].size()));
        if (std::getenv("RADV_STATS_ASM")) std::fprintf(stderr, "%s\n", text.c_str());
        for (std::size_t at = text.find("global_"); at != std::string::npos; at = text.find("global_", at + 1)) {
          const std::size_t end = text.find_first_of(" \t\n", at);
          mem.push_back(text.substr(at, end - at));
        }
      }
    }
    std::printf("stat\t%s\t%llu\t%llu\t%llu\t%llu\t%llu\t%llu\n", name.c_str(),
                static_cast<unsigned long long>(stats["VGPRs"]),
                static_cast<unsigned long long>(stats["Spilled VGPRs"] + stats["Spilled SGPRs"]),
                static_cast<unsigned long long>(stats["Scratch size"]), static_cast<unsigned long long>(stats["LDS size"]),
                static_cast<unsigned long long>(stats["Instructions"]),
                static_cast<unsigned long long>(stats["Subgroups per SIMD"]));
    for (const auto& m : mem) std::printf("mem\t%s\t%s\n", name.c_str(), m.c_str());
    vkDestroyPipeline(device, pipeline, nullptr);
    vkDestroyShaderModule(device, module, nullptr);
  }
  vkDestroyPipelineLayout(device, layout, nullptr);
  vkDestroyDevice(device, nullptr);
  vkDestroyInstance(instance, nullptr);
  return 0;
}
