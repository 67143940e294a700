// The attacks of issue 15, each through the public API: a data file swapped
// while the model is opened, hard links, symlinked caches, small files that
// ask for unbounded work, size arithmetic with raised limits, and what
// error messages may say.
#include "onnx/external_data.hpp"
#include "store/safe_open.hpp"
#include "unit/onnx/external_fixture.hpp"

#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

using namespace ballast;
using namespace ballast::testing;
using namespace ballast::testing::onnx_proto;
namespace fs = std::filesystem;

namespace {

std::vector<std::uint8_t> filled(std::size_t n, std::uint8_t value) { return std::vector<std::uint8_t>(n, value); }

// Runs the body once with openat2 and once with the per-component walk
// (what a kernel without openat2 gets).
struct ResolverMode {
  explicit ResolverMode(bool walk) { store::force_component_walk_for_testing(walk); }
  ~ResolverMode() { store::force_component_walk_for_testing(false); }
};

std::size_t open_descriptors() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST_CASE("swap race: a data file swapped for an outside symlink or a FIFO is never read, never blocks") {
  for (bool walk : {false, true}) {
    CAPTURE(walk);
    ResolverMode mode(walk);
    ScratchDir outside("race-outside");
    const auto secret = outside.write("secret.bin", filled(64, 0xEE));
    ScratchDir dir("race-model");
    dir.write("w.bin", filled(64, 0x11));
    const fs::path model = dir.write("model.onnx", model_with({external_tensor("w", 16, at("w.bin", 0, 64))}).data);

    const std::size_t descriptors = open_descriptors();
    std::atomic<bool> stop{false};
    std::atomic<std::uint64_t> swaps{0};
    std::thread swapper([&] {
      const fs::path tmp = dir / "tmp";
      const std::vector<std::uint8_t> inside = filled(64, 0x11);
      for (std::uint64_t i = 0; !stop.load(); ++i) {
        std::error_code ec;
        fs::remove(tmp, ec);
        switch (i % 3) {
          case 0: dir.write("tmp", inside); break;
          case 1: fs::create_symlink(secret, tmp, ec); break;
          default: ::mkfifo(tmp.c_str(), 0600); break;
        }
        ::rename(tmp.c_str(), (dir / "w.bin").c_str());
        swaps.fetch_add(1);
        // A window in which the file is the regular one, so some loads can
        // win the race even when this thread has a core to itself.
        if (i % 3 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    });
    int ok = 0, refused = 0, outside_reads = 0;
    const auto t0 = std::chrono::steady_clock::now();
    // At least 300 loads, and on until the swapper has swapped 300 times
    // (bounded: 10 s).
    // Under a loaded machine the swapper can win every race for a while:
    // go on (still bounded) until both outcomes were seen.
    for (int i = 0; i < 300 || ((swaps.load() < 300 || ok == 0 || refused == 0) && seconds_since(t0) < 10.0); ++i) {
      auto r = load_onnx(model);
      if (!r.ok()) {
        ++refused;
        continue;
      }
      ++ok;
      if (bytes_named(*r, "w") != filled(64, 0x11)) ++outside_reads;
    }
    stop = true;
    swapper.join();
    MESSAGE("openat2=" << !walk << ": " << ok << " loads, " << refused << " refused, " << swaps.load() << " swaps, "
                       << seconds_since(t0) << " s");
    CHECK(outside_reads == 0);
    CHECK(open_descriptors() == descriptors);  // every failed or finished load closed what it opened
    CHECK(ok > 0);
    CHECK(refused > 0);
  }
}

TEST_CASE("bytes() never looks at the path again: the mapping stays the file that was checked") {
  ScratchDir outside("rebind-outside");
  const auto secret = outside.write("secret.bin", filled(64, 0xEE));
  ScratchDir dir("rebind-model");
  dir.write("w.bin", filled(64, 0x11));
  auto model = load_written(dir, {external_tensor("w", 16, at("w.bin", 0, 64))});
  REQUIRE_MESSAGE(model.ok(), model.error().to_string());
  fs::remove(dir / "w.bin");
  fs::create_symlink(secret, dir / "w.bin");
  CHECK(bytes_named(*model, "w") == filled(64, 0x11));
  CHECK(model->store().referenced_weight_bytes().total == 64);
}

TEST_CASE("hard links are refused unless LoadOptions::allow_hard_links") {
  ScratchDir outside("hardlink-outside");
  const auto secret = outside.write("secret.bin", filled(64, 0xEE));
  ScratchDir dir("hardlink-model");
  REQUIRE(::link(secret.c_str(), (dir / "w.bin").c_str()) == 0);
  for (bool walk : {false, true}) {
    ResolverMode mode(walk);
    auto refused = load_written(dir, {external_tensor("w", 16, at("w.bin", 0))});
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.code() == ErrorCode::path_escapes);
    CHECK(refused.error().message.find("hard links") != std::string::npos);
    CHECK(refused.error().message.find("allow_hard_links") != std::string::npos);
  }
  LoadOptions allow;
  allow.allow_hard_links = true;
  auto admitted = load_written(dir, {external_tensor("w", 16, at("w.bin", 0))}, allow);
  REQUIRE_MESSAGE(admitted.ok(), admitted.error().to_string());
  CHECK(bytes_named(*admitted, "w") == filled(64, 0xEE));  // what the option admits, documented
}

TEST_CASE("Hugging Face cache layout: the model file's real directory is a second root, nothing else") {
  ScratchDir cache("hf-cache");
  cache.write("blobs/data0123", filled(64, 0x22));
  cache.write("refs/secret.bin", filled(64, 0xEE));
  const Proto m = model_with({external_tensor("w", 16, at("model.onnx_data", 0, 64))});
  cache.write("blobs/model0123", m.data);
  fs::create_directories(cache / "snapshots/rev");
  fs::create_symlink("../../blobs/model0123", cache / "snapshots/rev/model.onnx");
  fs::create_symlink("../../blobs/data0123", cache / "snapshots/rev/model.onnx_data");
  fs::create_symlink("../../refs/secret.bin", cache / "snapshots/rev/evil.bin");
  cache.write("blobs/evil_model", model_with({external_tensor("w", 16, at("evil.bin", 0, 64))}).data);
  fs::create_symlink("../../blobs/evil_model", cache / "snapshots/rev/evil.onnx");

  for (bool walk : {false, true}) {
    CAPTURE(walk);
    ResolverMode mode(walk);
    auto plain = load_onnx(cache / "snapshots/rev/model.onnx");
    REQUIRE_FALSE(plain.ok());
    CHECK(plain.code() == ErrorCode::path_escapes);
    CHECK(plain.error().message.find("allow_model_real_dir") != std::string::npos);

    LoadOptions hf;
    hf.allow_model_real_dir = true;
    auto model = load_onnx(cache / "snapshots/rev/model.onnx", hf);
    REQUIRE_MESSAGE(model.ok(), model.error().to_string());
    CHECK(bytes_named(*model, "w") == filled(64, 0x22));
    CHECK(weight_named(*model, "w").external->resolved() == cache / "blobs/data0123");

    auto evil = load_onnx(cache / "snapshots/rev/evil.onnx", hf);  // refs/ is in the cache but under neither root
    REQUIRE_FALSE(evil.ok());
    CHECK(evil.code() == ErrorCode::path_escapes);
  }
}

TEST_CASE("the resolver admits a real directory it is given only with allow_model_real_dir") {
  // The loader opens the real directory only with the option; the resolver
  // holds to it too (external_data.hpp: "used only with
  // LoadOptions::allow_model_real_dir") when it is handed one without it.
  ScratchDir real("resolver-real");
  real.write("blob.bin", filled(64, 0x5A));
  ScratchDir dir("resolver-model");
  fs::create_symlink(real / "blob.bin", dir / "blob.bin");
  const onnx::ExternalEntry entries[] = {{"location", "blob.bin", 0}};
  for (bool walk : {false, true}) {
    for (bool allow : {false, true}) {
      CAPTURE(walk);
      CAPTURE(allow);
      ResolverMode mode(walk);
      auto real_root = store::open_root(real.path());
      REQUIRE(real_root.ok());
      LoadOptions options;
      options.allow_model_real_dir = allow;
      WeightStore store;
      onnx::ExternalResolver resolver(dir.path(), "model.onnx", options, store, std::move(*real_root));
      std::vector<LoadNote> notes;
      ExternalLocation loc;
      Status s = resolver.resolve(entries, "w", DataType::float32, 16, 0, notes, loc);
      if (allow) {
        REQUIRE_MESSAGE(s.ok(), s.to_string());
        CHECK(loc.length == 64);
        CHECK(store.mapping_count() == 1);
      } else {
        REQUIRE_FALSE(s.ok());
        CHECK(s.code() == ErrorCode::path_escapes);
        CHECK(store.mapping_count() == 0);
      }
    }
  }
}

TEST_CASE("absolute symlinks that stay inside the model directory still work (openat2 refuses them; the walk admits)") {
  ScratchDir dir("abs-inner");
  const auto blob = dir.write("real/blob.bin", filled(64, 0x33));
  fs::create_symlink(blob, dir / "link.bin");
  fs::create_symlink("/proc/self/cwd", dir / "magic");
  for (bool walk : {false, true}) {
    ResolverMode mode(walk);
    auto model = load_written(dir, {external_tensor("w", 16, at("link.bin", 0))});
    REQUIRE_MESSAGE(model.ok(), model.error().to_string());
    CHECK(bytes_named(*model, "w") == filled(64, 0x33));
    CHECK(load_written(dir, {external_tensor("w", 16, at("magic/x.bin", 0))}).code() != ErrorCode::ok);
  }
}

TEST_CASE("20,000 unknown external_data keys: capped by default, one note with a count when the cap is raised") {
  ScratchDir dir("unknown-keys");
  dir.write("blob.bin", filled(64, 1));
  Entries entries = at("blob.bin", 0);
  for (int i = 0; i < 20000; ++i) entries.emplace_back("k" + std::to_string(i), std::string(8, 'v'));
  const auto t0 = std::chrono::steady_clock::now();
  auto refused = load_written(dir, {external_tensor("a_rather_long_tensor_name", 16, entries)});
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.code() == ErrorCode::overflow);
  CHECK(refused.error().message.find("max_external_entries") != std::string::npos);

  LoadOptions raised;
  raised.max_external_entries = 100000;
  auto model = load_written(dir, {external_tensor("a_rather_long_tensor_name", 16, entries)}, raised);
  REQUIRE_MESSAGE(model.ok(), model.error().to_string());
  REQUIRE(model->notes().size() == 1);
  CHECK(model->notes()[0].message.find("20000 unknown external_data keys") != std::string::npos);
  CHECK(model->notes()[0].message.size() < 200);
  CHECK(weight_named(*model, "a_rather_long_tensor_name").external->unknown_keys.size() == 20000);
  CHECK(seconds_since(t0) < 10.0);
}

TEST_CASE("deep paths: linear resolution, and caps on location length and distinct locations") {
  ScratchDir dir("deep");
  // Deeper than PATH_MAX from /: made and removed through descriptors.
  constexpr int kDepth = 1900;
  std::string deep;
  for (int i = 0; i < kDepth; ++i) deep += "d/";
  {
    int fd = ::open(dir.path().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    for (int i = 0; i < kDepth; ++i) {
      REQUIRE(::mkdirat(fd, "d", 0700) == 0);
      const int next = ::openat(fd, "d", O_PATH | O_DIRECTORY | O_CLOEXEC);
      ::close(fd);
      fd = next;
      REQUIRE(fd >= 0);
    }
    const int w = ::openat(fd, "w.bin", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    REQUIRE(w >= 0);
    REQUIRE(::write(w, filled(64, 0x44).data(), 64) == 64);
    ::close(w);
    ::close(fd);
  }
  struct RemoveDeep {
    const ScratchDir& dir;
    ~RemoveDeep() {
      std::vector<int> fds{::open(dir.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
      for (int i = 0; i < kDepth && fds.back() >= 0; ++i) fds.push_back(::openat(fds.back(), "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
      if (fds.back() >= 0) ::unlinkat(fds.back(), "w.bin", 0);
      for (std::size_t i = fds.size() - 1; i > 0; --i) {
        if (fds[i] >= 0) ::close(fds[i]);
        if (fds[i - 1] >= 0) ::unlinkat(fds[i - 1], "d", AT_REMOVEDIR);
      }
      if (fds[0] >= 0) ::close(fds[0]);
    }
  } remove_deep{dir};
  std::vector<Proto> tensors;
  Proto g;
  g.str(2, "g");
  for (int i = 0; i < 50; ++i) {
    std::string spelling;
    for (int k = 0; k < i; ++k) spelling += "./";
    g.msg(5, external_tensor("w" + std::to_string(i), 16, at(spelling + deep + "w.bin", 0)));
  }
  const Proto m = model(g);
  for (bool walk : {false, true}) {
    CAPTURE(walk);
    ResolverMode mode(walk);
    const auto t0 = std::chrono::steady_clock::now();
    auto r = load_onnx(dir.write("model.onnx", m.data));
    REQUIRE_MESSAGE(r.ok(), r.error().to_string());
    CHECK(r->store().mapping_count() == 1);
    CHECK(bytes_named(*r, "w49") == filled(64, 0x44));
    const double s = seconds_since(t0);
    MESSAGE("50 locations at depth 1900: " << s << " s");
    CHECK(s < 5.0);
  }
  LoadOptions few;
  few.max_external_locations = 10;
  auto too_many = load_onnx(dir / "model.onnx", few);
  CHECK(too_many.code() == ErrorCode::overflow);
  CHECK(too_many.error().message.find("max_external_locations") != std::string::npos);

  auto too_long = load_written(dir, {external_tensor("w", 16, at(std::string(5000, 'x'), 0))});
  CHECK(too_long.code() == ErrorCode::overflow);
  CHECK(too_long.error().message.find("max_location_bytes") != std::string::npos);
  CHECK(too_long.error().to_string().size() < 2000);
}

TEST_CASE("size arithmetic with max_tensor_elements raised: overflow errors, never a wrap") {
  LoadOptions raised;
  raised.max_tensor_elements = UINT64_MAX;
  const std::int64_t two62 = std::int64_t{1} << 62;
  const std::int64_t two61 = std::int64_t{1} << 61;
  struct Case {
    const char* what;
    Proto tensor;
  };
  Proto complex_empty = tensor("t", 14, {2, two62});  // complex64 [2, 2^62] with no data
  Proto complex_floats = tensor("t", 14, {2, two62});
  complex_floats.bytes(4, std::vector<std::uint8_t>{});  // an empty packed float_data
  Proto double_empty = tensor("t", 11, {two61});  // 8 x 2^61 bytes
  Proto double_raw = tensor("t", 11, {two61});
  raw_data(double_raw, {});
  Proto complex128_values = tensor("t", 15, {two62});
  complex128_values.bytes(10, std::vector<std::uint8_t>{});
  const Case cases[] = {{"complex64 [2, 2^62], no data", complex_empty},
                        {"complex64 [2, 2^62], empty float_data", complex_floats},
                        {"double [2^61], no data", double_empty},
                        {"double [2^61], empty raw_data", double_raw},
                        {"complex128 [2^62], empty double_data", complex128_values}};
  for (const Case& c : cases) {
    CAPTURE(c.what);
    const Proto m = model_with({c.tensor});
    auto r = load_proto(m, ".", raised);
    REQUIRE_FALSE(r.ok());
    CHECK(r.code() == ErrorCode::overflow);
    CHECK(r.error().message.find("overflows") != std::string::npos);
  }
  ScratchDir dir("arith-external");
  dir.write("blob.bin", filled(64, 1));
  auto ext = load_written(dir, {external_tensor("t", two61, at("blob.bin", 0), 11)}, raised);
  CHECK(ext.code() == ErrorCode::overflow);
}

TEST_CASE("error messages do not say where an outside symlink points, and cap what they echo") {
  ScratchDir outside("echo-outside-SECRETMARKER");
  const auto secret = outside.write("secret.bin", filled(64, 0xEE));
  ScratchDir dir("echo-model");
  fs::create_symlink(secret, dir / "escape.bin");
  fs::create_symlink("/proc/self/environ", dir / "environ.bin");
  for (bool walk : {false, true}) {
    ResolverMode mode(walk);
    for (const char* location : {"escape.bin", "environ.bin"}) {
      auto r = load_written(dir, {external_tensor("w", 16, at(location, 0))});
      REQUIRE_FALSE(r.ok());
      CHECK(r.code() == ErrorCode::path_escapes);
      CHECK(r.error().to_string().find("SECRETMARKER") == std::string::npos);
      CHECK(r.error().to_string().find("/proc") == std::string::npos);
    }
  }
  // A tensor's name in the error is whole up to 256 bytes, cut after:
  // a range past the file's end and a file that is missing say it alike.
  dir.write("short.bin", filled(8, 1));
  for (const char* location : {"short.bin", "missing.bin"}) {
    for (std::size_t n : {255u, 256u, 257u}) {
      CAPTURE(location);
      CAPTURE(n);
      const std::string name(n, 't');
      auto r = load_written(dir, {external_tensor(name, 16, at(location, 0))});
      REQUIRE_FALSE(r.ok());
      CHECK(r.code() == (location == std::string("short.bin") ? ErrorCode::out_of_bounds : ErrorCode::not_found));
      CHECK(r.error().tensor == (n <= 256 ? name : "'" + std::string(256, 't') + "...' (257 bytes)"));
    }
  }
  const std::string long_name(100000, 'n');
  auto r = load_written(dir, {external_tensor(long_name, 16, at("missing.bin", 0))});
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().to_string().size() < 3000);
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define BALLAST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define BALLAST_SANITIZED 1
#endif
#endif

TEST_CASE("a data file that cannot be mapped (address space or vm.max_map_count exhausted) is a named error") {
#ifdef BALLAST_SANITIZED
  MESSAGE("skipped under a sanitizer: it reserves the address space this test limits");
#else
  ScratchDir dir("map-limit");
  {
    std::ofstream(dir / "big.bin", std::ios::binary);
  }
  fs::resize_file(dir / "big.bin", std::uint64_t{1} << 30);  // sparse: 1 GiB of address space
  const fs::path model = dir.write("model.onnx", model_with({external_tensor("w", 16, at("big.bin", 0))}).data);
  std::fflush(nullptr);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // Room for the loader's own allocations, not for a 1 GiB mapping.
    rlimit limit{};
    std::FILE* statm = std::fopen("/proc/self/statm", "r");
    unsigned long pages = 0;
    if (statm == nullptr || std::fscanf(statm, "%lu", &pages) != 1) ::_exit(3);
    std::fclose(statm);
    limit.rlim_cur = limit.rlim_max = pages * static_cast<unsigned long>(::sysconf(_SC_PAGESIZE)) + (64u << 20);
    if (::setrlimit(RLIMIT_AS, &limit) != 0) ::_exit(3);
    auto r = load_onnx(model);
    if (r.ok()) ::_exit(1);
    if (r.code() != ErrorCode::out_of_memory) ::_exit(2);
    ::_exit(r.error().message.find("vm.max_map_count") != std::string::npos ? 0 : 4);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
#endif
}

namespace {
// The file the reopen hook removes: the one whose inode the probe saw.
fs::path g_vanishing;
ino_t g_vanishing_inode = 0;
void remove_probed(const struct stat& probe) {
  if (probe.st_ino == g_vanishing_inode) fs::remove(g_vanishing);
}
}  // namespace

TEST_CASE("a data file that vanishes between its probe and its reopen: 'changed while opening', nothing read") {
  for (bool walk : {false, true}) {
    CAPTURE(walk);
    ResolverMode mode(walk);
    ScratchDir dir("vanish-model");
    dir.write("w.bin", filled(64, 0x11));
    g_vanishing = dir / "w.bin";
    struct stat st {};
    REQUIRE(::stat(g_vanishing.c_str(), &st) == 0);
    g_vanishing_inode = st.st_ino;
    store::set_before_reopen_for_testing(&remove_probed);
    auto model = load_written(dir, {external_tensor("w", 16, at("w.bin", 0, 64))});
    store::set_before_reopen_for_testing(nullptr);
    REQUIRE_FALSE(model.ok());
    CHECK(model.error().code == ErrorCode::io);
    CHECK_MESSAGE(model.error().message.find("changed while it was being opened") != std::string::npos,
                  model.error().to_string());
  }
}
