// `ballast backends [--load] [--json]`: every backend ballast knows, whether
// it is here and usable (and if not, exactly why), its devices and what they
// can do, notably whether weights can be read in place or must be uploaded.
// Plugin files are only found and checked unless --load is given: loading
// one runs its code.
#include "command.hpp"
#include "support/format.hpp"
#include "support/terminal.hpp"

#include <ballast/backend_registry.hpp>
#include <ballast/communicator.hpp>
#include <ballast/printable.hpp>
#include <ballast/read_plan.hpp>

#include <nlohmann/json.hpp>

#include <iostream>
#include <memory>
#include <string>

namespace ballast::cli {
namespace {

std::string registration_summary(const Capabilities& caps) {
  if (!caps.host_registration) {
    return "not supported (" + (caps.host_registration_note.empty() ? std::string("no reason given")
                                                                     : caps.host_registration_note) +
           "): weights are uploaded instead";
  }
  return std::string("supported, zero-copy (read-only: ") + (caps.read_only_registration ? "yes" : "no") +
         ", import alignment " + human_bytes(caps.import_alignment) + ")";
}

std::string devices_cell(const BackendListing& b) {
  return b.devices.empty() ? std::string("-") : std::to_string(b.devices.size());
}

// ballast's communicator libraries (comms/), in the order listed.
constexpr const char* kCommunicatorLibraries[] = {"mpi", "nccl"};

// The communicators `--comm` can pick: local is built in; a library is
// found on the plugin path (not loaded: MPI would start) or not, with why.
nlohmann::json communicators_json() {
  nlohmann::json list = nlohmann::json::array();
  list.push_back({{"name", "local"}, {"state", "built in"}, {"library", "built in"}, {"reason", ""}});
  for (const char* name : kCommunicatorLibraries) {
    const auto found = find_communicator(name);
    list.push_back({{"name", name},
                    {"state", found.ok() ? "found" : "not found"},
                    {"library", found.ok() ? *found : ""},
                    {"reason", found.ok() ? "" : found.error().message}});
  }
  return list;
}

int print_table(const std::vector<BackendListing>& listing, const std::vector<std::string>& search_dirs) {
  auto& out = std::cout;
  Table summary({"backend", "state", "devices", "library"}, {false, false, true, false});
  for (const auto& b : listing) {
    summary.add({b.name, std::string(backend_state_name(b.state)), devices_cell(b), b.library.empty() ? "-" : b.library});
  }
  summary.print(out);

  for (const auto& b : listing) {
    out << '\n' << b.name << ": " << backend_state_name(b.state) << '\n';
    if (!b.library.empty()) out << "  library: " << b.library << '\n';
    // A not-found or refused reason is the searched and refused lists
    // again; the lists read better.
    if (!b.reason.empty() && b.searched.empty()) out << "  reason: " << b.reason << '\n';
    if (!b.searched.empty()) {
      out << "  searched:\n";
      for (const auto& p : b.searched) out << "    " << p << '\n';
    }
    if (!b.refused.empty()) {
      out << "  refused (not loaded):\n";
      for (const auto& r : b.refused) out << "    " << r << '\n';
    }
    if (b.state == BackendListing::State::found) out << "  not loaded: run `ballast backends --load` to load it and list its devices\n";
    if (!b.devices.empty()) {
      Table devices({"index", "name", "uuid", "memory"}, {true, false, false, true});
      for (const auto& d : b.devices) devices.add({std::to_string(d.index), d.name, d.uuid, human_bytes(d.memory_bytes)});
      devices.print(out, "  ");
    }
    if (b.state == BackendListing::State::available) {
      const auto& caps = b.capabilities;
      out << "  device 0 capabilities:\n";
      out << "    host registration: " << registration_summary(caps) << '\n';
      out << "    max single allocation: " << human_bytes(caps.max_single_allocation) << '\n';
      out << "    f16 subnormals: " << (caps.flushes_f16_subnormals ? "may be flushed to zero" : "kept") << '\n';
      out << "    int8 codes: " << (caps.int8_codes_within_one ? "within one of the reference" : "exact") << '\n';
    }
  }

  out << "\ncold reads (ballast load, Residency::load):\n";
  out << "  io_uring: " << (io_uring_available() ? "available" : "not available: reads use a pool of pread threads") << '\n';
  out << "  GPUDirect Storage (cuFile): " << BALLAST_CUFILE_STATUS << '\n';
  out << "\ncommunicators (ballast load|derive --comm):\n";
  out << "  local: built in (ranks as threads of one process)\n";
  for (const char* name : kCommunicatorLibraries) {
    const auto found = find_communicator(name);
    out << "  " << name << ": " << (found.ok() ? "found: " + printable(*found) : printable(found.error().message)) << '\n';
  }

  out << "\nplugin search path (BALLAST_PLUGIN_PATH, then set_plugin_search_path(), then <libballast's folder>/ballast,"
         " then the build tree):\n";
  for (const auto& d : search_dirs) out << "  " << d << '\n';
  return kExitOk;
}

int print_json(const std::vector<BackendListing>& listing, const std::vector<std::string>& search_dirs) {
  nlohmann::json backends = nlohmann::json::array();
  for (const auto& b : listing) {
    nlohmann::json j;
    j["name"] = b.name;
    j["state"] = std::string(backend_state_name(b.state));
    j["available"] = b.state == BackendListing::State::available;
    j["reason"] = b.reason;
    j["library"] = b.library;
    j["searched"] = b.searched;
    j["refused"] = b.refused;
    nlohmann::json devices = nlohmann::json::array();
    for (const auto& d : b.devices) {
      devices.push_back({{"index", d.index}, {"name", d.name}, {"uuid", d.uuid}, {"driver", d.driver}, {"memory_bytes", d.memory_bytes}});
    }
    j["devices"] = devices;
    if (b.state == BackendListing::State::available) {
      const auto& c = b.capabilities;
      j["capabilities"] = {{"host_registration", c.host_registration},
                           {"read_only_registration", c.read_only_registration},
                           {"host_registration_note", c.host_registration_note},
                           {"import_alignment", c.import_alignment},
                           {"max_single_allocation", c.max_single_allocation},
                           {"flushes_f16_subnormals", c.flushes_f16_subnormals},
                           {"int8_codes_within_one", c.int8_codes_within_one}};
    } else {
      j["capabilities"] = nullptr;
    }
    backends.push_back(std::move(j));
  }
  nlohmann::json doc = {{"backends", backends},
                        {"cold_reads", {{"io_uring", io_uring_available()}, {"gpudirect_storage", BALLAST_CUFILE_STATUS}}},
                        {"communicators", communicators_json()},
                        {"plugin_search_path", search_dirs}};
  std::cout << json_text(doc) << '\n';
  return kExitOk;
}

const RegisterCommand kBackends{{
    "backends",
    "List every backend: found, available or why not, its devices and capabilities",
    [](CLI::App& sub) -> std::function<int()> {
      auto json = std::make_shared<bool>(false);
      auto load = std::make_shared<bool>(false);
      sub.add_flag("--json", *json, "machine-readable output");
      sub.add_flag("--load", *load,
                   "load every plugin found, to list its devices and capabilities (runs the plugins' code); "
                   "without it plugin files are only found and checked");
      return [json, load] {
        ListOptions options;
        options.load_all = *load;
        const auto listing = list_backends(options);
        const auto dirs = plugin_search_paths();
        return *json ? print_json(listing, dirs) : print_table(listing, dirs);
      };
    },
}};

}  // namespace
}  // namespace ballast::cli
