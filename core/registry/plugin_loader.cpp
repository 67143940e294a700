#include "registry/plugin_loader.hpp"

#include "registry/shared_library.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>

namespace ballast::registry {
namespace {

void add_unique(std::vector<std::string>& dirs, std::string dir) {
  if (dir.empty()) return;
  std::error_code ec;
  const auto absolute = std::filesystem::absolute(dir, ec);
  // Kept relative, it would be looked up in whatever folder the process is
  // in at load time (a model's folder, in a CLI run): dropped instead.
  if (ec || !absolute.is_absolute()) return;
  dir = absolute.lexically_normal().string();
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  for (const auto& d : dirs) {
    if (d == dir) return;
  }
  dirs.push_back(std::move(dir));
}

// Reads the table's plain-C version fields before anything else of it.
Result<std::unique_ptr<detail::PluginTable>> checked_table(const SharedLibrary& lib, std::string_view name) {
  auto symbol = find_symbol(lib, kEntrySymbol);
  if (!symbol.ok()) {
    Error e = std::move(symbol.error());
    e.code = ErrorCode::abi_mismatch;
    e.message = find_symbol(lib, kOldDescriptorSymbol).ok()
                    ? "built for the C++ plugin ABI of ballast 0.1 (it exports ballast_plugin_descriptor); rebuild it "
                      "against this ballast's plugin_api.h (plugin ABI " +
                          detail::api_version_text(BALLAST_PLUGIN_API_MAJOR, BALLAST_PLUGIN_API_MINOR) + ")"
                    : "not a ballast plugin: " + e.message;
    e.file = lib.path;
    return e;
  }
  auto entry = reinterpret_cast<ballast_plugin_entry_fn>(*symbol);
  auto table = detail::PluginTable::check(entry(), name);
  if (!table) {
    table.error().file = lib.path;
    return std::move(table.error());
  }
  return table;
}

}  // namespace

struct PluginLoader::Slot {
  std::string name;
  std::mutex mutex;  // held across a load, so concurrent first touches share it
  std::unique_ptr<Result<LoadedPlugin>> outcome;
  std::uint64_t generation = 0;  // of the search folders the outcome came from
  bool claimed = false;          // registered with register_backend: no file is loaded
};

namespace {

// The slots this thread is loading. Loading runs the plugin's code (its
// static constructors inside dlopen, then its entry point) with the slot's
// mutex held; one that calls back into the registry for its own name
// (list_backends(), open_backend("<itself>")) would lock that mutex again
// and hang for ever. Such a call is answered at once instead.
class LoadingSlot {
 public:
  explicit LoadingSlot(const void* slot) noexcept : slot_(slot), outer_(innermost_) { innermost_ = this; }
  ~LoadingSlot() { innermost_ = outer_; }
  LoadingSlot(const LoadingSlot&) = delete;
  LoadingSlot& operator=(const LoadingSlot&) = delete;

  static bool active(const void* slot) noexcept {
    for (const LoadingSlot* f = innermost_; f != nullptr; f = f->outer_)
      if (f->slot_ == slot) return true;
    return false;
  }

 private:
  const void* slot_;
  const LoadingSlot* outer_;
  static thread_local const LoadingSlot* innermost_;
};
thread_local const LoadingSlot* LoadingSlot::innermost_ = nullptr;

Error loading_itself(std::string_view name) {
  return make_error(ErrorCode::unsupported,
                    "the plugin for backend \"" + std::string(name) +
                        "\" called back into the registry for itself while it was being loaded (from a static "
                        "constructor or its entry point): refused, since waiting for its own load would hang");
}

void add_path_list(std::vector<std::string>& dirs, std::string_view list) {
  while (true) {
    const auto sep = list.find(plugin_path_separator());
    add_unique(dirs, std::string(list.substr(0, sep)));
    if (sep == std::string_view::npos) break;
    list.remove_prefix(sep + 1);
  }
}

// Whether libballast is the build tree's copy. Compared as files, not
// strings, so a symlinked build folder still counts.
bool running_from_build_tree(const std::string& core_dir) {
  std::error_code ec;
  return !core_dir.empty() && std::filesystem::equivalent(core_dir, BALLAST_BUILD_LIBRARY_DIR, ec) && !ec;
}

}  // namespace

std::vector<std::string> default_plugin_search_dirs(const std::vector<std::string>& engine_dirs) {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("BALLAST_PLUGIN_PATH")) add_path_list(dirs, env);
  for (const auto& d : engine_dirs) add_unique(dirs, d);
  const std::string core_dir = core_library_directory();
  if (!core_dir.empty()) add_unique(dirs, (std::filesystem::path(core_dir) / BALLAST_PLUGIN_SUBDIR).string());
  // The build tree keeps plugins next to libballast (build/<preset>/lib).
  if (running_from_build_tree(core_dir)) add_unique(dirs, core_dir);
  return dirs;
}

PluginLoader::PluginLoader(std::vector<std::string> search_dirs) {
  for (auto& d : search_dirs) add_unique(dirs_, std::move(d));
}

// Plugin tables go, their libraries stay: something the plugin made
// (a static, a thread) may still run code from them.
PluginLoader::~PluginLoader() {
  for (auto& s : slots_) {
    if (s->outcome && s->outcome->ok()) delete (*s->outcome)->plugin;
  }
}

std::vector<std::string> PluginLoader::search_dirs() const {
  std::lock_guard lock(dirs_mutex_);
  return dirs_;
}

void PluginLoader::set_search_dirs(std::vector<std::string> search_dirs) {
  std::vector<std::string> dirs;
  for (auto& d : search_dirs) add_unique(dirs, std::move(d));
  std::lock_guard lock(dirs_mutex_);
  dirs_ = std::move(dirs);
  ++generation_;
}

std::vector<std::string> PluginLoader::candidate_paths(std::string_view name) const {
  std::vector<std::string> paths;
  const std::string file = plugin_file_name(name);
  for (const auto& d : search_dirs()) paths.push_back((std::filesystem::path(d) / file).string());
  return paths;
}

PluginLoader::Slot& PluginLoader::slot(std::string_view name) {
  std::lock_guard lock(slots_mutex_);
  for (auto& s : slots_) {
    if (s->name == name) return *s;
  }
  slots_.push_back(std::make_unique<Slot>());
  slots_.back()->name = std::string(name);
  return *slots_.back();
}

Result<LoadedPlugin> PluginLoader::load(std::string_view name) {
  Slot& s = slot(name);
  if (LoadingSlot::active(&s)) return loading_itself(name);
  std::lock_guard slot_lock(s.mutex);
  std::vector<std::string> dirs;
  std::uint64_t generation = 0;
  {
    std::lock_guard lock(dirs_mutex_);
    dirs = dirs_;
    generation = generation_;
  }
  if (s.claimed) {
    return make_error(ErrorCode::not_found, "backend \"" + std::string(name) +
                                                "\" is registered with register_backend; no plugin file is loaded for it");
  }
  if (s.outcome && (s.outcome->ok() || s.generation == generation)) return *s.outcome;
  const LoadingSlot loading(&s);
  s.outcome = std::make_unique<Result<LoadedPlugin>>(load_uncached(name, dirs));
  s.generation = generation;
  return *s.outcome;
}

Status PluginLoader::claim(std::string_view name) {
  Slot& s = slot(name);
  if (LoadingSlot::active(&s)) return loading_itself(name);
  std::lock_guard slot_lock(s.mutex);
  if (s.outcome && s.outcome->ok()) {
    return make_error(ErrorCode::unsupported,
                      "its plugin file " + (*s.outcome)->library + " is already loaded");
  }
  s.claimed = true;
  s.outcome.reset();
  return {};
}

std::vector<std::string> PluginLoader::discover() const {
  std::vector<std::string> names;
  for (const auto& d : search_dirs()) {
    std::error_code ec;
    for (std::filesystem::directory_iterator it(d, ec), end; !ec && it != end; it.increment(ec)) {
      auto name = plugin_backend_name(it->path().filename().string());
      if (!name || !plugin_detail::is_backend_name(*name)) continue;
      // Listed by name only; whether it may be loaded is probe()'s to say,
      // so a symlink or a FIFO shows up as refused rather than vanishing.
      std::error_code file_ec;
      if (it->symlink_status(file_ec).type() == std::filesystem::file_type::directory) continue;
      names.push_back(std::move(*name));
    }
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

std::vector<CandidateReport> PluginLoader::probe(std::string_view name) const {
  std::vector<CandidateReport> reports;
  for (const auto& d : search_dirs()) {
    PluginCandidate c = check_plugin_candidate(d, plugin_file_name(name));
    reports.push_back(CandidateReport{std::move(c.path), c.verdict, std::move(c.reason)});
  }
  return reports;
}

std::optional<LoadedPlugin> PluginLoader::loaded(std::string_view name) {
  Slot& s = slot(name);
  if (LoadingSlot::active(&s)) return std::nullopt;  // not loaded yet: its own load is under way on this thread
  std::lock_guard slot_lock(s.mutex);
  if (s.claimed || !s.outcome || !s.outcome->ok()) return std::nullopt;
  return **s.outcome;
}

std::vector<std::string> refusal_lines(const std::vector<CandidateReport>& reports) {
  std::vector<std::string> lines;
  for (const auto& r : reports) {
    if (r.verdict == PluginCandidate::Verdict::refused) lines.push_back(r.path + ": " + r.reason);
  }
  return lines;
}

Result<LoadedPlugin> PluginLoader::load_uncached(std::string_view name, const std::vector<std::string>& dirs) const {
  const std::string file = plugin_file_name(name);
  std::string searched;
  std::string refusals;
  for (const auto& d : dirs) {
    PluginCandidate candidate = check_plugin_candidate(d, file);
    searched += (searched.empty() ? "" : ", ") + candidate.path;
    if (candidate.verdict == PluginCandidate::Verdict::absent) continue;
    if (candidate.verdict == PluginCandidate::Verdict::refused) {
      // Someone else's file, a link or a FIFO: never loaded, and never in
      // the way of a good copy further down.
      refusals += (refusals.empty() ? "" : "; ") + candidate.path + " (" + candidate.reason + ")";
      continue;
    }
    // The first admitted file is the plugin: a broken one is reported, never
    // skipped in favour of another copy further down the path.
    const std::string path = candidate.path;
    BALLAST_ASSIGN_OR_RETURN(auto lib, open_checked_library(std::move(candidate)), "loading plugin " + path);
    BALLAST_ASSIGN_OR_RETURN(auto table, checked_table(lib, name), "checking plugin " + path);
    const detail::PluginTable* plugin = table.release();
    return LoadedPlugin{plugin, path};
  }
  if (searched.empty()) searched = "(no search folders)";
  std::string message = "plugin " + file + " for backend \"" + std::string(name) + "\" not found; searched: " + searched;
  if (!refusals.empty()) message += "; refused: " + refusals;
  return make_error(ErrorCode::not_found, message);
}

namespace {
// Constant-initialised, so readable from any static initialiser.
std::atomic<PluginLoader*> g_process_loader{nullptr};
}  // namespace

PluginLoader& process_plugin_loader() {
  // Never destroyed: backends opened through it may live until exit.
  static PluginLoader* loader = [] {
    auto* made = new PluginLoader(default_plugin_search_dirs());
    g_process_loader.store(made, std::memory_order_release);
    return made;
  }();
  return *loader;
}

PluginLoader* process_plugin_loader_if_made() noexcept { return g_process_loader.load(std::memory_order_acquire); }

}  // namespace ballast::registry
