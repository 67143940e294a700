// open_communicator: a communicator library (comm_plugin.h) found and
// checked as backend plugins are, wrapped in a Communicator.
#include <ballast/comm_plugin.h>
#include <ballast/communicator.hpp>

#include "registry/plugin_file.hpp"
#include "registry/plugin_loader.hpp"
#include "registry/shared_library.hpp"

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>

namespace ballast {

namespace {

constexpr std::size_t kErrorSize = 1024;

Status plugin_error(int code, const char* text, const std::string& what) {
  const auto c = code > 0 && code <= static_cast<int>(ErrorCode::internal) ? static_cast<ErrorCode>(code) : ErrorCode::internal;
  return make_error(c, what + ": " + std::string(text, strnlen(text, kErrorSize)));
}

// A table's exchange, or NULL where it has none or is older than 1.1
// (its struct_size ends before the field: what lies past it is not the table's).
decltype(ballast_comm_plugin::exchange) exchange_of(const ballast_comm_plugin* t) {
  return t->struct_size >= offsetof(ballast_comm_plugin, exchange) + sizeof t->exchange ? t->exchange : nullptr;
}

class PluginCommunicator final : public Communicator {
 public:
  PluginCommunicator(const ballast_comm_plugin* table, ballast_comm* comm)
      : t_(table), c_(comm), exchange_(exchange_of(table)) {}
  ~PluginCommunicator() override { t_->close(c_); }

  std::uint32_t rank() const noexcept override { return t_->rank(c_); }
  std::uint32_t world() const noexcept override { return t_->world(c_); }
  std::string name() const override { return t_->name; }

  bool any_source() const noexcept override { return t_->send != nullptr && t_->receive != nullptr; }

  Status send(std::uint32_t to, std::vector<std::byte> bytes) override {
    if (!any_source()) return rounds_only("send");
    if (to >= world() || to == rank())
      return make_error(ErrorCode::invalid_argument, "rank " + std::to_string(rank()) + " cannot send to rank " +
                                                         std::to_string(to) + " (world " + std::to_string(world()) + ")");
    char error[kErrorSize] = {};
    const int rc = t_->send(c_, to, bytes.data(), bytes.size(), error, sizeof error);
    return rc == 0 ? Status() : plugin_error(rc, error, name() + " send to rank " + std::to_string(to));
  }

  Result<std::optional<CommMessage>> receive(std::chrono::steady_clock::time_point deadline) override {
    if (!any_source()) return rounds_only("receive");
    char error[kErrorSize] = {};
    std::uint32_t from = 0;
    std::uint64_t size = 0;
    std::vector<std::byte> buffer;
    struct Target {
      std::vector<std::byte>* buffer;
    } target{&buffer};
    auto allocate = [](void* context, std::uint64_t n) -> void* {
      try {
        auto* t = static_cast<Target*>(context);
        t->buffer->resize(n);
        return n == 0 ? static_cast<void*>(t) : t->buffer->data();  // any non-null for an empty message
      } catch (...) {
        return nullptr;
      }
    };
    const int rc = t_->receive(c_, timeout_ns(deadline), &from, &size, allocate, &target, error, sizeof error);
    if (rc != 0) return plugin_error(rc, error, name() + " receive on rank " + std::to_string(rank()));
    if (size == UINT64_MAX) return std::optional<CommMessage>();
    if (size != buffer.size())
      return make_error(ErrorCode::internal, name() + " receive: a message of " + std::to_string(size) +
                                                 " bytes came in a buffer of " + std::to_string(buffer.size()));
    return std::optional<CommMessage>(CommMessage{from, std::move(buffer)});
  }

  Status barrier(std::chrono::steady_clock::time_point deadline) override {
    char error[kErrorSize] = {};
    const int rc = t_->barrier(c_, timeout_ns(deadline), error, sizeof error);
    return rc == 0 ? Status() : plugin_error(rc, error, name() + " barrier on rank " + std::to_string(rank()));
  }

  Result<std::vector<std::vector<std::byte>>> exchange(std::vector<std::vector<std::byte>> to,
                                                       std::chrono::steady_clock::time_point deadline) override {
    if (exchange_ == nullptr) return Communicator::exchange(std::move(to), deadline);
    const std::uint32_t n = world();
    if (to.size() != n)
      return make_error(ErrorCode::invalid_argument, "an exchange of " + std::to_string(to.size()) +
                                                         " buffers in a world of " + std::to_string(n));
    std::vector<const void*> sends(n);
    std::vector<std::uint64_t> sizes(n);
    for (std::uint32_t r = 0; r < n; ++r) {
      sends[r] = to[r].empty() ? nullptr : to[r].data();
      sizes[r] = to[r].size();
    }
    struct Target {
      std::vector<std::vector<std::byte>> from;
      std::vector<bool> delivered;
    } target{std::vector<std::vector<std::byte>>(n), std::vector<bool>(n, false)};
    auto deliver = [](void* context, std::uint32_t from, std::uint64_t size) -> void* {
      try {
        auto* t = static_cast<Target*>(context);
        if (from >= t->from.size() || t->delivered[from]) return nullptr;
        t->delivered[from] = true;
        t->from[from].resize(size);
        return size == 0 ? static_cast<void*>(t) : t->from[from].data();  // any non-null for nothing
      } catch (...) {
        return nullptr;
      }
    };
    char error[kErrorSize] = {};
    const int rc = exchange_(c_, sends.data(), sizes.data(), deliver, &target, timeout_ns(deadline), error, sizeof error);
    if (rc != 0) return plugin_error(rc, error, name() + " exchange on rank " + std::to_string(rank()));
    for (std::uint32_t r = 0; r < n; ++r)
      if (!target.delivered[r])
        return make_error(ErrorCode::internal, name() + " exchange returned without rank " + std::to_string(r) + "'s buffer");
    return std::move(target.from);
  }

  void fail(const Status& why) noexcept override {
    try {
      t_->fail(c_, why.ok() ? "failed" : why.to_string().c_str());
    } catch (...) {
      t_->fail(c_, "failed");
    }
  }

 private:
  Status rounds_only(const char* what) const {
    return make_error(ErrorCode::unsupported, name() + " has no " + what + " (its library exchanges in rounds only)");
  }

  static std::int64_t timeout_ns(std::chrono::steady_clock::time_point deadline) {
    const auto left = deadline - std::chrono::steady_clock::now();
    return left.count() <= 0 ? 0 : std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
  }

  const ballast_comm_plugin* t_;
  ballast_comm* c_;
  decltype(ballast_comm_plugin::exchange) exchange_;  // NULL in a 1.0 library
};

bool plain_name(std::string_view name) {
  if (name.empty() || name.size() > 32) return false;
  for (char ch : name)
    if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_')) return false;
  return true;
}

// The first admissible libballast_comm_<name>.so on the plugin search
// path (the folders backend plugins are looked for in, set_plugin_search_path's
// included, and their checks: owner, mode, no symlink), opened but not
// loaded; not_found naming every folder searched and every file refused.
Result<registry::PluginCandidate> find_library(const std::string& name) {
  const std::string file = "libballast_comm_" + name + ".so";
  std::string searched, refusals;
  for (const std::string& dir : registry::process_plugin_loader().search_dirs()) {
    registry::PluginCandidate candidate = registry::check_plugin_candidate(dir, file);
    searched += (searched.empty() ? "" : ", ") + candidate.path;
    if (candidate.verdict == registry::PluginCandidate::Verdict::absent) continue;
    if (candidate.verdict == registry::PluginCandidate::Verdict::refused) {
      refusals += (refusals.empty() ? "" : "; ") + candidate.path + " (" + candidate.reason + ")";
      continue;
    }
    return candidate;
  }
  std::string message = "communicator library " + file + " for \"" + name + "\" (ballast's: local, mpi, nccl) not found; searched: " +
                        (searched.empty() ? "(no search folders)" : searched);
  if (!refusals.empty()) message += "; refused: " + refusals;
  return make_error(ErrorCode::not_found, message);
}

// A loaded library: its table and the file it came from.
struct LoadedLibrary {
  const ballast_comm_plugin* table;
  std::string path;
};

// Loaded libraries by name, for the life of the process (a library is never
// closed: its communicators may outlive any one caller). As with backend
// plugins, a loaded library stays the one used, whatever the search path
// says later; find_communicator answers its file, not the search's.
struct LoadedLibraries {
  std::mutex mutex;
  std::map<std::string, LoadedLibrary> by_name;
};
LoadedLibraries& loaded_libraries() {
  static LoadedLibraries libraries;
  return libraries;
}

Result<const ballast_comm_plugin*> load_table(const std::string& name) {
  LoadedLibraries& libraries = loaded_libraries();
  std::lock_guard lock(libraries.mutex);
  if (auto it = libraries.by_name.find(name); it != libraries.by_name.end()) return it->second.table;
  BALLAST_ASSIGN_OR_RETURN(registry::PluginCandidate candidate, find_library(name));
  const std::string path = candidate.path;
  BALLAST_ASSIGN_OR_RETURN(auto lib, registry::open_checked_library(std::move(candidate)), "loading " + path);
  BALLAST_ASSIGN_OR_RETURN(void* entry, registry::find_symbol(lib, BALLAST_COMM_ENTRY_SYMBOL), "loading " + path);
  const ballast_comm_plugin* t = reinterpret_cast<ballast_comm_entry_fn>(entry)();
  if (t == nullptr || t->struct_size < BALLAST_COMM_PLUGIN_SIZE_1_0)
    return make_error(ErrorCode::abi_mismatch, path + ": its communicator table is missing or too short");
  if (t->api_major != BALLAST_COMM_API_MAJOR)
    return make_error(ErrorCode::abi_mismatch, path + ": communicator ABI " + std::to_string(t->api_major) + "." +
                                                   std::to_string(t->api_minor) + ", this ballast takes " +
                                                   std::to_string(BALLAST_COMM_API_MAJOR) + ".x");
  const bool has_exchange = exchange_of(t) != nullptr;
  // Messages (send and receive), or rounds only: never half of messages.
  const bool messages = t->send && t->receive, neither = !t->send && !t->receive;
  if (t->name == nullptr || name != t->name || !t->open || !t->close || !t->rank || !t->world || !t->barrier ||
      !t->fail || !(messages || (neither && has_exchange)))
    return make_error(ErrorCode::abi_mismatch, path + ": its communicator table is not for \"" + name +
                                                   "\" or lacks a function");
  libraries.by_name.emplace(name, LoadedLibrary{t, path});
  return t;
}

}  // namespace

Result<std::string> find_communicator(std::string_view name) {
  const std::string n(name);
  if (!plain_name(n) || n == "local")
    return make_error(ErrorCode::invalid_argument, "\"" + n + "\" names no communicator library");
  {
    LoadedLibraries& libraries = loaded_libraries();
    std::lock_guard lock(libraries.mutex);
    if (auto it = libraries.by_name.find(n); it != libraries.by_name.end()) return it->second.path;
  }
  BALLAST_ASSIGN_OR_RETURN(registry::PluginCandidate candidate, find_library(n));
  return candidate.path;  // its descriptor closes here: nothing was loaded
}

Result<std::unique_ptr<Communicator>> open_communicator(std::string_view config, void* native) {
  const std::string context = "opening communicator \"" + std::string(config) + "\"";
  const auto query = config.find('?');
  const std::string name(config.substr(0, query));
  const std::string options(query == std::string_view::npos ? "" : config.substr(query + 1));
  if (name == "local" || name.rfind("local:", 0) == 0)
    return make_error(ErrorCode::invalid_argument,
                      "\"local\" ranks are threads of one process: make them with make_local_communicators(world) "
                      "(on the command line: --comm local --world N)")
        .with_context(context);
  if (!plain_name(name))
    return make_error(ErrorCode::invalid_argument, "a communicator is named by lower-case letters, digits and '_' "
                                                   "(ballast's: local, mpi, nccl)")
        .with_context(context);
  BALLAST_ASSIGN_OR_RETURN(const ballast_comm_plugin* table, load_table(name), context);
  char error[kErrorSize] = {};
  ballast_comm* comm = nullptr;
  if (const int rc = table->open(options.c_str(), native, &comm, error, sizeof error); rc != 0 || comm == nullptr)
    return plugin_error(rc == 0 ? static_cast<int>(ErrorCode::internal) : rc, error, name + " open").with_context(context);
  try {
    return std::unique_ptr<Communicator>(std::make_unique<PluginCommunicator>(table, comm));
  } catch (const std::bad_alloc&) {
    table->close(comm);
    return make_error(ErrorCode::out_of_memory, "no memory for the communicator").with_context(context);
  }
}

}  // namespace ballast
