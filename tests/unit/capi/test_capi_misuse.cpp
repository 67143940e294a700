// Bad use of the C API gets a status, never a crash: NULL handles, handles
// used after their free, freed twice, of the wrong kind, made up; a plan of
// another model; buffers and ranges that do not fit; bad enum values;
// structs without their size. Run under ASan+UBSan too (the asan preset):
// none of these may touch freed memory.
#include "capi_test.hpp"
#include "support/orphaned_prefix_model.hpp"
#include "unit/store/scratch_dir.hpp"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <thread>
#include <vector>

using ballast::test_models::OrphanedPrefixModel;
using ballast::testing::ScratchDir;

namespace {

// A model, the cpu backend, a residency, its plan and one pinned value.
struct World {
  ScratchDir dir{"capi-misuse"};
  OrphanedPrefixModel files = OrphanedPrefixModel::write(dir.path());
  ballast_model* model = nullptr;
  ballast_backend* backend = nullptr;
  ballast_plan* plan = nullptr;
  ballast_residency* res = nullptr;
  ballast_pin* pin = nullptr;

  World() {
    CAPI_OK(ballast_model_open(files.onnx.c_str(), &model));
    CAPI_OK(ballast_backend_open("cpu", &backend));
    CAPI_OK(ballast_plan_derivations(model, BALLAST_PLAN_AUTOMATIC, &plan));
    CAPI_OK(ballast_residency_create(backend, model, nullptr, &res));
    CAPI_OK(ballast_residency_pin_derivation(res, plan, 0, &pin));
  }
  ~World() {
    capi_test::take(ballast_pin_free(pin));
    capi_test::take(ballast_residency_free(res));
    capi_test::take(ballast_plan_free(plan));
    capi_test::take(ballast_backend_free(backend));
    capi_test::take(ballast_model_free(model));
  }
};

template <class T>
T* fake(uintptr_t v) {
  return reinterpret_cast<T*>(v);
}

}  // namespace

TEST_CASE("NULL handles and NULL outputs") {
  size_t n = 0;
  CAPI_FAILS(ballast_model_weight_count(nullptr, &n), BALLAST_E_INVALID_HANDLE);
  // The message tells a NULL handle from a dead or foreign one.
  const capi_test::Outcome null_model = capi_test::take(ballast_model_weight_count(nullptr, &n));
  CHECK(null_model.message == "invalid_handle: the model is NULL");
  int local = 0;
  const capi_test::Outcome made_up = capi_test::take(ballast_model_weight_count(reinterpret_cast<ballast_model*>(&local), &n));
  CHECK(made_up.message.find("not a live model handle") != std::string::npos);
  ballast_device_info d = BALLAST_INIT(ballast_device_info);
  CAPI_FAILS(ballast_backend_info(nullptr, &d), BALLAST_E_INVALID_HANDLE);
  CAPI_FAILS(ballast_plan_count(nullptr, &n), BALLAST_E_INVALID_HANDLE);
  CAPI_FAILS(ballast_residency_group_count(nullptr, &n), BALLAST_E_INVALID_HANDLE);
  CAPI_FAILS(ballast_pin_count(nullptr, &n), BALLAST_E_INVALID_HANDLE);
  CAPI_FAILS(ballast_residency_create(nullptr, nullptr, nullptr, nullptr), BALLAST_E_INVALID_ARGUMENT);
  ballast_residency* r = nullptr;
  CAPI_FAILS(ballast_residency_create(nullptr, nullptr, nullptr, &r), BALLAST_E_INVALID_HANDLE);
  CAPI_FAILS(ballast_model_open(nullptr, nullptr), BALLAST_E_INVALID_ARGUMENT);
  ballast_model* m = nullptr;
  CAPI_FAILS(ballast_model_open(nullptr, &m), BALLAST_E_INVALID_ARGUMENT);
  ballast_backend* b = nullptr;
  CAPI_FAILS(ballast_backend_open(nullptr, &b), BALLAST_E_INVALID_ARGUMENT);
  // Freeing NULL is a no-op, as free(NULL) is.
  CAPI_OK(ballast_model_free(nullptr));
  CAPI_OK(ballast_backend_free(nullptr));
  CAPI_OK(ballast_plan_free(nullptr));
  CAPI_OK(ballast_residency_free(nullptr));
  CAPI_OK(ballast_pin_free(nullptr));

  World w;
  CAPI_FAILS(ballast_model_weight_count(w.model, nullptr), BALLAST_E_INVALID_ARGUMENT);
  CAPI_FAILS(ballast_model_weight(w.model, 0, nullptr), BALLAST_E_INVALID_ARGUMENT);
  CAPI_FAILS(ballast_residency_pin_weight(w.res, nullptr, &w.pin), BALLAST_E_INVALID_ARGUMENT);
  CAPI_FAILS(ballast_residency_derive_all(w.res, nullptr, nullptr, nullptr), BALLAST_E_INVALID_HANDLE);
}

TEST_CASE("a handle used after its free, and freed twice") {
  World w;
  ballast_model* model2 = nullptr;
  CAPI_OK(ballast_model_open(w.files.onnx.c_str(), &model2));
  CAPI_OK(ballast_model_free(model2));
  size_t n = 0;
  CAPI_FAILS(ballast_model_weight_count(model2, &n), BALLAST_E_INVALID_HANDLE);
  CAPI_FAILS(ballast_model_free(model2), BALLAST_E_INVALID_HANDLE);
  // The slot is reused by the next model: the old value still refused, the new one works.
  ballast_model* model3 = nullptr;
  CAPI_OK(ballast_model_open(w.files.onnx.c_str(), &model3));
  CHECK(model3 != model2);
  CAPI_FAILS(ballast_model_weight_count(model2, &n), BALLAST_E_INVALID_HANDLE);
  CAPI_OK(ballast_model_weight_count(model3, &n));
  CHECK(n == 3);
  CAPI_OK(ballast_model_free(model3));

  ballast_pin* pin = nullptr;
  CAPI_OK(ballast_residency_pin_weight(w.res, "w0", &pin));
  CAPI_OK(ballast_pin_free(pin));
  float x = 0;
  CAPI_FAILS(ballast_pin_read(pin, 0, 0, 0, &x, sizeof x, sizeof x), BALLAST_E_INVALID_HANDLE);
  CAPI_FAILS(ballast_pin_free(pin), BALLAST_E_INVALID_HANDLE);

  ballast_plan* plan = nullptr;
  CAPI_OK(ballast_plan_derivations(w.model, BALLAST_PLAN_GRAPH, &plan));
  CAPI_OK(ballast_plan_free(plan));
  CAPI_FAILS(ballast_residency_pin_derivation(w.res, plan, 0, &pin), BALLAST_E_INVALID_HANDLE);
  CAPI_FAILS(ballast_plan_free(plan), BALLAST_E_INVALID_HANDLE);

  ballast_backend* b = nullptr;
  CAPI_OK(ballast_backend_open("cpu", &b));
  CAPI_OK(ballast_backend_free(b));
  CAPI_FAILS(ballast_residency_create(b, w.model, nullptr, &w.res), BALLAST_E_INVALID_HANDLE);
  CAPI_FAILS(ballast_backend_free(b), BALLAST_E_INVALID_HANDLE);
}

TEST_CASE("a handle of another kind, and made-up handle values") {
  World w;
  size_t n = 0;
  // A model handle where a backend, plan, residency or pin is wanted, and back.
  ballast_device_info d = BALLAST_INIT(ballast_device_info);
  CAPI_FAILS(ballast_backend_info(reinterpret_cast<ballast_backend*>(w.model), &d), BALLAST_E_INVALID_HANDLE);
  CAPI_FAILS(ballast_plan_count(reinterpret_cast<ballast_plan*>(w.res), &n), BALLAST_E_INVALID_HANDLE);
  CAPI_FAILS(ballast_model_weight_count(reinterpret_cast<ballast_model*>(w.pin), &n), BALLAST_E_INVALID_HANDLE);
  CAPI_FAILS(ballast_model_free(reinterpret_cast<ballast_model*>(w.backend)), BALLAST_E_INVALID_HANDLE);
  CAPI_FAILS(ballast_pin_free(reinterpret_cast<ballast_pin*>(w.res)), BALLAST_E_INVALID_HANDLE);
  // ...and each still works afterwards (nothing was freed by the wrong-kind free).
  CAPI_OK(ballast_backend_info(w.backend, &d));
  CAPI_OK(ballast_pin_count(w.pin, &n));
  // Values no table handed out: a real pointer, small numbers, all ones.
  int local = 0;
  CAPI_FAILS(ballast_model_weight_count(reinterpret_cast<ballast_model*>(&local), &n), BALLAST_E_INVALID_HANDLE);
  CAPI_FAILS(ballast_model_weight_count(fake<ballast_model>(1), &n), BALLAST_E_INVALID_HANDLE);
  CAPI_FAILS(ballast_model_weight_count(fake<ballast_model>(0xA1), &n), BALLAST_E_INVALID_HANDLE);
  CAPI_FAILS(ballast_model_weight_count(fake<ballast_model>(~uintptr_t{0}), &n), BALLAST_E_INVALID_HANDLE);
  CAPI_FAILS(ballast_pin_free(fake<ballast_pin>(0xFFFFFF00A5u)), BALLAST_E_INVALID_HANDLE);
  // One slot past the table: retains until the table has no free slot
  // left (each new handle then takes a slot past every earlier one), then
  // the handle a next slot would have (generation 1, as a fresh slot's).
  std::vector<ballast_model*> held;
  std::uintptr_t highest = 0;
  for (int i = 0; i < 4096; ++i) {
    ballast_model* r = nullptr;
    CAPI_OK(ballast_model_retain(w.model, &r));
    held.push_back(r);
    highest = std::max<std::uintptr_t>(highest, (reinterpret_cast<std::uintptr_t>(r) >> 8) & 0xFFFFFFu);
  }
  const std::uintptr_t past = (std::uintptr_t{1} << 32) | ((highest + 1) << 8) | 0xA1u;
  CAPI_FAILS(ballast_model_weight_count(fake<ballast_model>(past), &n), BALLAST_E_INVALID_HANDLE);
  for (ballast_model* r : held) CAPI_OK(ballast_model_free(r));
}

TEST_CASE("a plan of another model") {
  World w;
  World other;
  ballast_pin* pin = nullptr;
  CAPI_FAILS(ballast_residency_pin_derivation(w.res, other.plan, 0, &pin), BALLAST_E_INVALID_ARGUMENT);
  CHECK(pin == nullptr);
  CAPI_FAILS(ballast_residency_prefetch(w.res, other.plan, 0), BALLAST_E_INVALID_ARGUMENT);
  CAPI_FAILS(ballast_residency_derive_all(w.res, other.plan, nullptr, nullptr), BALLAST_E_INVALID_ARGUMENT);
  ballast_residency_options opt = BALLAST_INIT(ballast_residency_options);
  opt.plan = other.plan;
  ballast_residency* r = nullptr;
  CAPI_FAILS(ballast_residency_create(w.backend, w.model, &opt, &r), BALLAST_E_INVALID_ARGUMENT);
  CHECK(r == nullptr);
  // The same plan with its own model is fine.
  CAPI_OK(ballast_residency_pin_derivation(other.res, other.plan, 0, &pin));
  CAPI_OK(ballast_pin_free(pin));
}

TEST_CASE("lengths and ranges that do not fit") {
  World w;
  std::vector<unsigned char> buf(16);
  // The length exceeds the buffer.
  CAPI_FAILS(ballast_model_read_weight(w.model, 0, 0, buf.data(), buf.size(), 17), BALLAST_E_OUT_OF_BOUNDS);
  CAPI_FAILS(ballast_pin_read(w.pin, 0, 0, 0, buf.data(), buf.size(), 17), BALLAST_E_OUT_OF_BOUNDS);
  // NULL destination with a length.
  CAPI_FAILS(ballast_model_read_weight(w.model, 0, 0, nullptr, 16, 16), BALLAST_E_INVALID_ARGUMENT);
  CAPI_FAILS(ballast_pin_read(w.pin, 0, 0, 0, nullptr, 16, 16), BALLAST_E_INVALID_ARGUMENT);
  // The range leaves the weight or value (and an offset that would overflow).
  CAPI_FAILS(ballast_model_read_weight(w.model, 1, OrphanedPrefixModel::kW1Bytes - 8, buf.data(), buf.size(), 16),
             BALLAST_E_OUT_OF_BOUNDS);
  ballast_value v = BALLAST_INIT(ballast_value);
  CAPI_OK(ballast_pin_value(w.pin, 0, &v));
  CAPI_FAILS(ballast_pin_read(w.pin, 0, 0, v.first_bytes - 8, buf.data(), buf.size(), 16), BALLAST_E_OUT_OF_BOUNDS);
  CAPI_FAILS(ballast_pin_read(w.pin, 0, 0, ~uint64_t{0}, buf.data(), buf.size(), 16), BALLAST_E_OUT_OF_BOUNDS);
  CAPI_FAILS(ballast_pin_read(w.pin, 0, 1, 0, buf.data(), buf.size(), 16), BALLAST_E_OUT_OF_BOUNDS);  // no second half
  CAPI_FAILS(ballast_pin_read(w.pin, 0, 2, 0, buf.data(), buf.size(), 16), BALLAST_E_INVALID_ARGUMENT);
  CAPI_FAILS(ballast_pin_read(w.pin, 1, 0, 0, buf.data(), buf.size(), 16), BALLAST_E_OUT_OF_BOUNDS);
  // Indexes past the end.
  ballast_weight_info wi = BALLAST_INIT(ballast_weight_info);
  CAPI_FAILS(ballast_model_weight(w.model, 3, &wi), BALLAST_E_OUT_OF_BOUNDS);
  ballast_derivation_info di = BALLAST_INIT(ballast_derivation_info);
  CAPI_FAILS(ballast_plan_entry(w.plan, 1000, &di), BALLAST_E_OUT_OF_BOUNDS);
  ballast_pin* p = nullptr;
  CAPI_FAILS(ballast_residency_pin_derivation(w.res, w.plan, 1000, &p), BALLAST_E_OUT_OF_BOUNDS);
  // What does fit still reads.
  CAPI_OK(ballast_pin_read(w.pin, 0, 0, v.first_bytes - 16, buf.data(), buf.size(), 16));
}

TEST_CASE("a read past a weight or a pinned value names what it missed") {
  World w;
  std::vector<unsigned char> buf(16);
  ballast_weight_info wi = BALLAST_INIT(ballast_weight_info);
  CAPI_OK(ballast_model_weight(w.model, 1, &wi));
  capi_test::Outcome o =
      capi_test::take(ballast_model_read_weight(w.model, 1, wi.bytes - 8, buf.data(), buf.size(), 16));
  CHECK(o.code == BALLAST_E_OUT_OF_BOUNDS);
  INFO(o.message);  // the store's error knows the file; the C API adds which weight
  CHECK(o.message.find("tensor=" + std::string(wi.name)) != std::string::npos);
  CHECK(o.message.find(std::string("file=") + wi.file) != std::string::npos);

  ballast_derivation_info di = BALLAST_INIT(ballast_derivation_info);
  CAPI_OK(ballast_plan_entry(w.plan, 0, &di));
  ballast_value v = BALLAST_INIT(ballast_value);
  CAPI_OK(ballast_pin_value(w.pin, 0, &v));
  o = capi_test::take(ballast_pin_read(w.pin, 0, 0, v.first_bytes - 8, buf.data(), buf.size(), 16));
  CHECK(o.code == BALLAST_E_OUT_OF_BOUNDS);
  INFO(o.message);
  CHECK(o.message.find(std::string(di.kind) + " of '" + di.weight + "'") != std::string::npos);
  CHECK(o.message.find("first half") != std::string::npos);

  ballast_pin* pw = nullptr;
  CAPI_OK(ballast_residency_pin_weight(w.res, wi.name, &pw));
  o = capi_test::take(ballast_pin_read(pw, 0, 1, 0, buf.data(), buf.size(), 16));  // a weight has no second half
  CHECK(o.code == BALLAST_E_OUT_OF_BOUNDS);
  INFO(o.message);
  CHECK(o.message.find("second half of weight '" + std::string(wi.name) + "'") != std::string::npos);
  CAPI_OK(ballast_pin_free(pw));
}

TEST_CASE("bad enum values, structs without their size, a released residency") {
  World w;
  ballast_override bad_override[] = {{"w0", -1}};
  ballast_plan* plan = nullptr;
  CAPI_FAILS(ballast_plan_derivations(w.model, 9, &plan), BALLAST_E_INVALID_ARGUMENT);
  // The enum's own ends: each of its values plans, one past either end does not.
  CAPI_FAILS(ballast_plan_derivations(w.model, BALLAST_PLAN_AUTOMATIC - 1, &plan), BALLAST_E_INVALID_ARGUMENT);
  CAPI_FAILS(ballast_plan_derivations(w.model, BALLAST_PLAN_GRAPH_AND_RULES + 1, &plan), BALLAST_E_INVALID_ARGUMENT);
  for (int32_t source :
       {BALLAST_PLAN_AUTOMATIC, BALLAST_PLAN_GRAPH, BALLAST_PLAN_RULES, BALLAST_PLAN_GRAPH_AND_RULES}) {
    CAPTURE(source);
    ballast_plan* each = nullptr;
    CAPI_OK(ballast_plan_derivations(w.model, source, &each));
    CAPI_OK(ballast_plan_free(each));
  }
  ballast_residency_options opt = BALLAST_INIT(ballast_residency_options);
  opt.strategy = 7;
  ballast_residency* r = nullptr;
  CAPI_FAILS(ballast_residency_create(w.backend, w.model, &opt, &r), BALLAST_E_INVALID_ARGUMENT);
  ballast_residency_options unsized{};
  CAPI_FAILS(ballast_residency_create(w.backend, w.model, &unsized, &r), BALLAST_E_INVALID_ARGUMENT);
  // A size that cuts a field (no version of the struct has it): the
  // budget's first 4 bytes alone would read 2^32 as 0, "auto".
  ballast_residency_options cut = BALLAST_INIT(ballast_residency_options);
  cut.strategy = BALLAST_PAGED;
  cut.budget_bytes = 1ull << 32;
  cut.size = offsetof(ballast_residency_options, budget_bytes) + 4;
  CAPI_FAILS(ballast_residency_create(w.backend, w.model, &cut, &r), BALLAST_E_INVALID_ARGUMENT);
  ballast_load_options cut_load = BALLAST_INIT(ballast_load_options);
  cut_load.size = sizeof(std::size_t) + 4;
  CAPI_FAILS(ballast_residency_load(nullptr, &cut_load, nullptr), BALLAST_E_INVALID_ARGUMENT);
  // An older caller's struct ends where a field of ours begins (its
  // version's sizeof): accepted, and what lies past its size is not read.
  // A count of overrides with no array would be refused.
  ballast_residency_options older = BALLAST_INIT(ballast_residency_options);
  older.strategy = BALLAST_UPLOAD;
  older.override_count = 2;
  older.size = offsetof(ballast_residency_options, overrides);
  REQUIRE(older.size % alignof(ballast_residency_options) == 0);
  ballast_residency* older_res = nullptr;
  CAPI_OK(ballast_residency_create(w.backend, w.model, &older, &older_res));
  CAPI_OK(ballast_residency_free(older_res));
  ballast_weight_info wi{};
  CAPI_FAILS(ballast_model_weight(w.model, 0, &wi), BALLAST_E_INVALID_ARGUMENT);
  opt = BALLAST_INIT(ballast_residency_options);
  opt.overrides = bad_override;
  opt.override_count = 1;
  capi_test::Outcome bad = capi_test::take(ballast_residency_create(w.backend, w.model, &opt, &r));
  CHECK(bad.code == BALLAST_E_INVALID_ARGUMENT);  // which override, which weight, what value
  CHECK_MESSAGE(bad.message == "invalid_argument: overrides[0] for 'w0': strategy -1 is none of ballast_strategy",
                bad.message);
  ballast_override unknown[] = {{"w0", BALLAST_UPLOAD}, {"no such", BALLAST_UPLOAD}};
  opt.overrides = unknown;
  opt.override_count = 2;
  bad = capi_test::take(ballast_residency_create(w.backend, w.model, &opt, &r));
  CHECK(bad.code == BALLAST_E_NOT_FOUND);
  CHECK_MESSAGE(bad.message == "not_found: overrides[1] names 'no such', which is not a weight of the model",
                bad.message);
  opt.overrides = nullptr;
  opt.override_count = 2;
  CAPI_FAILS(ballast_residency_create(w.backend, w.model, &opt, &r), BALLAST_E_INVALID_ARGUMENT);

  // Released with a pin still held: the status says so, the pin no longer reads.
  ballast_teardown td = BALLAST_INIT(ballast_teardown);
  CAPI_FAILS(ballast_residency_release(w.res, &td), BALLAST_E_INVALID_ARGUMENT);
  CHECK(td.bytes_freed > 0);
  float x = 0;
  CAPI_FAILS(ballast_pin_read(w.pin, 0, 0, 0, &x, sizeof x, sizeof x), BALLAST_E_INVALID_ARGUMENT);
  CAPI_FAILS(ballast_pin_read(w.pin, 0, 0, 0, &x, sizeof x, 0), BALLAST_E_INVALID_ARGUMENT);  // nor an empty read
  // Nor does it hand out its (freed) device addresses.
  ballast_value v = BALLAST_INIT(ballast_value);
  CAPI_FAILS(ballast_pin_value(w.pin, 0, &v), BALLAST_E_INVALID_ARGUMENT);
  CHECK(v.first == 0);
  ballast_pin* p = nullptr;
  CAPI_FAILS(ballast_residency_pin_weight(w.res, "w0", &p), BALLAST_E_INVALID_ARGUMENT);
  ballast_residency_stats st = BALLAST_INIT(ballast_residency_stats);
  CAPI_OK(ballast_residency_stats_get(w.res, &st));
  CHECK(st.device_bytes == 0);
  ballast_device_counters c = BALLAST_INIT(ballast_device_counters);
  CAPI_OK(ballast_backend_counters(w.backend, &c));
  CHECK(c.live_allocations == 0);
}

TEST_CASE("free in any order: dependents keep what they were made from") {
  World w;
  // The model and backend handles go first; the residency and pin still work.
  CAPI_OK(ballast_model_free(w.model));
  CAPI_OK(ballast_backend_free(w.backend));
  float x = 0;
  CAPI_OK(ballast_pin_read(w.pin, 0, 0, 0, &x, sizeof x, sizeof x));
  ballast_pin* p = nullptr;
  CAPI_OK(ballast_residency_pin_weight(w.res, "w2", &p));
  // The residency handle goes while pins live: they still read.
  CAPI_OK(ballast_residency_free(w.res));
  CAPI_OK(ballast_pin_read(p, 0, 0, 0, &x, sizeof x, sizeof x));
  CAPI_FAILS(ballast_residency_pin_weight(w.res, "w0", &p), BALLAST_E_INVALID_HANDLE);
  CAPI_OK(ballast_pin_free(p));
  // The World's destructor frees the rest; the stale ones answer INVALID_HANDLE.
}

TEST_CASE("threads: pins, reads and frees on one residency at once") {
  World w;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        ballast_pin* p = nullptr;
        ballast_status* s = (t % 2) ? ballast_residency_pin_weight(w.res, "w0", &p)
                                    : ballast_residency_pin_derivation(w.res, w.plan, static_cast<size_t>(i % 5), &p);
        if (s != nullptr) {
          ++failures;
          ballast_status_free(s);
          continue;
        }
        unsigned char b[8];
        if (ballast_status* r = ballast_pin_read(p, 0, 0, 0, b, sizeof b, sizeof b)) {
          ++failures;
          ballast_status_free(r);
        }
        ballast_status_free(ballast_pin_free(p));
        // A double free from a racing thread's view: always refused.
        if (ballast_status* again = ballast_pin_free(p)) ballast_status_free(again);
        else ++failures;
      }
    });
  for (auto& t : threads) t.join();
  CHECK(failures == 0);
}

TEST_CASE("version 2's calls: NULL, freed and wrong-kind handles, NULL outputs, a retained model freed twice") {
  const void* data = nullptr;
  ballast_model* second = nullptr;
  ballast_value_layout lay = BALLAST_INIT(ballast_value_layout);
  CAPI_FAILS(ballast_model_weight_data(nullptr, 0, &data), BALLAST_E_INVALID_HANDLE);
  CAPI_FAILS(ballast_model_retain(nullptr, &second), BALLAST_E_INVALID_HANDLE);
  CAPI_FAILS(ballast_plan_entry_layout(nullptr, 0, 0, &lay), BALLAST_E_INVALID_HANDLE);

  World w;
  CAPI_FAILS(ballast_model_retain(w.model, nullptr), BALLAST_E_INVALID_ARGUMENT);
  // Wrong kinds: a plan where a model is wanted, and the reverse.
  CAPI_FAILS(ballast_model_weight_data(reinterpret_cast<const ballast_model*>(w.plan), 0, &data),
             BALLAST_E_INVALID_HANDLE);
  CAPI_FAILS(ballast_model_retain(reinterpret_cast<const ballast_model*>(w.res), &second), BALLAST_E_INVALID_HANDLE);
  CAPI_FAILS(ballast_plan_entry_layout(reinterpret_cast<const ballast_plan*>(w.model), 0, 0, &lay),
             BALLAST_E_INVALID_HANDLE);
  ballast_value_layout unsized{};
  CAPI_FAILS(ballast_plan_entry_layout(w.plan, 0, 0, &unsized), BALLAST_E_INVALID_ARGUMENT);
  CAPI_FAILS(ballast_plan_entry_layout(w.plan, 0, -1, &lay), BALLAST_E_INVALID_ARGUMENT);

  // A retained handle is a handle: freed once, then refused, the first untouched.
  CAPI_OK(ballast_model_retain(w.model, &second));
  CAPI_OK(ballast_model_free(second));
  CAPI_FAILS(ballast_model_free(second), BALLAST_E_INVALID_HANDLE);
  CAPI_FAILS(ballast_model_weight_data(second, 0, &data), BALLAST_E_INVALID_HANDLE);
  CAPI_OK(ballast_model_weight_data(w.model, 0, &data));
  CHECK(data != nullptr);

  // A freed plan's layout.
  ballast_plan* plan = nullptr;
  CAPI_OK(ballast_plan_derivations(w.model, BALLAST_PLAN_AUTOMATIC, &plan));
  CAPI_OK(ballast_plan_entry_layout(plan, 0, 0, &lay));
  CAPI_OK(ballast_plan_free(plan));
  CAPI_FAILS(ballast_plan_entry_layout(plan, 0, 0, &lay), BALLAST_E_INVALID_HANDLE);
}
