// The C API's engine flow against what the C++ API and the model's bytes
// say: every format opens, weights and accounting read as stored, a
// backend's info, plans, residency under each strategy, derive one and
// all, pins read back, stats and teardown; versions and the log sink.
#include "capi_test.hpp"
#include "support/orphaned_prefix_model.hpp"
#include "unit/gguf/writer.hpp"
#include "unit/onnx/proto_builder.hpp"
#include "unit/safetensors/writer.hpp"
#include "unit/store/scratch_dir.hpp"

#include <ballast/derivation.hpp>
#include <ballast/log.hpp>
#include <ballast/printable.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <fstream>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

using ballast::test_models::OrphanedPrefixModel;
using ballast::testing::ScratchDir;

namespace {

std::vector<unsigned char> file_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

struct Opened {
  ballast_model* model = nullptr;
  ballast_backend* backend = nullptr;
  ~Opened() {
    capi_test::take(ballast_model_free(model));
    capi_test::take(ballast_backend_free(backend));
  }
};

// The orphaned-prefix sample in a scratch folder, opened, with the cpu
// backend: what most cases start from (`auto& [dir, m, o] = sample;`).
struct SampleOnCpu {
  ScratchDir dir;
  OrphanedPrefixModel m;
  Opened o;
  explicit SampleOnCpu(std::string_view name) : dir(name), m(OrphanedPrefixModel::write(dir.path())) {
    CAPI_OK(ballast_model_open(m.onnx.c_str(), &o.model));
    CAPI_OK(ballast_backend_open("cpu", &o.backend));
  }
};

ballast_device_counters counters(const ballast_backend* b) {
  ballast_device_counters c = BALLAST_INIT(ballast_device_counters);
  CAPI_OK(ballast_backend_counters(b, &c));
  return c;
}

}  // namespace

TEST_CASE("version: the query, the check, the table") {
  CHECK(ballast_c_api_version() == BALLAST_C_API_VERSION);
  CHECK(std::string(ballast_library_version()) == "0.1.0");
  CAPI_OK(ballast_check_version(1));
  CAPI_FAILS(ballast_check_version(BALLAST_C_API_VERSION + 1), BALLAST_E_ABI_MISMATCH);
  CAPI_FAILS(ballast_check_version(0), BALLAST_E_INVALID_ARGUMENT);  // no header defines version 0
  const auto* api = static_cast<const ballast_api_v1*>(ballast_get_api(1));
  REQUIRE(api != nullptr);
  CHECK(api->version == BALLAST_C_API_VERSION);
  CHECK((api->model_open == &ballast_model_open));
  CHECK((api->pin_read == &ballast_pin_read));
  CHECK((api->residency_derive_all == &ballast_residency_derive_all));
  CHECK(ballast_get_api(BALLAST_C_API_VERSION + 1) == nullptr);
  CHECK(ballast_get_api(0) == nullptr);
  // A NULL status is success.
  CHECK(ballast_status_code(nullptr) == BALLAST_OK);
  CHECK(std::string(ballast_status_message(nullptr)) == "ok");
  ballast_status_free(nullptr);
}

TEST_CASE("an engine that dlopen()s libballast: one symbol, then the table") {
  ScratchDir dir("capi-dlopen");
  const auto m = OrphanedPrefixModel::write(dir.path());
  void* lib = dlopen(BALLAST_BINARY_DIR "/lib/libballast.so", RTLD_NOW | RTLD_LOCAL);
  REQUIRE(lib != nullptr);
  using GetApi = const void* (*)(uint32_t);
  auto get_api = reinterpret_cast<GetApi>(dlsym(lib, "ballast_get_api"));
  REQUIRE((get_api != nullptr));
  const auto* api = static_cast<const ballast_api_v1*>(get_api(1));
  REQUIRE(api != nullptr);
  ballast_model* model = nullptr;
  ballast_status* s = api->model_open(m.onnx.c_str(), &model);
  CHECK(api->status_code(s) == BALLAST_OK);
  size_t n = 0;
  CHECK(api->status_code(api->model_weight_count(model, &n)) == BALLAST_OK);
  CHECK(n == 3);
  CHECK(api->model_free(model) == nullptr);
  s = api->model_free(model);  // the table's functions validate as the symbols do
  CHECK(api->status_code(s) == BALLAST_E_INVALID_HANDLE);
  api->status_free(s);
  dlclose(lib);
}

TEST_CASE("an ONNX model: weights, accounting, dead ranges, bytes as stored") {
  ScratchDir dir("capi-onnx");
  const auto m = OrphanedPrefixModel::write(dir.path());
  Opened o;
  CAPI_OK(ballast_model_open(m.onnx.c_str(), &o.model));
  const char* format = nullptr;
  CAPI_OK(ballast_model_format(o.model, &format));
  CHECK(std::string(format) == "onnx");
  size_t n = 0;
  CAPI_OK(ballast_model_weight_count(o.model, &n));
  REQUIRE(n == 3);
  ballast_weight_info w = BALLAST_INIT(ballast_weight_info);
  CAPI_OK(ballast_model_weight(o.model, 0, &w));
  CHECK(std::string(w.name) == "w0");
  CHECK(std::string(w.dtype) == "float");
  REQUIRE(w.ndims == 2);
  CHECK(w.dims[0] == 96);
  CHECK(w.dims[1] == 64);
  CHECK(w.bytes == OrphanedPrefixModel::kW0Bytes);
  CHECK(std::filesystem::path(w.file) == std::filesystem::canonical(m.data));
  CHECK(w.offset == OrphanedPrefixModel::kW0Offset);
  CAPI_OK(ballast_model_weight(o.model, 2, &w));
  CHECK(std::string(w.name) == "w2");
  CHECK(std::string(w.dtype) == "float16");
  size_t index = 9;
  CAPI_OK(ballast_model_find_weight(o.model, "w1", &index));
  CHECK(index == 1);
  CAPI_FAILS(ballast_model_find_weight(o.model, "nope", &index), BALLAST_E_NOT_FOUND);
  // The name as asked, quoted: an empty or spaced name is seen for what it is.
  const capi_test::Outcome missing = capi_test::take(ballast_model_find_weight(o.model, "", &index));
  CHECK(missing.code == BALLAST_E_NOT_FOUND);
  CHECK_MESSAGE(missing.message == "not_found: the model has no weight ''", missing.message);

  ballast_accounting a = BALLAST_INIT(ballast_accounting);
  CAPI_OK(ballast_model_accounting(o.model, &a));
  CHECK(a.mapped_bytes == OrphanedPrefixModel::kFileBytes);
  CHECK(a.referenced_bytes == OrphanedPrefixModel::kReferenced);
  CHECK(a.header_bytes == 0);
  CHECK(a.dead_bytes == OrphanedPrefixModel::kPrefix);
  CHECK(a.files == 1);
  REQUIRE(a.dead_ranges == 1);
  ballast_byte_range r = BALLAST_INIT(ballast_byte_range);
  CAPI_OK(ballast_model_dead_range(o.model, 0, &r));
  CHECK(r.offset == 0);
  CHECK(r.length == OrphanedPrefixModel::kPrefix);
  CHECK(std::filesystem::path(r.file) == std::filesystem::canonical(m.data));
  CAPI_FAILS(ballast_model_dead_range(o.model, 1, &r), BALLAST_E_OUT_OF_BOUNDS);

  // The bytes of w2 as stored: the data file's own, from its offset.
  const auto data = file_bytes(m.data);
  std::vector<unsigned char> got(100);
  CAPI_OK(ballast_model_read_weight(o.model, 2, 10, got.data(), got.size(), got.size()));
  CHECK(std::memcmp(got.data(), data.data() + OrphanedPrefixModel::kW2Offset + 10, got.size()) == 0);
}

TEST_CASE("an older caller's struct: fields past its size are left alone") {
  ScratchDir dir("capi-size");
  const auto m = OrphanedPrefixModel::write(dir.path());
  Opened o;
  CAPI_OK(ballast_model_open(m.onnx.c_str(), &o.model));
  ballast_weight_info w;
  std::memset(&w, 0xAB, sizeof w);
  w.size = offsetof(ballast_weight_info, dtype);  // a caller whose struct ends after `name`
  CAPI_OK(ballast_model_weight(o.model, 0, &w));
  CHECK(std::string(w.name) == "w0");
  unsigned char tail[sizeof w - offsetof(ballast_weight_info, dtype)];
  std::memcpy(tail, reinterpret_cast<unsigned char*>(&w) + offsetof(ballast_weight_info, dtype), sizeof tail);
  for (unsigned char c : tail) CHECK(c == 0xAB);
}

TEST_CASE("find_weight: every name of a large model at its own index, near names not found") {
  // 3000 weights (names sharing long prefixes, some a prefix of another):
  // each found where ballast_model_weight lists it, by a lookup that does
  // not scan (an engine looks up every weight its plan names).
  using namespace ballast::testing;
  ScratchDir dir("capi-find");
  std::vector<StTensor> tensors;
  for (int i = 0; i < 3000; ++i)
    tensors.push_back({"model.layers." + std::to_string(i / 10) + ".mlp." + std::to_string(i % 10),
                       "F32",
                       {1},
                       pattern(4, static_cast<unsigned>(i))});
  const auto path = dir.write("big.safetensors", st_file(tensors));
  Opened o;
  CAPI_OK(ballast_model_open(path.c_str(), &o.model));
  size_t n = 0;
  CAPI_OK(ballast_model_weight_count(o.model, &n));
  REQUIRE(n == tensors.size());
  std::size_t wrong = 0;
  for (size_t i = 0; i < n; ++i) {
    ballast_weight_info w = BALLAST_INIT(ballast_weight_info);
    CAPI_OK(ballast_model_weight(o.model, i, &w));
    size_t found = n;
    CAPI_OK(ballast_model_find_weight(o.model, w.name, &found));
    if (found != i) ++wrong;
  }
  CHECK(wrong == 0);
  for (const char* near : {"model.layers.1.mlp", "model.layers.1.mlp.", "model.layers.299.mlp.10", "model.layers.0",
                           "Model.layers.0.mlp.0", "model.layers.0.mlp.0 "}) {
    CAPTURE(near);
    size_t index = 7;
    CAPI_FAILS(ballast_model_find_weight(o.model, near, &index), BALLAST_E_NOT_FOUND);
    CHECK(index == 7);  // written only on success
  }
}

TEST_CASE("safetensors and GGUF open through the same call") {
  using namespace ballast::testing;
  ScratchDir dir("capi-formats");
  const auto st = dir.write("m.safetensors", st_file({{"a.weight", "F32", {2, 4}, pattern(32)},
                                                       {"b.bias", "F16", {4}, pattern(8, 3)}}));
  Opened o;
  CAPI_OK(ballast_model_open(st.c_str(), &o.model));
  const char* format = nullptr;
  CAPI_OK(ballast_model_format(o.model, &format));
  CHECK(std::string(format) == "safetensors");
  size_t n = 0;
  CAPI_OK(ballast_model_weight_count(o.model, &n));
  CHECK(n == 2);
  ballast_accounting a = BALLAST_INIT(ballast_accounting);
  CAPI_OK(ballast_model_accounting(o.model, &a));
  CHECK(a.referenced_bytes == 40);
  CHECK(a.header_bytes > 0);
  CHECK(a.mapped_bytes == a.referenced_bytes + a.header_bytes + a.dead_bytes);
  std::vector<unsigned char> got(8);
  size_t b = 0;
  CAPI_OK(ballast_model_find_weight(o.model, "b.bias", &b));
  CAPI_OK(ballast_model_read_weight(o.model, b, 0, got.data(), got.size(), got.size()));
  CHECK(got == pattern(8, 3));

  const auto gg = dir.write("m.gguf", gguf_file({kv_str("general.name", "t")}, {tinfo("t.weight", {8, 2}, kF32, 0)}, 64));
  ballast_model* g = nullptr;
  CAPI_OK(ballast_model_open(gg.c_str(), &g));
  CAPI_OK(ballast_model_format(g, &format));
  CHECK(std::string(format) == "gguf");
  ballast_weight_info w = BALLAST_INIT(ballast_weight_info);
  CAPI_OK(ballast_model_weight(g, 0, &w));
  CHECK(std::string(w.name) == "t.weight");
  REQUIRE(w.ndims == 2);
  CHECK(w.dims[0] == 2);  // ne reversed
  CHECK(w.dims[1] == 8);
  CHECK(w.bytes == 64);
  CHECK(std::string(w.dtype) == "float");
  CHECK(std::string(w.gguf_type) == "F32");  // version 6: GGUF's own name, as `ballast inspect` prints it
  CAPI_OK(ballast_model_free(g));
  const auto q = dir.write("q.gguf", gguf_file({}, {tinfo("q.weight", {32, 2}, kQ4_0, 0)}, 64));
  CAPI_OK(ballast_model_open(q.c_str(), &g));
  CAPI_OK(ballast_model_weight(g, 0, &w));
  CHECK(std::string(w.dtype) == "q4_0");
  CHECK(std::string(w.gguf_type) == "Q4_0");
  CAPI_OK(ballast_model_free(g));
  ballast_weight_info s = BALLAST_INIT(ballast_weight_info);
  CAPI_OK(ballast_model_weight(o.model, 0, &s));
  CHECK(std::string(s.gguf_type).empty());  // the other formats: their names are dtype's

  ballast_model* bad = nullptr;
  CAPI_FAILS(ballast_model_open(dir.write("junk.bin", std::string("not a model")).c_str(), &bad), BALLAST_E_UNSUPPORTED);
  CHECK(bad == nullptr);
  CAPI_FAILS(ballast_model_open((dir / "missing.onnx").c_str(), &bad), BALLAST_E_NOT_FOUND);
}

TEST_CASE("a pin's messages echo the model's names at most 1024 bytes long, as every error does") {
  using namespace ballast::testing;
  ScratchDir dir("capi-long-name");
  const std::string name(3000, 'n');  // a hostile model's name: echoed, not copied whole into every pin
  const auto st = dir.write("m.safetensors", st_file({{name, "F32", {2, 4}, pattern(32)}}));
  Opened o;
  CAPI_OK(ballast_model_open(st.c_str(), &o.model));
  CAPI_OK(ballast_backend_open("cpu", &o.backend));
  ballast_residency* res = nullptr;
  CAPI_OK(ballast_residency_create(o.backend, o.model, nullptr, &res));
  ballast_pin* pin = nullptr;
  CAPI_OK(ballast_residency_pin_weight(res, name.c_str(), &pin));
  unsigned char byte = 0;
  const auto past = capi_test::take(ballast_pin_read(pin, 0, 0, 32, &byte, 1, 1));
  CHECK(past.code == BALLAST_E_OUT_OF_BOUNDS);
  INFO(past.message.substr(0, 200));
  CHECK(past.message.find("weight '" + name.substr(0, 1024) + "... (3000 bytes)'") != std::string::npos);
  CHECK(past.message.size() < 1200);
  CAPI_OK(ballast_pin_free(pin));
  CAPI_OK(ballast_residency_free(res));
}

TEST_CASE("a backend: info, capabilities, counters; an unknown name is refused") {
  Opened o;
  CAPI_OK(ballast_backend_open("cpu", &o.backend));
  ballast_device_info d = BALLAST_INIT(ballast_device_info);
  CAPI_OK(ballast_backend_info(o.backend, &d));
  CHECK(std::string(d.backend) == "cpu");
  CHECK(std::string(d.name).size() > 0);
  CHECK(d.max_single_allocation > 0);
  CHECK(d.host_registration == 1);
  CHECK(counters(o.backend).live_allocations == 0);
  ballast_backend* none = nullptr;
  ballast_status* s = ballast_backend_open("no_such_backend", &none);
  CHECK(ballast_status_code(s) == BALLAST_E_INVALID_ARGUMENT);  // unknown names are usage errors, listing the known ones
  CHECK(std::string(ballast_status_message(s)).find("no_such_backend") != std::string::npos);
  ballast_status_free(s);
}

TEST_CASE("the flow: plan, residency, derive all, pin, read back, stats, teardown") {
  SampleOnCpu sample("capi-flow");
  auto& [dir, m, o] = sample;
  const ballast_device_counters baseline = counters(o.backend);

  ballast_plan* plan = nullptr;
  CAPI_OK(ballast_plan_derivations(o.model, BALLAST_PLAN_GRAPH, &plan));
  size_t n = 0;
  CAPI_OK(ballast_plan_count(plan, &n));
  REQUIRE(n == OrphanedPrefixModel::kDerivations);
  size_t transpose_w0 = n;
  uint64_t derived = 0;
  for (size_t i = 0; i < n; ++i) {
    ballast_derivation_info d = BALLAST_INIT(ballast_derivation_info);
    CAPI_OK(ballast_plan_entry(plan, i, &d));
    derived += d.first_bytes + d.second_bytes;
    if (std::string(d.weight) == "w0" && std::string(d.kind) == "transpose") {
      transpose_w0 = i;
      CHECK(std::string(d.node) == "mm0");
      CHECK(d.first_bytes == OrphanedPrefixModel::kW0Bytes);
      CHECK(d.second_bytes == 0);
    }
  }
  CHECK(derived == OrphanedPrefixModel::kDerived);
  REQUIRE(transpose_w0 < n);

  ballast_residency_options opt = BALLAST_INIT(ballast_residency_options);
  opt.strategy = BALLAST_UPLOAD;
  opt.plan = plan;
  ballast_residency* res = nullptr;
  CAPI_OK(ballast_residency_create(o.backend, o.model, &opt, &res));

  struct Seen {
    std::vector<size_t> done;
    size_t total = 0;
  } seen;
  CAPI_OK(ballast_residency_derive_all(
      res, plan,
      [](void* user, size_t done, size_t total) {
        auto* s = static_cast<Seen*>(user);
        s->done.push_back(done);
        s->total = total;
      },
      &seen));
  CHECK(seen.done == std::vector<size_t>{1, 2, 3, 4, 5});
  CHECK(seen.total == n);

  // Derive one: the transpose of w0, read back, against the source bytes.
  ballast_pin* pin = nullptr;
  CAPI_OK(ballast_residency_pin_derivation(res, plan, transpose_w0, &pin));
  size_t members = 0;
  CAPI_OK(ballast_pin_count(pin, &members));
  CHECK(members == 1);
  ballast_value v = BALLAST_INIT(ballast_value);
  CAPI_OK(ballast_pin_value(pin, 0, &v));
  CHECK(v.first != 0);
  CHECK(v.second == 0);
  REQUIRE(v.first_bytes == OrphanedPrefixModel::kW0Bytes);
  std::vector<float> t(96 * 64), src(96 * 64);
  CAPI_OK(ballast_pin_read(pin, 0, 0, 0, t.data(), t.size() * 4, v.first_bytes));
  CAPI_OK(ballast_model_read_weight(o.model, 0, 0, src.data(), src.size() * 4, src.size() * 4));
  // w0 is [96, 64]; its transpose [64, 96]: t[c * 96 + r] == src[r * 64 + c].
  int mismatches = 0;
  for (int r = 0; r < 96; ++r)
    for (int c = 0; c < 64; ++c)
      if (std::memcmp(&t[static_cast<size_t>(c * 96 + r)], &src[static_cast<size_t>(r * 64 + c)], 4) != 0) ++mismatches;
  CHECK(mismatches == 0);
  // A slice from an offset.
  float one = 0;
  CAPI_OK(ballast_pin_read(pin, 0, 0, 4 * 97, &one, sizeof one, sizeof one));
  CHECK(std::memcmp(&one, &src[64 + 1], 4) == 0);  // t[1 * 96 + 1] == src[1 * 64 + 1]

  // A source weight, pinned as stored.
  ballast_pin* wpin = nullptr;
  CAPI_OK(ballast_residency_pin_weight(res, "w1", &wpin));
  CAPI_OK(ballast_pin_value(wpin, 0, &v));
  CHECK(v.first_bytes == OrphanedPrefixModel::kW1Bytes);
  std::vector<unsigned char> w1(v.first_bytes), w1_src(v.first_bytes);
  CAPI_OK(ballast_pin_read(wpin, 0, 0, 0, w1.data(), w1.size(), w1.size()));
  CAPI_OK(ballast_model_read_weight(o.model, 1, 0, w1_src.data(), w1_src.size(), w1_src.size()));
  CHECK(w1 == w1_src);

  ballast_residency_stats st = BALLAST_INIT(ballast_residency_stats);
  CAPI_OK(ballast_residency_stats_get(res, &st));
  CHECK(st.derived_builds == n);  // built once each: the pin after derive_all found it memoized
  CHECK(st.pinned_bytes == OrphanedPrefixModel::kW0Bytes + OrphanedPrefixModel::kW1Bytes);
  CHECK(st.device_bytes > 0);

  CAPI_OK(ballast_pin_free(pin));
  CAPI_OK(ballast_pin_free(wpin));
  ballast_teardown td = BALLAST_INIT(ballast_teardown);
  CAPI_OK(ballast_residency_release(res, &td));
  CHECK(td.bytes_freed == st.device_bytes);
  CHECK(td.allocations_freed > 0);
  CHECK(td.failed_frees == 0);
  const ballast_device_counters after = counters(o.backend);
  CHECK(after.live_allocations == baseline.live_allocations);
  CHECK(after.live_bytes == baseline.live_bytes);
  CAPI_OK(ballast_residency_release(res, &td));  // idempotent
  CHECK(td.bytes_freed == 0);
  CAPI_OK(ballast_residency_free(res));
  CAPI_OK(ballast_plan_free(plan));
}

TEST_CASE("paged residency with layers: groups, pin a group, prefetch, a budget that cannot fit") {
  SampleOnCpu sample("capi-paged");
  auto& [dir, m, o] = sample;
  ballast_residency_options opt = BALLAST_INIT(ballast_residency_options);
  opt.strategy = BALLAST_PAGED;
  opt.group_by_layer = "w";  // "w0" is not "w<N>.": each weight its own group
  ballast_residency* res = nullptr;
  // A kinds mask with a bit past the last kind is refused, not ignored.
  std::uint32_t kinds = 0;
  while (ballast_derivation_kind_name(kinds) != nullptr) ++kinds;
  opt.kinds = (1u << 0) | (1u << kinds);
  CAPI_FAILS(ballast_residency_create(o.backend, o.model, &opt, &res), BALLAST_E_INVALID_ARGUMENT);
  CHECK(res == nullptr);
  opt.kinds = 0xffffffffu;
  CAPI_FAILS(ballast_residency_create(o.backend, o.model, &opt, &res), BALLAST_E_INVALID_ARGUMENT);
  opt.kinds = 1u << 0;  // transpose only
  CAPI_OK(ballast_residency_create(o.backend, o.model, &opt, &res));
  ballast_plan* plan = nullptr;
  CAPI_OK(ballast_residency_plan(res, &plan));
  size_t n = 0;
  CAPI_OK(ballast_plan_count(plan, &n));
  CHECK(n == 2);  // the transposes of w0 and w2
  size_t groups = 0;
  CAPI_OK(ballast_residency_group_count(res, &groups));
  REQUIRE(groups == 3);
  ballast_residency_stats st = BALLAST_INIT(ballast_residency_stats);
  CAPI_OK(ballast_residency_stats_get(res, &st));
  // auto: the referenced sources plus the two transposes
  CHECK(st.budget_bytes == OrphanedPrefixModel::kReferenced + OrphanedPrefixModel::kW0Bytes + OrphanedPrefixModel::kW2Bytes);

  CAPI_OK(ballast_residency_prefetch_group(res, 1));
  CAPI_OK(ballast_residency_prefetch(res, plan, 1));
  CAPI_OK(ballast_residency_wait_prefetches(res));
  ballast_pin* layer = nullptr;
  CAPI_OK(ballast_residency_pin_group(res, 0, 100, &layer));
  size_t members = 0;
  CAPI_OK(ballast_pin_count(layer, &members));
  CHECK(members == 1);  // group "w0": its transpose (w0 as stored is read by no kernel)
  CAPI_OK(ballast_residency_stats_get(res, &st));
  CHECK(st.pinned_bytes == OrphanedPrefixModel::kW0Bytes);
  CHECK(st.prefetches >= 1);
  CAPI_OK(ballast_pin_free(layer));
  CAPI_FAILS(ballast_residency_pin_group(res, groups, 0, &layer), BALLAST_E_OUT_OF_BOUNDS);
  CAPI_OK(ballast_plan_free(plan));
  CAPI_OK(ballast_residency_free(res));

  // A budget below the largest entry is refused by create(), naming it.
  opt.budget_bytes = 1000;
  ballast_residency* small = nullptr;
  CAPI_FAILS(ballast_residency_create(o.backend, o.model, &opt, &small), BALLAST_E_INVALID_ARGUMENT);
  CHECK(small == nullptr);
}

TEST_CASE("a release waiting behind a pin_group that waits for room does not hold back the unpin that makes it") {
  // Before capi::Gate, the unpin went through only because glibc's
  // std::shared_mutex lets a reader pass a waiting writer; elsewhere the
  // pin_group waited out its whole wait_ms and failed.
  SampleOnCpu sample("capi-gate");
  auto& [dir, m, o] = sample;
  ballast_residency_options opt = BALLAST_INIT(ballast_residency_options);
  opt.strategy = BALLAST_PAGED;
  opt.group_by_layer = "w";  // group 0: w0's transpose; group 2: w2's
  opt.kinds = 1u << 0;       // transpose only
  // w0's transpose is built beside its source (2 x 24576 bytes); with w2's
  // transpose (4096) pinned, that does not fit.
  opt.budget_bytes = 2 * OrphanedPrefixModel::kW0Bytes + 2048;
  ballast_residency* res = nullptr;
  CAPI_OK(ballast_residency_create(o.backend, o.model, &opt, &res));
  ballast_pin* w2 = nullptr;
  CAPI_OK(ballast_residency_pin_group(res, 2, 0, &w2));
  std::atomic<bool> pinned{false}, released{false};
  ballast_pin* w0 = nullptr;
  ballast_status* pin_status = nullptr;
  ballast_status* release_status = nullptr;
  const auto start = std::chrono::steady_clock::now();
  std::thread pinner([&] {
    pin_status = ballast_residency_pin_group(res, 0, 20000, &w0);
    pinned = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  REQUIRE_FALSE(pinned.load());  // waiting for room
  std::thread releaser([&] {
    release_status = ballast_residency_release(res, nullptr);
    released = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CHECK_FALSE(released.load());  // behind the pin_group
  // Calls on the pin this thread holds go through too: its holder may read
  // it before letting it go (held back, they waited out the pin_group's
  // 20 s and then found the residency released).
  ballast_value v = BALLAST_INIT(ballast_value);
  CAPI_OK(ballast_pin_value(w2, 0, &v));
  std::vector<unsigned char> first(16);
  CAPI_OK(ballast_pin_read(w2, 0, 0, 0, first.data(), first.size(), first.size()));
  CHECK_FALSE(released.load());
  CAPI_OK(ballast_pin_free(w2));  // the room
  pinner.join();
  releaser.join();
  const auto waited = std::chrono::steady_clock::now() - start;
  CHECK(pin_status == nullptr);
  // The release ran after the pin_group returned: it found w0's pin (and
  // says so; the engine freed it too late), freed the values, and is done.
  REQUIRE(release_status != nullptr);
  CHECK(ballast_status_code(release_status) == BALLAST_E_INVALID_ARGUMENT);
  CHECK(std::string(ballast_status_message(release_status)).find("1 value(s) still pinned") != std::string::npos);
  ballast_status_free(pin_status);
  ballast_status_free(release_status);
  CHECK(waited < std::chrono::seconds(10));  // not the pin_group's 20 s
  if (w0 != nullptr) CAPI_OK(ballast_pin_free(w0));
  CAPI_OK(ballast_residency_free(res));
}

TEST_CASE("derive_all's progress callback may call the residency while a release waits") {
  // The callback ran under derive_all's share of the gate: a call back into
  // the residency (stats_get here) waited behind a release that itself
  // waited for that share, and neither ever returned.
  SampleOnCpu sample("capi-progress-release");
  auto& [dir, m, o] = sample;
  ballast_plan* plan = nullptr;
  CAPI_OK(ballast_plan_derivations(o.model, BALLAST_PLAN_GRAPH, &plan));
  ballast_residency_options opt = BALLAST_INIT(ballast_residency_options);
  opt.strategy = BALLAST_UPLOAD;
  opt.plan = plan;
  ballast_residency* res = nullptr;
  CAPI_OK(ballast_residency_create(o.backend, o.model, &opt, &res));
  struct Shared {
    ballast_residency* res = nullptr;
    std::thread releaser;
    ballast_status* release_status = nullptr;
    ballast_status* stats_status = nullptr;
    size_t calls = 0;
  } sh;
  sh.res = res;
  std::atomic<bool> finished{false};
  ballast_status* derive_status = nullptr;
  std::thread deriver([&] {
    derive_status = ballast_residency_derive_all(
        res, plan,
        [](void* user, size_t, size_t) {
          auto* s = static_cast<Shared*>(user);
          if (s->calls++ != 0) return;
          s->releaser = std::thread([s] { s->release_status = ballast_residency_release(s->res, nullptr); });
          std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the release is waiting, or done
          ballast_residency_stats st = BALLAST_INIT(ballast_residency_stats);
          s->stats_status = ballast_residency_stats_get(s->res, &st);
        },
        &sh);
    finished = true;
  });
  for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
       !finished.load() && std::chrono::steady_clock::now() < until;)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (!finished.load()) {  // the deadlock: nothing will join these threads
    std::fprintf(stderr, "FAILED: derive_all's callback and a waiting release wait for each other\n");
    std::_Exit(1);
  }
  deriver.join();
  sh.releaser.join();
  CHECK(sh.calls == 1);               // the release ran between the first entry and the second
  CHECK(sh.stats_status == nullptr);  // stats stay readable after release
  CHECK(sh.release_status == nullptr);
  REQUIRE(derive_status != nullptr);
  CHECK(ballast_status_code(derive_status) == BALLAST_E_INVALID_ARGUMENT);
  CHECK(std::string(ballast_status_message(derive_status)).find("released") != std::string::npos);
  ballast_status_free(derive_status);
  CAPI_OK(ballast_plan_free(plan));
  CAPI_OK(ballast_residency_free(res));
}

TEST_CASE("per-weight overrides and derivations off") {
  SampleOnCpu sample("capi-overrides");
  auto& [dir, m, o] = sample;
  ballast_override ov[] = {{"w2", BALLAST_UPLOAD}};
  ballast_residency_options opt = BALLAST_INIT(ballast_residency_options);
  opt.strategy = BALLAST_ZERO_COPY;
  opt.no_derivations = 1;
  opt.overrides = ov;
  opt.override_count = 1;
  ballast_residency* res = nullptr;
  CAPI_OK(ballast_residency_create(o.backend, o.model, &opt, &res));
  ballast_pin* p = nullptr;
  CAPI_OK(ballast_residency_pin_weight(res, "w2", &p));
  CAPI_OK(ballast_pin_free(p));
  CAPI_OK(ballast_residency_pin_weight(res, "w0", &p));
  CAPI_OK(ballast_pin_free(p));
  ballast_residency_stats st = BALLAST_INIT(ballast_residency_stats);
  CAPI_OK(ballast_residency_stats_get(res, &st));
  CHECK(st.uploaded_bytes == OrphanedPrefixModel::kW2Bytes);  // w2 uploaded, w0 read in place
  CHECK(st.registered_bytes > 0);
  CAPI_OK(ballast_residency_free(res));

  ballast_override unknown[] = {{"nope", BALLAST_UPLOAD}};
  opt.overrides = unknown;
  CAPI_FAILS(ballast_residency_create(o.backend, o.model, &opt, &res), BALLAST_E_NOT_FOUND);
}

TEST_CASE("the log sink: ballast's messages reach the C function, NULL restores stderr") {
  struct Got {
    int calls = 0;
    ballast_log_level level = BALLAST_LOG_INFO;
    std::string source, text;
  } got;
  CAPI_OK(ballast_set_log_sink(
      [](void* user, ballast_log_level level, const char* source, const char* text) {
        auto* g = static_cast<Got*>(user);
        ++g->calls;
        g->level = level;
        g->source = source;
        g->text = text;
      },
      &got));
  ballast::log_message(ballast::LogLevel::warning, "capi test", "a warning");
  CAPI_OK(ballast_set_log_sink(nullptr, nullptr));
  ballast::log_message(ballast::LogLevel::info, "capi test", "to stderr");
  CHECK(got.calls == 1);
  CHECK(got.level == BALLAST_LOG_WARNING);
  CHECK(got.source == "capi test");
  CHECK(got.text == "a warning");
}

TEST_CASE("the conformance suite from C: a child process, its counts and summary") {
  ballast_conformance_result r = BALLAST_INIT(ballast_conformance_result);
  std::vector<char> json(1 << 16);
  std::size_t length = 0;
  CAPI_OK(ballast_run_conformance("cpu", "device weights*", &r, json.data(), json.size(), &length));
  CHECK(r.exit_code == 0);
  CHECK(r.passed >= 2);  // the device-weights cases, nothing else
  CHECK(r.failed == 0);
  CHECK(length == std::strlen(json.data()));
  const std::string summary(json.data());
  CHECK(summary.find("\"result\": \"passed\"") != std::string::npos);
  CHECK(summary.find("\"passed\": " + std::to_string(r.passed)) != std::string::npos);

  // A buffer too small: cut and terminated, the full length reported.
  char small[16];
  std::size_t full = 0;
  CAPI_OK(ballast_run_conformance("cpu", "device weights*", &r, small, sizeof small, &full));
  CHECK(full == length);
  CHECK(std::strlen(small) == sizeof small - 1);
  CHECK(std::string(small) == summary.substr(0, sizeof small - 1));

  // A backend name the runner does not know: a usage error of the suite
  // (exit 2), not an error of the call, and the summary says why.
  ballast_conformance_result bad = BALLAST_INIT(ballast_conformance_result);
  CAPI_OK(ballast_run_conformance("nosuch", nullptr, &bad, json.data(), json.size(), nullptr));
  CHECK(bad.exit_code == 2);
  CHECK(bad.passed + bad.failed + bad.skipped == 0);
  CHECK(std::string(json.data()).find("unknown backend") != std::string::npos);
  CAPI_FAILS(ballast_run_conformance(nullptr, nullptr, &r, nullptr, 0, nullptr), BALLAST_E_INVALID_ARGUMENT);
  CAPI_FAILS(ballast_run_conformance("cpu", nullptr, nullptr, nullptr, 0, nullptr), BALLAST_E_INVALID_ARGUMENT);
  CAPI_FAILS(ballast_run_conformance("cpu", nullptr, &r, nullptr, 8, nullptr), BALLAST_E_INVALID_ARGUMENT);
  // A result struct of its size field alone (a caller that wants only the
  // summary) is taken, and nothing past that size is written; one byte
  // less is not a struct.
  ballast_conformance_result only_size{};
  only_size.size = sizeof(std::size_t);
  only_size.passed = 12345;
  CAPI_OK(ballast_run_conformance("cpu", "device weights*", &only_size, nullptr, 0, nullptr));
  CHECK(only_size.passed == 12345);
  only_size.size = sizeof(std::size_t) - 1;
  CAPI_FAILS(ballast_run_conformance("cpu", nullptr, &only_size, nullptr, 0, nullptr), BALLAST_E_INVALID_ARGUMENT);
  const auto* api = static_cast<const ballast_api_v1*>(ballast_get_api(1));
  CHECK((api->run_conformance == &ballast_run_conformance));
}

TEST_CASE("version 3: the kinds' names, in the kind table's order, NULL past the last") {
  const auto* v2 = static_cast<const ballast_api_v2*>(ballast_get_api(2));
  const auto* v3 = static_cast<const ballast_api_v3*>(ballast_get_api(3));
  REQUIRE(v2 != nullptr);
  REQUIRE(v3 != nullptr);
  CHECK(static_cast<const void*>(v2) == static_cast<const void*>(&v3->v2));  // version 2's table is a prefix
  CHECK((v3->derivation_kind_name == &ballast_derivation_kind_name));
  CHECK(ballast_get_api(BALLAST_C_API_VERSION + 1) == nullptr);
  CAPI_OK(ballast_check_version(3));
  for (int k = 0; k < ballast::kDerivationCount; ++k) {
    const char* name = ballast_derivation_kind_name(static_cast<uint32_t>(k));
    REQUIRE(name != nullptr);
    CHECK(std::string(name) == ballast::derivation_name(static_cast<ballast::Derivation>(k)));
  }
  CHECK(std::string(ballast_derivation_kind_name(0)) == "transpose");
  CHECK(ballast_derivation_kind_name(static_cast<uint32_t>(ballast::kDerivationCount)) == nullptr);
  CHECK(ballast_derivation_kind_name(UINT32_MAX) == nullptr);
}

TEST_CASE("version 2: the table's appended members, a weight's address, a second model handle, a value's layout") {
  const auto* v1 = static_cast<const ballast_api_v1*>(ballast_get_api(1));
  const auto* v2 = static_cast<const ballast_api_v2*>(ballast_get_api(2));
  REQUIRE(v1 != nullptr);
  REQUIRE(v2 != nullptr);
  CHECK(static_cast<const void*>(v1) == static_cast<const void*>(&v2->v1));  // version 1's table is a prefix
  CHECK((v2->v1.pin_read == &ballast_pin_read));
  CHECK((v2->model_retain == &ballast_model_retain));
  CHECK((v2->model_weight_data == &ballast_model_weight_data));
  CHECK((v2->plan_entry_layout == &ballast_plan_entry_layout));
  CAPI_OK(ballast_check_version(2));

  SampleOnCpu sample("capi-v2");
  auto& [dir, m, o] = sample;

  // The CPU backend's memory is host memory; an older caller's struct
  // (version 1's size) is not written past.
  ballast_device_info info = BALLAST_INIT(ballast_device_info);
  CAPI_OK(ballast_backend_info(o.backend, &info));
  CHECK(info.host_visible == 1);
  ballast_device_info old{};
  old.size = offsetof(ballast_device_info, host_visible);
  old.host_visible = 7;
  CAPI_OK(ballast_backend_info(o.backend, &old));
  CHECK(old.host_visible == 7);

  // A weight's bytes in the mapping are its bytes as stored.
  const void* data = nullptr;
  CAPI_OK(ballast_model_weight_data(o.model, 0, &data));
  REQUIRE(data != nullptr);
  std::vector<unsigned char> src(OrphanedPrefixModel::kW0Bytes);
  CAPI_OK(ballast_model_read_weight(o.model, 0, 0, src.data(), src.size(), src.size()));
  CHECK(std::memcmp(data, src.data(), src.size()) == 0);
  const auto file = file_bytes(m.data);
  CHECK(std::memcmp(data, file.data() + OrphanedPrefixModel::kW0Offset, src.size()) == 0);
  CAPI_FAILS(ballast_model_weight_data(o.model, 3, &data), BALLAST_E_OUT_OF_BOUNDS);
  CAPI_FAILS(ballast_model_weight_data(o.model, 0, nullptr), BALLAST_E_INVALID_ARGUMENT);

  // A second handle keeps the model (and the address) after the first is freed.
  ballast_model* second = nullptr;
  CAPI_OK(ballast_model_retain(o.model, &second));
  CHECK(second != o.model);
  CAPI_OK(ballast_model_free(o.model));
  CAPI_FAILS(ballast_model_weight_data(o.model, 0, &data), BALLAST_E_INVALID_HANDLE);
  CAPI_FAILS(ballast_model_retain(o.model, &second), BALLAST_E_INVALID_HANDLE);
  o.model = second;
  const void* again = nullptr;
  CAPI_OK(ballast_model_weight_data(o.model, 0, &again));
  CHECK(again == data);
  CHECK(std::memcmp(again, src.data(), src.size()) == 0);

  // Each planned value's layout: dtype, dims (the dump's shape), bytes = the entry's.
  ballast_plan* plan = nullptr;
  CAPI_OK(ballast_plan_derivations(o.model, BALLAST_PLAN_GRAPH, &plan));
  size_t n = 0;
  CAPI_OK(ballast_plan_count(plan, &n));
  int transposes = 0, pairs = 0;
  for (size_t i = 0; i < n; ++i) {
    ballast_derivation_info d = BALLAST_INIT(ballast_derivation_info);
    CAPI_OK(ballast_plan_entry(plan, i, &d));
    ballast_value_layout first = BALLAST_INIT(ballast_value_layout), second_half = BALLAST_INIT(ballast_value_layout);
    CAPI_OK(ballast_plan_entry_layout(plan, i, 0, &first));
    CHECK(first.bytes == d.first_bytes);
    if (d.second_bytes != 0) {
      ++pairs;
      CAPI_OK(ballast_plan_entry_layout(plan, i, 1, &second_half));
      CHECK(second_half.bytes == d.second_bytes);
    } else {
      CAPI_FAILS(ballast_plan_entry_layout(plan, i, 1, &second_half), BALLAST_E_OUT_OF_BOUNDS);
    }
    if (std::string(d.weight) == "w0" && std::string(d.kind) == "transpose") {
      ++transposes;
      CHECK(std::string(first.dtype) == "float");
      REQUIRE(first.ndims == 2);
      CHECK(first.dims[0] == 64);  // w0 is [96, 64]
      CHECK(first.dims[1] == 96);
    }
    if (std::string(d.weight) == "w0" && std::string(d.kind) == "quant_int8") {
      CHECK(std::string(first.dtype) == "int8");
      CHECK(std::string(second_half.dtype) == "float");
      REQUIRE(second_half.ndims == 1);
      CHECK(second_half.dims[0] == 64);  // a scale per output channel
    }
  }
  CHECK(transposes == 1);
  CHECK(pairs > 0);
  ballast_value_layout lay = BALLAST_INIT(ballast_value_layout);
  CAPI_FAILS(ballast_plan_entry_layout(plan, n, 0, &lay), BALLAST_E_OUT_OF_BOUNDS);
  CAPI_FAILS(ballast_plan_entry_layout(plan, 0, 2, &lay), BALLAST_E_INVALID_ARGUMENT);
  CAPI_FAILS(ballast_plan_entry_layout(plan, 0, 0, nullptr), BALLAST_E_INVALID_ARGUMENT);

  // On the CPU backend a pinned value's device pointer is its host address.
  ballast_residency* res = nullptr;
  CAPI_OK(ballast_residency_create(o.backend, o.model, nullptr, &res));
  ballast_pin* pin = nullptr;
  CAPI_OK(ballast_residency_pin_derivation(res, plan, 0, &pin));
  ballast_value v = BALLAST_INIT(ballast_value);
  CAPI_OK(ballast_pin_value(pin, 0, &v));
  std::vector<unsigned char> copy(v.first_bytes);
  CAPI_OK(ballast_pin_read(pin, 0, 0, 0, copy.data(), copy.size(), copy.size()));
  CHECK(std::memcmp(reinterpret_cast<const void*>(static_cast<std::uintptr_t>(v.first)), copy.data(), copy.size()) == 0);
  CAPI_OK(ballast_pin_free(pin));
  CAPI_OK(ballast_residency_free(res));
  CAPI_OK(ballast_plan_free(plan));
}

TEST_CASE("a weight's address in a file truncated since it was opened is an io error, not a SIGBUS to come") {
  using namespace ballast::testing;
  ScratchDir dir("capi-weight-data-truncated");
  const auto gg =
      dir.write("m.gguf", gguf_file({kv_str("general.name", "t")}, {tinfo("t.weight", {1024}, kF32, 0)}, 4096));
  Opened o;
  CAPI_OK(ballast_model_open(gg.c_str(), &o.model));
  const void* data = nullptr;
  CAPI_OK(ballast_model_weight_data(o.model, 0, &data));
  // The tensor's pages are gone: whoever read `data` now would die of SIGBUS.
  std::filesystem::resize_file(gg, 64);
  const void* after = nullptr;
  const capi_test::Outcome out = capi_test::take(ballast_model_weight_data(o.model, 0, &after));
  CHECK(out.code == BALLAST_E_IO);
  CHECK_MESSAGE(out.message.find("changed since it was opened") != std::string::npos, out.message);
  CHECK_MESSAGE(out.message.find("tensor=t.weight") != std::string::npos, out.message);  // which weight, too
  CHECK(after == nullptr);
  std::vector<unsigned char> buf(16);  // a copy of it says the same
  const capi_test::Outcome copied = capi_test::take(ballast_model_read_weight(o.model, 0, 0, buf.data(), 16, 16));
  CHECK(copied.code == BALLAST_E_IO);
  CHECK_MESSAGE(copied.message.find("tensor=t.weight") != std::string::npos, copied.message);
}

TEST_CASE("a pinned weight read in place from a file truncated since is an io error, not its zeros") {
  // zero_copy pins a weight's registered mapping; the registration's guard
  // answers a page a truncation took with zeros. ballast_pin_read handed
  // those zeros back as the weight's bytes, with no error.
  using namespace ballast::testing;
  ScratchDir dir("capi-pin-read-truncated");
  const auto bytes = gguf_file({kv_str("general.name", "t")},
                               {tinfo("t.weight", {1024}, kF32, 4096), tinfo("u.weight", {1024}, kF32, 0)}, 3 * 4096);
  Opened o;
  CAPI_OK(ballast_backend_open("cpu", &o.backend));
  for (const int strategy : {BALLAST_ZERO_COPY, BALLAST_UPLOAD}) {
    CAPTURE(strategy);
    const auto gg = dir.write(strategy == BALLAST_UPLOAD ? "upload.gguf" : "zero_copy.gguf", bytes);
    const auto original_size = std::filesystem::file_size(gg);
    Opened fresh;
    CAPI_OK(ballast_model_open(gg.c_str(), &fresh.model));
    ballast_residency_options opt = BALLAST_INIT(ballast_residency_options);
    opt.strategy = strategy;
    ballast_residency* res = nullptr;
    CAPI_OK(ballast_residency_create(o.backend, fresh.model, &opt, &res));
    ballast_pin* pin = nullptr;
    CAPI_OK(ballast_residency_pin_weight(res, "t.weight", &pin));
    std::vector<unsigned char> before(4096), after(4096, 0xAB);
    CAPI_OK(ballast_pin_read(pin, 0, 0, 0, before.data(), before.size(), before.size()));
    std::filesystem::resize_file(gg, 64);  // the weight's pages are gone
    const capi_test::Outcome out =
        capi_test::take(ballast_pin_read(pin, 0, 0, 0, after.data(), after.size(), after.size()));
    if (strategy == BALLAST_UPLOAD) {
      CHECK(out.code == BALLAST_OK);  // a copy on the device: the file no longer matters
      CHECK(before == after);
    } else {
      CHECK(out.code == BALLAST_E_IO);
      CHECK_MESSAGE(out.message.find("reading weight 't.weight' in place") != std::string::npos, out.message);
      CHECK_MESSAGE(out.message.find("changed since it was opened") != std::string::npos, out.message);
      // Put back at its old size, the file still read zeros there: refused too.
      std::filesystem::resize_file(gg, original_size);
      CHECK(capi_test::take(ballast_pin_read(pin, 0, 0, 0, after.data(), after.size(), after.size())).code ==
            BALLAST_E_IO);
    }
    CAPI_OK(ballast_pin_free(pin));
    CAPI_OK(ballast_residency_free(res));
  }
}

TEST_CASE("version 4: the cold start from C, its report against the model, its options checked") {
  const auto* v3 = static_cast<const ballast_api_v3*>(ballast_get_api(3));
  const auto* v4 = static_cast<const ballast_api_v4*>(ballast_get_api(4));
  REQUIRE(v3 != nullptr);
  REQUIRE(v4 != nullptr);
  CHECK(static_cast<const void*>(v3) == static_cast<const void*>(&v4->v3));  // version 3's table is a prefix
  CHECK((v4->residency_load == &ballast_residency_load));
  CAPI_OK(ballast_check_version(4));

  SampleOnCpu sample("capi-v4");
  auto& [dir, m, o] = sample;
  const ballast_device_counters baseline = counters(o.backend);
  ballast_residency_options opt = BALLAST_INIT(ballast_residency_options);
  opt.strategy = BALLAST_UPLOAD;
  ballast_residency* res = nullptr;
  CAPI_OK(ballast_residency_create(o.backend, o.model, &opt, &res));

  // Bad options are refused before anything is read.
  ballast_load_options lo = BALLAST_INIT(ballast_load_options);
  ballast_load_report report = BALLAST_INIT(ballast_load_report);
  lo.engine = 7;
  CAPI_FAILS(ballast_residency_load(res, &lo, &report), BALLAST_E_INVALID_ARGUMENT);
  lo = BALLAST_INIT(ballast_load_options);
  lo.cache = -1;
  CAPI_FAILS(ballast_residency_load(res, &lo, &report), BALLAST_E_INVALID_ARGUMENT);
  lo = BALLAST_INIT(ballast_load_options);
  lo.chunk_bytes = UINT64_MAX;  // past read_plan's cap
  CAPI_FAILS(ballast_residency_load(res, &lo, &report), BALLAST_E_INVALID_ARGUMENT);
  lo = BALLAST_INIT(ballast_load_options);
  lo.size = 0;
  CAPI_FAILS(ballast_residency_load(res, &lo, &report), BALLAST_E_INVALID_ARGUMENT);
  ballast_load_report unsized{};
  CAPI_FAILS(ballast_residency_load(res, nullptr, &unsized), BALLAST_E_INVALID_ARGUMENT);
  CAPI_FAILS(ballast_residency_load(nullptr, nullptr, &report), BALLAST_E_INVALID_HANDLE);
  ballast_residency_stats st = BALLAST_INIT(ballast_residency_stats);
  CAPI_OK(ballast_residency_stats_get(res, &st));
  CHECK(st.device_bytes == 0);

  // The file was just written, so the page cache holds it: read anyway.
  lo = BALLAST_INIT(ballast_load_options);
  lo.read_cached = 1;
  lo.engine = BALLAST_READ_THREADS;
  lo.chunk_bytes = 4096;
  CAPI_OK(ballast_residency_load(res, &lo, &report));
  CHECK(report.planned_bytes == OrphanedPrefixModel::kReferenced);  // never the orphaned prefix
  CHECK(report.read_bytes == OrphanedPrefixModel::kReferenced);
  CHECK(report.planned_files == 1);
  CHECK(report.read_files == 1);
  CHECK(report.reads >= OrphanedPrefixModel::kReferenced / 4096);
  CHECK(report.sources_read == 3);
  CHECK(report.derived_built == OrphanedPrefixModel::kDerivations);
  CHECK(report.left_for_demand == 0);
  CHECK(report.engine == BALLAST_READ_THREADS);
  CHECK(report.cache == BALLAST_CACHE_DROP);  // upload: nothing reads these bytes again
  CHECK(report.staging_bytes > 0);
  CHECK(report.seconds >= report.read_seconds);

  // What it loaded is the model's bytes, and pins find it: nothing rebuilt.
  ballast_pin* wpin = nullptr;
  CAPI_OK(ballast_residency_pin_weight(res, "w1", &wpin));
  ballast_value v = BALLAST_INIT(ballast_value);
  CAPI_OK(ballast_pin_value(wpin, 0, &v));
  REQUIRE(v.first_bytes == OrphanedPrefixModel::kW1Bytes);
  std::vector<unsigned char> w1(v.first_bytes), w1_src(v.first_bytes);
  CAPI_OK(ballast_pin_read(wpin, 0, 0, 0, w1.data(), w1.size(), w1.size()));
  CAPI_OK(ballast_model_read_weight(o.model, 1, 0, w1_src.data(), w1_src.size(), w1_src.size()));
  CHECK(w1 == w1_src);
  CAPI_OK(ballast_pin_free(wpin));
  ballast_plan* plan = nullptr;
  CAPI_OK(ballast_plan_derivations(o.model, BALLAST_PLAN_GRAPH, &plan));
  CAPI_OK(ballast_residency_derive_all(res, plan, nullptr, nullptr));
  CAPI_OK(ballast_residency_stats_get(res, &st));
  CHECK(st.derived_builds == OrphanedPrefixModel::kDerivations);
  CHECK(st.uploaded_bytes == OrphanedPrefixModel::kReferenced);

  // Again, with the defaults and an older caller's report (up to
  // planned_files): everything is there, nothing read, nothing written past.
  struct Older {
    size_t size;
    uint64_t planned_bytes, planned_ranges, planned_files;
    uint64_t guard;
  } older{};
  older.size = offsetof(ballast_load_report, read_bytes);
  older.guard = 0x5a5a5a5a5a5a5a5aull;
  CAPI_OK(ballast_residency_load(res, nullptr, reinterpret_cast<ballast_load_report*>(&older)));
  CHECK(older.size == offsetof(ballast_load_report, read_bytes));
  CHECK(older.planned_bytes == 0);
  CHECK(older.guard == 0x5a5a5a5a5a5a5a5aull);
  CAPI_OK(ballast_residency_load(res, nullptr, nullptr));  // no report wanted
  CAPI_OK(ballast_residency_load(res, nullptr, &report));
  CHECK(report.read_bytes == 0);
  CHECK(report.engine == BALLAST_READ_AUTO);  // nothing read: no engine ran

  ballast_teardown td = BALLAST_INIT(ballast_teardown);
  CAPI_OK(ballast_residency_release(res, &td));
  CHECK(td.failed_frees == 0);
  CAPI_FAILS(ballast_residency_load(res, nullptr, &report), BALLAST_E_INVALID_ARGUMENT);  // after release
  const ballast_device_counters after = counters(o.backend);
  CHECK(after.live_allocations == baseline.live_allocations);
  CAPI_OK(ballast_residency_free(res));
  CAPI_OK(ballast_plan_free(plan));
}

// extension_plugin.cpp (plugin_api.h and ballast.h both name
// ballast_device_info, so one file cannot hold both).
const void* register_extension_plugin(const char* name);

TEST_CASE("version 5: a device's extension and a plugin's own, by name") {
  const auto* v4 = static_cast<const ballast_api_v4*>(ballast_get_api(4));
  const auto* v5 = static_cast<const ballast_api_v5*>(ballast_get_api(5));
  REQUIRE(v4 != nullptr);
  REQUIRE(v5 != nullptr);
  CHECK(static_cast<const void*>(v4) == static_cast<const void*>(&v5->v4));  // version 4's table is a prefix
  CHECK((v5->backend_extension == &ballast_backend_extension));
  CHECK((v5->plugin_extension == &ballast_plugin_extension));
  CAPI_OK(ballast_check_version(5));

  // The CPU backend's own extension (its kernel set's name), and none of another name.
  Opened o;
  CAPI_OK(ballast_backend_open("cpu", &o.backend));
  void* found = reinterpret_cast<void*>(1);
  CAPI_OK(ballast_backend_extension(o.backend, "ballast_cpu_kernel_set", &found));
  CHECK(found != nullptr);
  CAPI_OK(ballast_backend_extension(o.backend, "no_such_extension", &found));
  CHECK(found == nullptr);
  CAPI_FAILS(ballast_backend_extension(o.backend, nullptr, &found), BALLAST_E_INVALID_ARGUMENT);
  CAPI_FAILS(ballast_backend_extension(o.backend, "x", nullptr), BALLAST_E_INVALID_ARGUMENT);
  CAPI_FAILS(ballast_backend_extension(nullptr, "x", &found), BALLAST_E_INVALID_HANDLE);

  // A plugin's own, reached without a device (this one has none).
  const void* marker = register_extension_plugin("capi_extension");
  REQUIRE(marker != nullptr);
  found = nullptr;
  CAPI_OK(ballast_plugin_extension("capi_extension", "marker", &found));
  CHECK(found == marker);
  CAPI_OK(ballast_plugin_extension("capi_extension", "other", &found));
  CHECK(found == nullptr);
  CAPI_OK(ballast_plugin_extension("cpu", "anything", &found));  // the CPU plugin has none of its own
  CHECK(found == nullptr);
  CAPI_FAILS(ballast_plugin_extension("no_such_backend", "marker", &found), BALLAST_E_INVALID_ARGUMENT);
  CAPI_FAILS(ballast_plugin_extension(nullptr, "marker", &found), BALLAST_E_INVALID_ARGUMENT);
  CAPI_FAILS(ballast_plugin_extension("capi_extension", nullptr, &found), BALLAST_E_INVALID_ARGUMENT);
  CAPI_FAILS(ballast_plugin_extension("capi_extension", "marker", nullptr), BALLAST_E_INVALID_ARGUMENT);
}

namespace {

// ballast_printable's result for `text`, through the size query and a
// buffer of exactly the length it names.
std::string c_printable(std::string_view text) {
  std::size_t needed = 0;
  CAPI_OK(ballast_printable(text.data(), text.size(), nullptr, 0, &needed));
  std::string out(needed + 1, '#');
  std::size_t written = 0;
  CAPI_OK(ballast_printable(text.data(), text.size(), out.data(), out.size(), &written));
  CHECK(written == needed);
  CHECK(out[needed] == '\0');
  out.resize(needed);
  return out;
}

}  // namespace

TEST_CASE("version 7: a model's bytes escaped as the command line shows them") {
  const auto* v6 = static_cast<const ballast_api_v6*>(ballast_get_api(6));
  const auto* v7 = static_cast<const ballast_api_v7*>(ballast_get_api(7));
  REQUIRE(v6 != nullptr);
  REQUIRE(v7 != nullptr);
  CHECK(static_cast<const void*>(v6) == static_cast<const void*>(&v7->v6));  // version 6's table is a prefix
  CHECK((v7->printable == &ballast_printable));
  CAPI_OK(ballast_check_version(7));

  // Each class of byte the command line treats in its own way.
  using namespace std::string_literals;
  CHECK(c_printable("model.layers.0.weight") == "model.layers.0.weight");
  CHECK(c_printable("ok\r\x1b[8m") == "ok\\x0d\\x1b[8m");
  CHECK(c_printable("a\\b\n") == "a\\\\b\\x0a");
  CHECK(c_printable("nul\0x"s) == "nul\\x00x");
  CHECK(c_printable("\xc3\xa9t\xc3\xa9") == "\xc3\xa9t\xc3\xa9");  // valid UTF-8 kept
  CHECK(c_printable("\xc2\x9b") == "\\xc2\\x9b");                  // C1 control U+009B
  CHECK(c_printable("\xe2\x80\xae") == "\\u{202e}");               // right-to-left override
  CHECK(c_printable("\xff\xc3") == "\\xff\\xc3");                  // invalid, and cut short
  CHECK(c_printable("") == "");
  std::size_t needed = 7;
  CAPI_OK(ballast_printable(nullptr, 0, nullptr, 0, &needed));  // NULL text of length 0
  CHECK(needed == 0);

  // The same bytes as ballast::printable (the CLI's) on random strings,
  // weighted toward the bytes that are escaped.
  std::mt19937 rng(7);
  const std::string alphabet = "a\\\n\r\x1b\x7f\xc2\x9b\xe2\x80\xae\xf0\x9f\x98\x80\xff\xed\xa0\x80"s;
  for (int i = 0; i < 2000; ++i) {
    std::string text(rng() % 24, '\0');
    for (char& c : text) c = rng() % 4 == 0 ? static_cast<char>(rng() & 0xff) : alphabet[rng() % alphabet.size()];
    CHECK(c_printable(text) == ballast::printable(text));
  }

  // A buffer one byte short (no room for the NUL) is refused, nothing written.
  std::string out(12, '#');  // "ok\x0d" escapes to 6 bytes
  needed = 99;
  CAPI_FAILS(ballast_printable("ok\r", 3, out.data(), 6, &needed), BALLAST_E_OUT_OF_BOUNDS);
  CHECK(out == std::string(12, '#'));
  CHECK(needed == 99);
  CAPI_OK(ballast_printable("ok\r", 3, out.data(), 7, nullptr));  // `needed` may be NULL when writing
  CHECK(std::string(out.c_str()) == "ok\\x0d");

  // Bad arguments.
  CAPI_FAILS(ballast_printable(nullptr, 1, out.data(), out.size(), &needed), BALLAST_E_INVALID_ARGUMENT);
  CAPI_FAILS(ballast_printable("x", 1, nullptr, 4, &needed), BALLAST_E_INVALID_ARGUMENT);
  CAPI_FAILS(ballast_printable("x", 1, nullptr, 0, nullptr), BALLAST_E_INVALID_ARGUMENT);  // a query with no answer
  CAPI_FAILS(ballast_printable("x", 1, out.data(), 0, &needed), BALLAST_E_OUT_OF_BOUNDS);

  // A log sink may call it (ballast.h: it takes no lock and logs nothing),
  // as examples/c_engine's does: the sink runs under the log's own lock,
  // and the text it is handed is raw.
  struct Shown {
    int calls = 0;
    std::string text;
  } shown;
  CAPI_OK(ballast_set_log_sink(
      [](void* user, ballast_log_level, const char*, const char* text) {
        auto* s = static_cast<Shown*>(user);
        ++s->calls;
        char buffer[64];
        ballast_status* e = ballast_printable(text, std::strlen(text), buffer, sizeof buffer, nullptr);
        s->text = e == nullptr ? buffer : ballast_status_message(e);
        ballast_status_free(e);
      },
      &shown));
  ballast::log_message(ballast::LogLevel::warning, "capi test", "weight \x1b[2Jname\r");
  CAPI_OK(ballast_set_log_sink(nullptr, nullptr));
  CHECK(shown.calls == 1);
  CHECK(shown.text == "weight \\x1b[2Jname\\x0d");
}

TEST_CASE("version 8: a model's notes; a live residency's budget changed") {
  const auto* v7 = static_cast<const ballast_api_v7*>(ballast_get_api(7));
  const auto* v8 = static_cast<const ballast_api_v8*>(ballast_get_api(8));
  REQUIRE(v7 != nullptr);
  REQUIRE(v8 != nullptr);
  CHECK(static_cast<const void*>(v7) == static_cast<const void*>(&v8->v7));  // version 7's table is a prefix
  CHECK((v8->model_note_count == &ballast_model_note_count));
  CHECK((v8->model_note == &ballast_model_note));
  CHECK((v8->residency_set_budget == &ballast_residency_set_budget));
  CAPI_OK(ballast_check_version(8));

  SampleOnCpu sample("capi-v8");
  auto& [dir, m, o] = sample;
  // The sample has no notes; a model whose initializer is also a graph
  // input (IR version 8) has one, on that initializer.
  size_t notes = 7;
  CAPI_OK(ballast_model_note_count(o.model, &notes));
  CHECK(notes == 0);
  const char* tensor = nullptr;
  CAPI_FAILS(ballast_model_note(o.model, 0, &tensor, nullptr), BALLAST_E_OUT_OF_BOUNDS);
  {
    using ballast::testing::Proto;
    Proto w = ballast::testing::onnx_proto::tensor("W", 1, {2});
    ballast::testing::onnx_proto::raw_data(w, std::vector<std::uint8_t>(8, 0));  // two float32 zeros
    Proto g;
    g.str(2, "g").msg(5, w);
    Proto input;
    input.str(1, "W");
    g.msg(11, input);
    Proto opset;
    opset.str(1, "").varint(2, 17);
    Proto model;
    model.varint(1, 8).msg(8, opset).msg(7, g);
    const auto path = dir.path() / "input.onnx";
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(model.data.data()), static_cast<std::streamsize>(model.data.size()));
    ballast_model* noted = nullptr;
    CAPI_OK(ballast_model_open(path.c_str(), &noted));
    CAPI_OK(ballast_model_note_count(noted, &notes));
    REQUIRE(notes == 1);
    const char* message = nullptr;
    CAPI_OK(ballast_model_note(noted, 0, &tensor, &message));
    CHECK(std::string(tensor) == "W");
    CHECK(std::string(message).find("also a graph input") != std::string::npos);
    CAPI_OK(ballast_model_note(noted, 0, nullptr, nullptr));  // either output may be NULL
    CAPI_FAILS(ballast_model_note(noted, 1, &tensor, &message), BALLAST_E_OUT_OF_BOUNDS);
    CAPI_FAILS(ballast_model_note_count(noted, nullptr), BALLAST_E_INVALID_ARGUMENT);
    CAPI_OK(ballast_model_free(noted));
    CAPI_FAILS(ballast_model_note_count(noted, &notes), BALLAST_E_INVALID_HANDLE);
  }

  // Paged, transposes only: the auto budget holds everything; the minimum
  // is the transpose of w0 with w0 pinned while it is built.
  ballast_residency_options opt = BALLAST_INIT(ballast_residency_options);
  opt.strategy = BALLAST_PAGED;
  opt.kinds = 1u << 0;
  ballast_residency* res = nullptr;
  CAPI_OK(ballast_residency_create(o.backend, o.model, &opt, &res));
  ballast_plan* plan = nullptr;
  CAPI_OK(ballast_residency_plan(res, &plan));
  CAPI_OK(ballast_residency_derive_all(res, plan, nullptr, nullptr));
  ballast_residency_stats st = BALLAST_INIT(ballast_residency_stats);
  CAPI_OK(ballast_residency_stats_get(res, &st));
  const std::uint64_t minimum = 2 * OrphanedPrefixModel::kW0Bytes;
  REQUIRE(st.device_bytes > minimum);
  CAPI_FAILS(ballast_residency_set_budget(res, minimum - 1), BALLAST_E_INVALID_ARGUMENT);
  CAPI_OK(ballast_residency_stats_get(res, &st));
  CHECK(st.budget_bytes > minimum);  // unchanged
  CAPI_OK(ballast_residency_set_budget(res, minimum));
  CAPI_OK(ballast_residency_stats_get(res, &st));
  CHECK(st.budget_bytes == minimum);
  CHECK(st.device_bytes <= minimum);
  CHECK(st.source_evictions + st.derived_evictions > 0);
  CHECK(counters(o.backend).live_bytes == st.device_bytes);
  // Everything still pins, paged in again under the new budget.
  CAPI_OK(ballast_residency_derive_all(res, plan, nullptr, nullptr));
  CAPI_OK(ballast_residency_stats_get(res, &st));
  CHECK(st.device_bytes <= minimum);
  CAPI_OK(ballast_plan_free(plan));
  CAPI_OK(ballast_residency_free(res));
  CAPI_FAILS(ballast_residency_set_budget(res, minimum), BALLAST_E_INVALID_HANDLE);

  // Created with UINT64_MAX (unlimited, not 0's auto): a budget, which a
  // later call may bound.
  opt.budget_bytes = UINT64_MAX;
  CAPI_OK(ballast_residency_create(o.backend, o.model, &opt, &res));
  CAPI_OK(ballast_residency_plan(res, &plan));
  CAPI_OK(ballast_residency_derive_all(res, plan, nullptr, nullptr));
  CAPI_FAILS(ballast_residency_set_budget(res, minimum - 1), BALLAST_E_INVALID_ARGUMENT);
  CAPI_OK(ballast_residency_set_budget(res, minimum));
  CAPI_OK(ballast_residency_stats_get(res, &st));
  CHECK(st.budget_bytes == minimum);
  CHECK(st.device_bytes <= minimum);
  CAPI_OK(ballast_plan_free(plan));
  CAPI_OK(ballast_residency_free(res));
}
