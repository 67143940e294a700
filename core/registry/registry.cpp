#include "registry/registry.hpp"

#include "backend/plugin_tables.hpp"

#include <ballast/plugin_abi.hpp>

#include <algorithm>
#include <iterator>
#include <cctype>
#include <mutex>

namespace ballast {
namespace registry {
namespace {

constexpr std::string_view kBuiltIn = "built in";

// The first-party backends, listed whether or not they are here so a
// missing plugin is reported. The build says which they are (each backend
// folder declares itself in backends/CMakeLists.txt), so adding one edits
// nothing in core/: BALLAST_FIRST_PARTY_BACKENDS is "cpu", "cuda", ...
constexpr std::string_view kFirstParty[] = {BALLAST_FIRST_PARTY_BACKENDS};

// The backends given to register_backend. A function-local static, so a
// registrar running during another library's (or this one's) static
// initialisation finds it made; never destroyed, since backends may be
// opened until exit.
struct Registered {
  std::mutex mutex;
  std::vector<std::pair<std::string, const detail::PluginTable*>> entries;
};

Registered& registered() {
  static auto* table = new Registered;
  return *table;
}

const detail::PluginTable* registered_plugin(std::string_view name) {
  Registered& r = registered();
  std::lock_guard lock(r.mutex);
  for (const auto& [n, plugin] : r.entries) {
    if (n == name) return plugin;
  }
  return nullptr;
}

std::vector<std::string> registered_names() {
  Registered& r = registered();
  std::vector<std::string> names;
  {
    std::lock_guard lock(r.mutex);
    for (const auto& entry : r.entries) names.push_back(entry.first);
  }
  std::sort(names.begin(), names.end());
  return names;
}

bool is_known(PluginLoader& loader, std::string_view name) {
  if (std::find(std::begin(kFirstParty), std::end(kFirstParty), name) != std::end(kFirstParty)) return true;
  if (registered_plugin(name) != nullptr) return true;
  const auto found = loader.discover();
  return std::find(found.begin(), found.end(), name) != found.end();
}

std::string known_list(PluginLoader& loader) {
  std::string out;
  for (const auto& n : known_backend_names(loader)) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// A name open_backend and plugin_extension do not know, with those they do.
Error unknown_backend(PluginLoader& loader, std::string_view name) {
  return make_error(ErrorCode::invalid_argument,
                    "unknown backend \"" + std::string(name) + "\"; known backends: " + known_list(loader));
}

// A registered name is never looked up as a file.
Result<LoadedPlugin> find_plugin(PluginLoader& loader, std::string_view name) {
  if (const detail::PluginTable* plugin = registered_plugin(name)) return LoadedPlugin{plugin, std::string(kBuiltIn)};
  auto loaded = loader.load(name);
  if (!loaded.ok()) {
    // Registered (and claimed in the loader) while this lookup ran.
    if (const detail::PluginTable* plugin = registered_plugin(name)) return LoadedPlugin{plugin, std::string(kBuiltIn)};
  }
  return loaded;
}

Error thrown(std::string_view what) {
  return make_error(ErrorCode::internal, "plugin " + std::string(what) + " threw an exception");
}

// Plugins promise not to throw (the SDK's adapter catches); this keeps a
// broken one from taking the caller down with it.
Result<std::vector<DeviceInfo>> devices_of(const detail::PluginTable& plugin) {
  try {
    return plugin.devices();
  } catch (...) {
    return thrown("devices()");
  }
}

Result<std::unique_ptr<GpuBackend>> open_with(const detail::PluginTable& plugin, const BackendConfig& config) {
  try {
    return plugin.open(config);
  } catch (...) {
    return thrown("open()");
  }
}

bool same_uuid(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

std::string device_list(const std::vector<DeviceInfo>& devices) {
  std::string out;
  for (const auto& d : devices) {
    out += (out.empty() ? "" : "; ") + std::to_string(d.index) + ": " + d.name + " (" + d.uuid + ")";
  }
  return out;
}

// The plugin opens the device; the registry first makes sure the one asked
// for exists so the error can list the ones that do.
Status check_device(const BackendConfig& config, const std::vector<DeviceInfo>& devices) {
  if (devices.empty()) return make_error(ErrorCode::unavailable, "backend \"" + config.name + "\" reports no devices");
  if (config.device_index && static_cast<std::size_t>(*config.device_index) >= devices.size()) {
    return make_error(ErrorCode::not_found, "no device with index " + std::to_string(*config.device_index) +
                                                "; available devices: " + device_list(devices));
  }
  if (config.device_uuid) {
    const bool found = std::any_of(devices.begin(), devices.end(),
                                   [&](const DeviceInfo& d) { return same_uuid(d.uuid, *config.device_uuid); });
    if (!found) {
      return make_error(ErrorCode::not_found,
                        "no device with UUID " + *config.device_uuid + "; available devices: " + device_list(devices));
    }
  }
  return {};
}

BackendListing::State load_state(ErrorCode code) {
  return code == ErrorCode::not_found ? BackendListing::State::not_found : BackendListing::State::load_error;
}

// A loaded plugin's devices() or open() failed: a plugin that broke the
// ABI's contract (a table the core refuses) failed to load, and the error
// names its file; one whose device is not there is unavailable.
Error from_plugin(Error e, const std::string& library) {
  if (e.code == ErrorCode::abi_mismatch && e.file.empty()) e.file = library;
  return e;
}
BackendListing::State plugin_state(const Error& e) {
  return e.code == ErrorCode::abi_mismatch ? BackendListing::State::load_error : BackendListing::State::unavailable;
}

// The files under `name` refused before the search reached `library`.
std::vector<std::string> refused_before(PluginLoader& loader, const std::string& name, const std::string& library) {
  const auto reports = loader.probe(name);
  std::vector<CandidateReport> before;
  for (const auto& r : reports) {
    if (r.path == library) break;
    before.push_back(r);
  }
  return refusal_lines(before);
}

// Where nothing was admitted: not_found, or refused when files were there.
void mark_missing(BackendListing& out, PluginLoader& loader, const std::vector<CandidateReport>& reports) {
  out.refused = refusal_lines(reports);
  out.state = out.refused.empty() ? BackendListing::State::not_found : BackendListing::State::refused;
  out.searched = loader.candidate_paths(out.name);
}

// A listing that loads nothing: what the folders hold under the name.
BackendListing unloaded_listing(PluginLoader& loader, const std::string& name) {
  BackendListing out;
  out.name = name;
  const auto reports = loader.probe(name);
  for (const auto& r : reports) {
    if (r.verdict != PluginCandidate::Verdict::admitted) continue;
    out.state = BackendListing::State::found;
    out.library = r.path;
    std::vector<CandidateReport> before(reports.begin(), reports.begin() + (&r - reports.data()));
    out.refused = refusal_lines(before);  // only those passed over on the way to it
    return out;
  }
  mark_missing(out, loader, reports);
  std::string text = "plugin libballast-" + name + ".so for backend \"" + name + "\" not found (not loaded: listing only)";
  for (const auto& line : out.refused) text += "; refused " + line;
  out.reason = std::move(text);
  return out;
}

BackendListing listing_for(PluginLoader& loader, const std::string& name, bool load) {
  if (!load && registered_plugin(name) == nullptr && !loader.loaded(name)) return unloaded_listing(loader, name);
  BackendListing out;
  out.name = name;
  auto loaded = find_plugin(loader, name);
  if (!loaded.ok()) {
    out.state = load_state(loaded.code());
    out.reason = loaded.error().to_string();
    if (out.state == BackendListing::State::not_found) mark_missing(out, loader, loader.probe(name));
    return out;
  }
  out.library = loaded->library;
  // Copies passed over on the way to the loaded one are listed with any
  // state: a tampered file earlier on the path stays in sight.
  if (!out.library.empty()) out.refused = refused_before(loader, name, out.library);
  auto devices = devices_of(*loaded->plugin);
  if (!devices.ok()) {
    out.state = plugin_state(devices.error());
    out.reason = from_plugin(std::move(devices.error()), out.library).to_string();
    return out;
  }
  out.devices = std::move(*devices);
  BackendConfig first;
  first.name = name;
  first.text = name;
  if (auto s = check_device(first, out.devices); !s.ok()) {
    out.state = BackendListing::State::unavailable;
    out.reason = s.to_string();
    return out;
  }
  // Capabilities belong to an opened device; device 0 stands for the backend.
  first.device_index = 0;
  first.text = name + ":0";
  auto backend = open_with(*loaded->plugin, first);
  if (!backend.ok()) {
    out.state = plugin_state(backend.error());
    out.reason = from_plugin(std::move(backend.error()), out.library).with_context("opening device 0").to_string();
    return out;
  }
  out.capabilities = (*backend)->capabilities();
  out.state = BackendListing::State::available;
  return out;
}

}  // namespace

Result<std::unique_ptr<GpuBackend>> open_backend(PluginLoader& loader, std::string_view text) {
  BALLAST_ASSIGN_OR_RETURN(auto config, parse_backend_config(text));
  const std::string context = "opening backend \"" + config.text + "\"";
  if (!is_known(loader, config.name)) return unknown_backend(loader, config.name);
  BALLAST_ASSIGN_OR_RETURN(auto loaded, find_plugin(loader, config.name), context);
  auto devices = devices_of(*loaded.plugin);
  if (!devices) return from_plugin(std::move(devices.error()), loaded.library).with_context(context);
  BALLAST_RETURN_IF_ERROR(check_device(config, *devices), context);
  auto backend = open_with(*loaded.plugin, config);
  if (!backend) return from_plugin(std::move(backend.error()), loaded.library).with_context(context);
  return backend;
}

Result<void*> plugin_extension(PluginLoader& loader, std::string_view backend, const char* name) {
  const std::string context = "looking up extension " +
                              (name != nullptr ? "\"" + std::string(name) + "\"" : std::string("(null)")) +
                              " of backend \"" + std::string(backend) + "\"";
  if (name == nullptr) return make_error(ErrorCode::invalid_argument, "no extension name").with_context(context);
  if (!is_known(loader, backend)) return unknown_backend(loader, backend).with_context(context);
  BALLAST_ASSIGN_OR_RETURN(auto loaded, find_plugin(loader, backend), context);
  try {
    return loaded.plugin->extension(name);
  } catch (...) {
    return thrown("get_proc_address()").with_context(context);
  }
}

std::vector<BackendListing> list_backends(PluginLoader& loader, const ListOptions& options) {
  std::vector<BackendListing> out;
  for (const auto& name : known_backend_names(loader)) {
    const bool load = options.load_all || std::find(options.load.begin(), options.load.end(), name) != options.load.end();
    out.push_back(listing_for(loader, name, load));
  }
  return out;
}

std::vector<std::string> known_backend_names(PluginLoader& loader) {
  std::vector<std::string> names(std::begin(kFirstParty), std::end(kFirstParty));
  auto add = [&names](const std::vector<std::string>& more) {
    for (const auto& n : more) {
      if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
    }
  };
  add(registered_names());
  add(loader.discover());
  return names;
}

}  // namespace registry

Status register_backend(std::string name, const ballast_plugin& table) {
  const std::string context = "registering backend \"" + name + "\"";
  if (!plugin_detail::is_backend_name(name)) {
    return make_error(ErrorCode::invalid_argument,
                      "a backend name is a lowercase identifier, [a-z][a-z0-9_]*")
        .with_context(context);
  }
  // The same checks as a plugin file's table: the ABI major, the name.
  auto checked = detail::PluginTable::check(&table, name);
  if (!checked) return std::move(checked.error()).with_context(context);
  registry::Registered& r = registry::registered();
  auto taken = [&r, &name] {
    return std::any_of(r.entries.begin(), r.entries.end(), [&name](const auto& entry) { return entry.first == name; });
  };
  const auto already_registered = [&context] {
    return make_error(ErrorCode::unsupported, "the name is already registered").with_context(context);
  };
  {
    std::lock_guard lock(r.mutex);
    if (taken()) return already_registered();
  }
  // Keeps the process loader from loading a file of this name from now on
  // (only it serves open_backend; before it is made no file can have been
  // loaded). Not under the table's lock: a load in progress, which this
  // waits for, may itself look up a registered backend.
  if (registry::PluginLoader* loader = registry::process_plugin_loader_if_made()) {
    if (Status claimed = loader->claim(name); !claimed.ok()) return std::move(claimed).with_context(context);
  }
  std::lock_guard lock(r.mutex);
  if (taken()) return already_registered();  // by another thread meanwhile: the claim is right for it too
  // Kept for the life of the process, like the table it reads.
  r.entries.emplace_back(std::move(name), checked->release());
  return {};
}

std::vector<std::string> known_backend_names() {
  return registry::known_backend_names(registry::process_plugin_loader());
}

std::string_view backend_state_name(BackendListing::State s) noexcept {
  switch (s) {
    case BackendListing::State::available: return "available";
    case BackendListing::State::unavailable: return "unavailable";
    case BackendListing::State::not_found: return "not found";
    case BackendListing::State::load_error: return "load error";
    case BackendListing::State::found: return "found";
    case BackendListing::State::refused: return "refused";
  }
  return "unknown";
}

Result<std::unique_ptr<GpuBackend>> open_backend(std::string_view config) {
  return registry::open_backend(registry::process_plugin_loader(), config);
}

Result<void*> plugin_extension(std::string_view backend, const char* name) {
  return registry::plugin_extension(registry::process_plugin_loader(), backend, name);
}

std::vector<BackendListing> list_backends() { return registry::list_backends(registry::process_plugin_loader()); }

std::vector<BackendListing> list_backends(const ListOptions& options) {
  return registry::list_backends(registry::process_plugin_loader(), options);
}

void set_plugin_search_path(std::vector<std::string> folders) {
  registry::process_plugin_loader().set_search_dirs(registry::default_plugin_search_dirs(folders));
}

std::vector<std::string> plugin_search_paths() { return registry::process_plugin_loader().search_dirs(); }

}  // namespace ballast
