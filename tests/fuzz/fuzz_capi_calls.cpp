// libFuzzer target: any bytes as a sequence of C API calls (ballast.h) on a
// few handles of each kind, made as a careless engine makes them: frees in
// any order, handles used after their free or passed as another kind,
// made-up handle values, bad enum values and struct sizes, reads past the
// ends, loads with any knobs, residencies released under live pins. The C
// API promises a status for every misuse, never a crash (docs/c_api.md);
// this checks that, and that what it returns is right:
//   - every status has a known code and a message;
//   - a freed handle, or a handle passed as another kind, is INVALID_HANDLE
//     on every call; a live one frees with ok, once;
//   - a weight read through the model, through its mapping, or pinned on
//     the device and read back, equals the file's bytes;
//   - a derived value read back is the same bytes under every residency,
//     strategy and budget (entry i of one plan source is one derivation);
//   - once every pin is freed and every residency released, each backend
//     is back to no live allocation and no registration.
//
// The models are the harness's own, written once: a safetensors file with
// Hugging Face names (float32, float16, bfloat16; two layers) and a GGUF
// file with llama names (Q4_0, Q8_0, float32), so the built-in rules plan
// derivations of several kinds. Input, read through FuzzedDataProvider:
// the start (which model, which strategy: a model, a CPU backend, a plan
// and a residency open), then (op, arguments) until the input runs out or
// 64 calls are made.
#include <ballast/ballast.h>

#include "unit/gguf/writer.hpp"
#include "unit/safetensors/writer.hpp"

#include <fuzzer/FuzzedDataProvider.h>
#include <unistd.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <span>
#include <string>
#include <tuple>
#include <vector>

namespace {

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz_capi_calls: %s\n", what.c_str());
  std::abort();
}

void require(bool ok, const std::string& what) {
  if (!ok) fail(what);
}

// ---------------------------------------------------------------- the models

struct ModelFile {
  std::string path;
  std::vector<std::uint8_t> bytes;
};

std::vector<std::uint8_t> pattern(std::size_t n, unsigned seed) {
  std::vector<std::uint8_t> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<std::uint8_t>((i * 37 + seed * 11) % 251);
  return out;
}

// Written beside and renamed into place: another process of this target
// (libFuzzer's -jobs) may have the file mapped, and a rename leaves its
// mapping on the old bytes where a truncation would pull them away.
ModelFile write_model(const std::filesystem::path& path, std::vector<std::uint8_t> bytes) {
  const std::filesystem::path temp = path.string() + "." + std::to_string(::getpid()) + ".tmp";
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    require(out.good(), "cannot write " + temp.string());
  }
  std::filesystem::rename(temp, path);
  return {path.string(), std::move(bytes)};
}

// [0] safetensors, [1] GGUF; [2] a path that is no model, [3] one that does not exist.
const std::vector<ModelFile>& models() {
  static const std::vector<ModelFile> files = [] {
    const std::filesystem::path dir = std::filesystem::path(BALLAST_FUZZ_DATA_DIR) / "capi_calls";
    std::filesystem::create_directories(dir);
    using namespace ballast::testing;
    const std::vector<StTensor> st = {
        {"model.embed_tokens.weight", "F32", {4, 8}, pattern(128, 1)},
        {"model.layers.0.self_attn.q_proj.weight", "F32", {8, 16}, pattern(512, 2)},
        {"model.layers.0.mlp.down_proj.weight", "BF16", {16, 8}, pattern(256, 3)},
        {"model.layers.1.self_attn.q_proj.weight", "F16", {8, 16}, pattern(256, 4)},
        {"model.layers.1.mlp.up_proj.weight", "F32", {16, 8}, pattern(512, 5)},
    };
    std::vector<ModelFile> out;
    out.push_back(write_model(dir / "model.safetensors", st_file_raw(st_header_json(st), st_buffer(st))));
    // Q4_0 [32, 4]: 4 blocks of 18 bytes at 0; float32 [8, 4] at 96; Q8_0 [32, 2]: 2 blocks of 34 at 224.
    out.push_back(write_model(dir / "model.gguf", gguf_file({kv_str("general.architecture", "llama")},
                                                            {tinfo("blk.0.attn_q.weight", {32, 4}, kQ4_0, 0),
                                                             tinfo("blk.0.ffn_down.weight", {8, 4}, kF32, 96),
                                                             tinfo("token_embd.weight", {32, 2}, kQ8_0, 224)},
                                                            292)));
    out.push_back(write_model(dir / "not_a_model.bin", {'n', 'o', 'p', 'e'}));
    out.push_back({(dir / "missing.safetensors").string(), {}});
    return out;
  }();
  return files;
}

// ------------------------------------------------------------- the statuses

// The status's code (ok for NULL), after checking it is one the header
// lists and carries a message; frees it.
ballast_code code_of(ballast_status* s, const char* call) {
  if (s == nullptr) return BALLAST_OK;
  const ballast_code code = ballast_status_code(s);
  const char* message = ballast_status_message(s);
  require((code >= BALLAST_E_INVALID_ARGUMENT && code <= BALLAST_E_INTERNAL) || code == BALLAST_E_INVALID_HANDLE,
          std::string(call) + ": a status of unknown code " + std::to_string(static_cast<int>(code)));
  require(message != nullptr && message[0] != '\0', std::string(call) + ": a status without a message");
  require(code != BALLAST_E_INTERNAL, std::string(call) + ": internal: " + message);
  ballast_status_free(s);
  return code;
}

#define CALL(expr) code_of((expr), #expr)

// Every kind's bit in ballast_residency_options.kinds.
std::uint32_t kind_mask() {
  static const std::uint32_t mask = [] {
    std::uint32_t m = 0;
    for (std::uint32_t k = 0; k < 32 && ballast_derivation_kind_name(k) != nullptr; ++k) m |= 1u << k;
    return m;
  }();
  return mask;
}

// --------------------------------------------------------------- the handles

// A slot remembers its last handle after the free, to use it again.
template <class H>
struct Slot {
  H* handle = nullptr;
  bool live = false;
};

struct PlanSlot : Slot<ballast_plan> {
  std::size_t model_file = 0;  // which file its model opened
  std::int32_t source = 0;     // -1: a residency's plan (not plan_derivations')
};
struct ModelSlot : Slot<ballast_model> {
  std::size_t file = 0;
};
struct ResidencySlot : Slot<ballast_residency> {
  std::size_t model_file = 0;
  std::size_t backend = 0;
  std::uint64_t highest_budget = 0;  // of every budget it has had (set_budget may lower it under its peak)
};
struct PinSlot : Slot<ballast_pin> {
  std::size_t residency = 0;
};

struct World {
  std::array<ModelSlot, 2> models;
  std::array<Slot<ballast_backend>, 2> backends;
  std::array<PlanSlot, 2> plans;
  std::array<ResidencySlot, 2> residencies;
  std::array<PinSlot, 4> pins;
  // (model file, plan source, entry, half) -> the bytes the first read gave
  std::map<std::tuple<std::size_t, std::int32_t, std::size_t, int>, std::vector<std::uint8_t>> derived;
};

// A model's weight `index` as the file stores it, through the C API's
// description (file, offset, bytes) and the harness's copy of the file.
std::vector<std::uint8_t> stored_bytes(std::size_t file, const ballast_weight_info& w) {
  const ModelFile& m = models()[file];
  require(w.file != nullptr && std::string(w.file) == m.path, "a weight's file is not its model's");
  require(w.offset <= m.bytes.size() && w.bytes <= m.bytes.size() - w.offset, "a weight past its file");
  return {m.bytes.begin() + static_cast<std::ptrdiff_t>(w.offset),
          m.bytes.begin() + static_cast<std::ptrdiff_t>(w.offset + w.bytes)};
}

// Reads one half of a pin's member whole, when it is small; empty otherwise.
std::vector<std::uint8_t> read_half(ballast_pin* pin, std::size_t member, int half, std::uint64_t bytes) {
  if (bytes == 0 || bytes > (std::uint64_t{1} << 20)) return {};
  std::vector<std::uint8_t> out(bytes);
  require(CALL(ballast_pin_read(pin, member, half, 0, out.data(), out.size(), bytes)) == BALLAST_OK,
          "a pinned value's whole read failed");
  return out;
}

// --------------------------------------------------------------- the calls

class Run {
 public:
  explicit Run(FuzzedDataProvider& in) : in_(in) {}

  // Where an engine starts: a model of either file, a CPU backend, a plan
  // and a residency of the input's strategy, so the calls after it reach
  // live objects (the calls themselves free and remake them).
  void start() {
    const std::size_t file = in_.ConsumeIntegralInRange<std::size_t>(0, 1);
    ballast_model* model = nullptr;
    require(CALL(ballast_model_open(models()[file].path.c_str(), &model)) == BALLAST_OK, "model_open");
    w_.models[0] = ModelSlot{{model, true}, file};
    ballast_backend* backend = nullptr;
    require(CALL(ballast_backend_open("cpu", &backend)) == BALLAST_OK, "backend_open(cpu)");
    w_.backends[0] = {backend, true};
    ballast_plan* plan = nullptr;
    require(CALL(ballast_plan_derivations(model, BALLAST_PLAN_AUTOMATIC, &plan)) == BALLAST_OK, "plan_derivations");
    w_.plans[0] = PlanSlot{{plan, true}, file, BALLAST_PLAN_AUTOMATIC};
    ballast_residency_options o = BALLAST_INIT(ballast_residency_options);
    o.strategy = in_.ConsumeIntegralInRange<std::int32_t>(0, 2);
    o.group_by_layer = file == 1 ? "blk." : "model.layers.";
    ballast_residency* residency = nullptr;
    require(CALL(ballast_residency_create(backend, model, &o, &residency)) == BALLAST_OK, "residency_create");
    w_.residencies[0] = ResidencySlot{{residency, true}, file, 0};
  }

  void step() {
    switch (in_.ConsumeIntegralInRange<int>(0, 23)) {
      case 0: open_model(); break;
      case 1: free_model(); break;
      case 2: read_weight(); break;
      case 3: open_backend(); break;
      case 4: free_backend(); break;
      case 5: plan(); break;
      case 6: free_plan(); break;
      case 7: create_residency(); break;
      case 8: release_residency(); break;
      case 9: free_residency(); break;
      case 10: pin_derivation(); break;
      case 11: pin_weight(); break;
      case 12: pin_group(); break;
      case 13: free_pin(); break;
      case 14: read_pin(); break;
      case 15: prefetch(); break;
      case 16: derive_all(); break;
      case 17: load(); break;
      case 18: stats(); break;
      case 19: wrong_kind(); break;
      case 20: made_up(); break;
      case 22: set_budget(); break;
      case 23: notes(); break;
      default: freed_handles(); break;
    }
  }

  // Frees what is live, in an order the input does not choose, and checks
  // each backend is back to nothing held.
  void finish() {
    for (auto& p : w_.pins)
      if (p.live) expect_free(CALL(ballast_pin_free(p.handle)), p, "pin_free");
    for (auto& r : w_.residencies) {
      if (!r.live) continue;
      ballast_teardown td = BALLAST_INIT(ballast_teardown);
      require(CALL(ballast_residency_release(r.handle, &td)) == BALLAST_OK, "release with no pin failed");
      require(td.failed_frees == 0, "release: failed frees on the cpu backend");
      expect_free(CALL(ballast_residency_free(r.handle)), r, "residency_free");
    }
    for (auto& b : w_.backends) {
      if (!b.live) continue;
      ballast_device_counters c = BALLAST_INIT(ballast_device_counters);
      require(CALL(ballast_backend_counters(b.handle, &c)) == BALLAST_OK, "backend_counters failed");
      require(c.live_allocations == 0 && c.live_bytes == 0 && c.live_registrations == 0,
              "a backend still holds allocations or registrations after every residency's release");
    }
    for (auto& p : w_.plans)
      if (p.live) expect_free(CALL(ballast_plan_free(p.handle)), p, "plan_free");
    for (auto& m : w_.models)
      if (m.live) expect_free(CALL(ballast_model_free(m.handle)), m, "model_free");
    for (auto& b : w_.backends)
      if (b.live) expect_free(CALL(ballast_backend_free(b.handle)), b, "backend_free");
  }

 private:
  // One time in eight: the input's choice of anything (a bad enum value,
  // a struct size, a handle freed or never made).
  bool rarely() { return in_.ConsumeIntegralInRange<int>(0, 7) == 0; }

  // A slot: the input's, moved on to the next live one unless rarely()
  // (so most calls reach a live object, and some a freed or empty slot).
  template <class S>
  S& pick(std::span<S> slots) {
    const auto start = in_.ConsumeIntegralInRange<std::size_t>(0, slots.size() - 1);
    if (rarely()) return slots[start];
    for (std::size_t k = 0; k < slots.size(); ++k)
      if (slots[(start + k) % slots.size()].live) return slots[(start + k) % slots.size()];
    return slots[start];
  }
  template <class S, std::size_t N>
  S& pick(std::array<S, N>& slots) {
    return pick(std::span<S>(slots));
  }

  // A free's result: ok for a live handle (then no longer live), INVALID_HANDLE for a freed one.
  template <class S>
  void expect_free(ballast_code code, S& slot, const char* what) {
    if (slot.handle == nullptr) {
      require(code == BALLAST_OK, std::string(what) + "(NULL) is a no-op");
      return;
    }
    require(code == (slot.live ? BALLAST_OK : BALLAST_E_INVALID_HANDLE),
            std::string(what) + ": " + std::to_string(code) + (slot.live ? " for a live handle" : " for a freed one"));
    slot.live = false;
  }

  // Replaces a slot's handle: a live one is freed first (an engine that
  // loses a handle leaks; the harness does not, so the end can check).
  template <class S, class Free>
  void make_room(S& slot, Free free_fn) {
    if (slot.live) expect_free(CALL(free_fn(slot.handle)), slot, "free");
  }

  void open_model() {
    ModelSlot& slot = pick(w_.models);
    make_room(slot, ballast_model_free);
    const std::size_t file = in_.ConsumeIntegralInRange<std::size_t>(0, models().size() - 1);
    const bool retain = in_.ConsumeBool();
    ModelSlot& other = pick(w_.models);
    ballast_model* out = nullptr;
    ballast_code code;
    if (retain && &other != &slot) {
      code = CALL(ballast_model_retain(other.handle, &out));
      require(code == (other.live ? BALLAST_OK : BALLAST_E_INVALID_HANDLE), "model_retain's result");
      if (code == BALLAST_OK) slot.file = other.file;
    } else {
      code = CALL(ballast_model_open(models()[file].path.c_str(), &out));
      require((code == BALLAST_OK) == (file < 2), "model_open of " + models()[file].path + ": " + std::to_string(code));
      slot.file = file;
    }
    if (code == BALLAST_OK) slot = ModelSlot{{out, true}, slot.file};
  }

  void free_model() {
    ModelSlot& slot = pick(w_.models);
    expect_free(CALL(ballast_model_free(slot.handle)), slot, "model_free");
  }

  void read_weight() {
    ModelSlot& m = pick(w_.models);
    const auto index = in_.ConsumeIntegralInRange<std::size_t>(0, 6);
    ballast_weight_info w = BALLAST_INIT(ballast_weight_info);
    const ballast_code code = CALL(ballast_model_weight(m.handle, index, &w));
    if (!m.live) {
      require(code != BALLAST_OK, "model_weight on a freed model succeeded");
      return;
    }
    if (code != BALLAST_OK) {
      require(code == BALLAST_E_OUT_OF_BOUNDS, "model_weight: " + std::to_string(code));
      return;
    }
    const std::vector<std::uint8_t> stored = stored_bytes(m.file, w);
    std::size_t found = 99;
    require(CALL(ballast_model_find_weight(m.handle, w.name, &found)) == BALLAST_OK && found == index,
            "find_weight does not find a weight by its own name");
    const auto offset = in_.ConsumeIntegralInRange<std::uint64_t>(0, w.bytes + 2);
    const auto length = in_.ConsumeIntegralInRange<std::uint64_t>(0, w.bytes + 2);
    std::vector<std::uint8_t> got(static_cast<std::size_t>(length) + 1, 0xEE);
    const ballast_code read = CALL(ballast_model_read_weight(m.handle, index, offset, got.data(), got.size(), length));
    const bool fits = offset <= w.bytes && length <= w.bytes - offset;
    require((read == BALLAST_OK) == fits,
            "model_read_weight: " + std::to_string(read) + " for a range that " + (fits ? "fits" : "does not fit"));
    if (read == BALLAST_OK)
      require(std::memcmp(got.data(), stored.data() + offset, length) == 0 && got[length] == 0xEE,
              "model_read_weight: not the file's bytes");
    const void* data = nullptr;
    require(CALL(ballast_model_weight_data(m.handle, index, &data)) == BALLAST_OK && data != nullptr &&
                std::memcmp(data, stored.data(), stored.size()) == 0,
            "model_weight_data: not the file's bytes");
  }

  void open_backend() {
    auto& slot = pick(w_.backends);
    make_room(slot, ballast_backend_free);
    std::string config = "cpu";
    if (rarely()) config = in_.ConsumeRandomLengthString(24);
    ballast_backend* out = nullptr;
    const ballast_code code = CALL(ballast_backend_open(config.c_str(), &out));
    if (config == "cpu") require(code == BALLAST_OK, "backend_open(cpu) failed");
    // Any other config string opens only a CPU backend here (no GPU, and a
    // Vulkan device on lavapipe is too slow to open per input): keep those.
    if (code == BALLAST_OK) {
      ballast_device_info info = BALLAST_INIT(ballast_device_info);
      require(CALL(ballast_backend_info(out, &info)) == BALLAST_OK, "backend_info failed");
      if (std::string(info.backend) != "cpu") {
        require(CALL(ballast_backend_free(out)) == BALLAST_OK, "backend_free failed");
        return;
      }
      slot = {out, true};
    }
  }

  void free_backend() {
    auto& slot = pick(w_.backends);
    expect_free(CALL(ballast_backend_free(slot.handle)), slot, "backend_free");
  }

  void plan() {
    ModelSlot& m = pick(w_.models);
    PlanSlot& slot = pick(w_.plans);
    // -1 and 4: bad sources; 5: a residency's own plan (ballast_residency_plan).
    const auto source =
        rarely() ? in_.ConsumeIntegralInRange<std::int32_t>(-1, 5) : in_.ConsumeIntegralInRange<std::int32_t>(0, 3);
    make_room(slot, ballast_plan_free);
    ballast_plan* out = nullptr;
    if (source == 5) {
      ResidencySlot& r = pick(w_.residencies);
      const ballast_code code = CALL(ballast_residency_plan(r.handle, &out));
      if (!r.live)
        require(code == BALLAST_E_INVALID_HANDLE, "residency_plan of a freed residency: " + std::to_string(code));
      if (code != BALLAST_OK) return;
      slot = PlanSlot{{out, true}, r.model_file, -1};
    } else {
      const ballast_code code = CALL(ballast_plan_derivations(m.handle, source, &out));
      const bool good_source = source >= 0 && source <= 3;
      if (!m.live && good_source) require(code != BALLAST_OK, "plan_derivations on a freed model succeeded");
      if (!good_source) require(code != BALLAST_OK, "plan_derivations took a bad source");
      if (code != BALLAST_OK) return;
      slot = PlanSlot{{out, true}, m.file, source};
    }
    size_t count = 0;
    require(CALL(ballast_plan_count(out, &count)) == BALLAST_OK, "plan_count failed");
    for (std::size_t i = 0; i <= count; ++i) {
      ballast_derivation_info d = BALLAST_INIT(ballast_derivation_info);
      const ballast_code e = CALL(ballast_plan_entry(out, i, &d));
      require((e == BALLAST_OK) == (i < count), "plan_entry past the count, or not within it");
    }
  }

  void free_plan() {
    PlanSlot& slot = pick(w_.plans);
    expect_free(CALL(ballast_plan_free(slot.handle)), slot, "plan_free");
  }

  void create_residency() {
    auto& b = pick(w_.backends);
    ModelSlot& m = pick(w_.models);
    PlanSlot& p = pick(w_.plans);
    ResidencySlot& slot = pick(w_.residencies);
    ballast_residency_options o = BALLAST_INIT(ballast_residency_options);
    o.strategy = rarely() ? in_.ConsumeIntegral<std::int32_t>() : in_.ConsumeIntegralInRange<std::int32_t>(0, 2);
    const int budget = in_.ConsumeIntegralInRange<int>(0, 3);
    o.budget_bytes = budget == 0   ? 0
                     : budget == 1 ? in_.ConsumeIntegralInRange<std::uint64_t>(1, 4096)
                     : budget == 2 ? std::uint64_t{1} << 20
                                   : ~std::uint64_t{0};
    o.plan = in_.ConsumeBool() ? p.handle : nullptr;
    o.kinds = rarely() ? in_.ConsumeIntegral<std::uint32_t>() : in_.ConsumeIntegral<std::uint32_t>() & kind_mask();
    o.no_derivations = rarely() ? 1 : 0;
    o.group_by_layer = in_.ConsumeBool() ? (m.file == 1 ? "blk." : "model.layers.") : nullptr;
    if (rarely()) o.size = in_.ConsumeIntegralInRange<std::size_t>(0, sizeof o + 8);
    ballast_override ov{"model.embed_tokens.weight", in_.ConsumeIntegralInRange<std::int32_t>(-1, 3)};
    if (rarely()) {
      o.overrides = &ov;
      o.override_count = 1;
    }
    make_room(slot, ballast_residency_free);
    ballast_residency* out = nullptr;
    const ballast_code code = CALL(ballast_residency_create(b.handle, m.handle, &o, &out));
    // A struct cut short (rarely) hides its later fields: `plan` is read
    // only when the size given reaches it.
    const bool plan_read = o.size >= offsetof(ballast_residency_options, plan) + sizeof o.plan;
    if (!b.live || !m.live || (plan_read && o.plan != nullptr && !p.live))
      require(code != BALLAST_OK, "residency_create on a freed handle succeeded");
    if (code != BALLAST_OK) return;
    slot = ResidencySlot{{out, true}, m.file, static_cast<std::size_t>(&b - w_.backends.data())};
  }

  void release_residency() {
    ResidencySlot& r = pick(w_.residencies);
    ballast_teardown td = BALLAST_INIT(ballast_teardown);
    const ballast_code code = CALL(ballast_residency_release(r.handle, &td));
    if (!r.live)
      require(code == BALLAST_E_INVALID_HANDLE, "release of a freed residency: " + std::to_string(code));
    else
      require(code == BALLAST_OK || code == BALLAST_E_INVALID_ARGUMENT, "release: " + std::to_string(code));
  }

  void free_residency() {
    ResidencySlot& slot = pick(w_.residencies);
    expect_free(CALL(ballast_residency_free(slot.handle)), slot, "residency_free");
  }

  // Keeps a new pin, after checking what it holds.
  void keep_pin(ballast_pin* pin, std::size_t residency) {
    PinSlot& slot = pick(w_.pins);
    make_room(slot, ballast_pin_free);
    slot = PinSlot{{pin, true}, residency};
  }

  void pin_derivation() {
    ResidencySlot& r = pick(w_.residencies);
    PlanSlot& p = pick(w_.plans);
    const auto index = in_.ConsumeIntegralInRange<std::size_t>(0, 12);
    ballast_pin* pin = nullptr;
    const ballast_code code = CALL(ballast_residency_pin_derivation(r.handle, p.handle, index, &pin));
    if (!r.live || !p.live) require(code != BALLAST_OK, "pin_derivation on a freed handle succeeded");
    if (code != BALLAST_OK) return;
    require(p.model_file == r.model_file, "pin_derivation took a plan of another model");
    ballast_derivation_info d = BALLAST_INIT(ballast_derivation_info);
    require(CALL(ballast_plan_entry(p.handle, index, &d)) == BALLAST_OK, "plan_entry of a pinned entry");
    for (int half = 0; half < 2; ++half) {
      ballast_value v = BALLAST_INIT(ballast_value);
      require(CALL(ballast_pin_value(pin, 0, &v)) == BALLAST_OK, "pin_value of a new pin");
      require(v.first_bytes == d.first_bytes && v.second_bytes == d.second_bytes, "a pinned value's sizes");
      const std::vector<std::uint8_t> bytes = read_half(pin, 0, half, half == 0 ? v.first_bytes : v.second_bytes);
      if (bytes.empty() || p.source < 0) continue;
      // One plan source's entry i is one derivation of one model file: its
      // bytes are the same whatever the residency, strategy or budget.
      const auto [it, first] = w_.derived.try_emplace({p.model_file, p.source, index, half}, bytes);
      require(first || it->second == bytes, "a derived value differs between two residencies");
    }
    keep_pin(pin, static_cast<std::size_t>(&r - w_.residencies.data()));
  }

  void pin_weight() {
    ResidencySlot& r = pick(w_.residencies);
    ModelSlot& m = pick(w_.models);
    const auto index = in_.ConsumeIntegralInRange<std::size_t>(0, 5);
    ballast_weight_info w = BALLAST_INIT(ballast_weight_info);
    std::string name = rarely() ? "no.such.weight" : "";
    if (name.empty() && m.live && m.file == r.model_file &&
        CALL(ballast_model_weight(m.handle, index, &w)) == BALLAST_OK)
      name = w.name;
    ballast_pin* pin = nullptr;
    const ballast_code code = CALL(ballast_residency_pin_weight(r.handle, name.c_str(), &pin));
    if (!r.live) require(code != BALLAST_OK, "pin_weight on a freed residency succeeded");
    if (code != BALLAST_OK) return;
    require(w.name != nullptr && name == w.name, "pin_weight pinned a name the model does not have");
    ballast_value v = BALLAST_INIT(ballast_value);
    require(CALL(ballast_pin_value(pin, 0, &v)) == BALLAST_OK && v.first_bytes == w.bytes, "a pinned weight's size");
    require(read_half(pin, 0, 0, v.first_bytes) == stored_bytes(m.file, w), "a pinned weight is not the file's bytes");
    keep_pin(pin, static_cast<std::size_t>(&r - w_.residencies.data()));
  }

  void pin_group() {
    ResidencySlot& r = pick(w_.residencies);
    const auto index = in_.ConsumeIntegralInRange<std::size_t>(0, 3);
    ballast_pin* pin = nullptr;
    const ballast_code code = CALL(ballast_residency_pin_group(r.handle, index, 0, &pin));
    if (!r.live) require(code != BALLAST_OK, "pin_group on a freed residency succeeded");
    if (code != BALLAST_OK) return;
    size_t members = 0;
    require(CALL(ballast_pin_count(pin, &members)) == BALLAST_OK && members > 0, "a group pin with no member");
    keep_pin(pin, static_cast<std::size_t>(&r - w_.residencies.data()));
  }

  void free_pin() {
    PinSlot& slot = pick(w_.pins);
    expect_free(CALL(ballast_pin_free(slot.handle)), slot, "pin_free");
  }

  void read_pin() {
    PinSlot& p = pick(w_.pins);
    const auto member = in_.ConsumeIntegralInRange<std::size_t>(0, 3);
    const int half = in_.ConsumeIntegralInRange<int>(-1, 2);
    ballast_value v = BALLAST_INIT(ballast_value);
    const ballast_code code = CALL(ballast_pin_value(p.handle, member, &v));
    if (!p.live) require(code != BALLAST_OK, "pin_value on a freed pin succeeded");
    if (code == BALLAST_E_INVALID_ARGUMENT) {  // its residency was released: no read, not even an empty one
      std::uint8_t byte = 0;
      require(CALL(ballast_pin_read(p.handle, member, 0, 0, &byte, 1, 0)) != BALLAST_OK,
              "an empty read of a released residency's pin succeeded");
    }
    if (code != BALLAST_OK) return;
    const std::uint64_t bytes = half == 1 ? v.second_bytes : v.first_bytes;
    const auto offset = in_.ConsumeIntegralInRange<std::uint64_t>(0, bytes + 2);
    const auto length = in_.ConsumeIntegralInRange<std::uint64_t>(0, std::min<std::uint64_t>(bytes + 2, 1 << 20));
    std::vector<std::uint8_t> out(static_cast<std::size_t>(length) + 1);
    const ballast_code read = CALL(ballast_pin_read(p.handle, member, half, offset, out.data(), out.size(), length));
    // A single value's second half is empty: nothing fits in it but nothing.
    const bool fits = (half == 0 || half == 1) && offset <= bytes && length <= bytes - offset;
    require((read == BALLAST_OK) == fits, "pin_read: " + std::to_string(read) + " for a range that " +
                                              (fits ? "fits" : "does not fit") + " (member " + std::to_string(member) +
                                              ", half " + std::to_string(half) + ", [" + std::to_string(offset) +
                                              ", +" + std::to_string(length) + ") of " + std::to_string(v.first_bytes) +
                                              " + " + std::to_string(v.second_bytes) + " bytes)");
  }

  void prefetch() {
    ResidencySlot& r = pick(w_.residencies);
    PlanSlot& p = pick(w_.plans);
    const int which = in_.ConsumeIntegralInRange<int>(0, 2);
    const auto index = in_.ConsumeIntegralInRange<std::size_t>(0, 6);
    const ballast_code code = which == 0   ? CALL(ballast_residency_prefetch(r.handle, p.handle, index))
                              : which == 1 ? CALL(ballast_residency_prefetch_group(r.handle, index))
                                           : CALL(ballast_residency_wait_prefetches(r.handle));
    if (!r.live) require(code != BALLAST_OK, "prefetch on a freed residency succeeded");
  }

  void derive_all() {
    ResidencySlot& r = pick(w_.residencies);
    PlanSlot& p = pick(w_.plans);
    std::size_t calls = 0;
    const ballast_code code = CALL(ballast_residency_derive_all(
        r.handle, p.handle, [](void* user, size_t, size_t) { ++*static_cast<std::size_t*>(user); }, &calls));
    if (!r.live || !p.live) require(code != BALLAST_OK, "derive_all on a freed handle succeeded");
    if (code != BALLAST_OK) return;
    size_t count = 0;
    require(CALL(ballast_plan_count(p.handle, &count)) == BALLAST_OK && calls == count,
            "derive_all's progress: not once per entry");
  }

  void load() {
    ResidencySlot& r = pick(w_.residencies);
    ballast_load_options o = BALLAST_INIT(ballast_load_options);
    const bool wild = rarely();  // knobs past their ranges too
    o.engine = in_.ConsumeIntegralInRange<std::int32_t>(wild ? -1 : 0, wild ? 3 : 2);
    o.cache = in_.ConsumeIntegralInRange<std::int32_t>(wild ? -1 : 0, wild ? 3 : 2);
    o.queue_depth = in_.ConsumeIntegralInRange<std::uint32_t>(0, wild ? 1025 : 8);
    o.staging_buffers = in_.ConsumeIntegralInRange<std::uint32_t>(0, wild ? 1025 : 8);
    o.chunk_bytes = in_.ConsumeIntegralInRange<std::uint64_t>(0, 1 << 16);
    o.direct_io = in_.ConsumeIntegralInRange<std::int32_t>(0, wild ? 2 : 1);
    o.read_cached = in_.ConsumeIntegralInRange<std::int32_t>(0, wild ? 2 : 1);
    o.populate_threads = in_.ConsumeIntegralInRange<std::uint32_t>(0, 4);
    o.populate_piece_bytes = in_.ConsumeIntegralInRange<std::uint64_t>(0, 1 << 16);
    ballast_load_report report = BALLAST_INIT(ballast_load_report);
    const ballast_code code = CALL(ballast_residency_load(r.handle, &o, &report));
    if (!r.live) require(code != BALLAST_OK, "load on a freed residency succeeded");
    if (code == BALLAST_OK)
      require(report.read_bytes <= report.planned_bytes && report.peak_staging_in_use <= report.staging_bytes,
              "load: read more than planned, or staged more than its buffers");
  }

  void stats() {
    ResidencySlot& r = pick(w_.residencies);
    ballast_residency_stats s = BALLAST_INIT(ballast_residency_stats);
    const ballast_code code = CALL(ballast_residency_stats_get(r.handle, &s));
    if (!r.live) require(code != BALLAST_OK, "stats_get on a freed residency succeeded");
    if (code != BALLAST_OK || s.budget_bytes == 0) return;
    r.highest_budget = std::max(r.highest_budget, s.budget_bytes);
    require(s.device_bytes <= s.budget_bytes + s.stuck_bytes, "a residency above its budget");
    require(s.peak_device_bytes <= r.highest_budget + s.stuck_bytes, "a residency's peak above every budget it had");
  }

  // A live residency's budget changed to anything: refused, or in force
  // with what is held inside it.
  void set_budget() {
    ResidencySlot& r = pick(w_.residencies);
    ballast_residency_stats s = BALLAST_INIT(ballast_residency_stats);
    // An unlimited budget counts too: one given at create() (UINT64_MAX) is
    // sized, so this call may bound it under the peak reached without one.
    if (r.live && CALL(ballast_residency_stats_get(r.handle, &s)) == BALLAST_OK && s.budget_bytes != 0)
      r.highest_budget = std::max(r.highest_budget, s.budget_bytes);
    const std::uint64_t bytes = in_.ConsumeBool() ? in_.ConsumeIntegral<std::uint64_t>()
                                                  : in_.ConsumeIntegralInRange<std::uint64_t>(0, 8u << 20);
    const ballast_code code = CALL(ballast_residency_set_budget(r.handle, bytes));
    if (!r.live) require(code != BALLAST_OK, "set_budget on a freed residency succeeded");
    if (code != BALLAST_OK) return;
    require(CALL(ballast_residency_stats_get(r.handle, &s)) == BALLAST_OK, "stats after set_budget");
    require(s.budget_bytes == bytes, "set_budget succeeded but the budget is another");
    require(s.device_bytes <= bytes, "set_budget succeeded with more held than the budget");
    r.highest_budget = std::max(r.highest_budget, bytes);
  }

  // A model's notes, each index in range readable, the next out of bounds.
  void notes() {
    ModelSlot& m = pick(w_.models);
    size_t n = 0;
    const ballast_code code = CALL(ballast_model_note_count(m.handle, &n));
    if (!m.live) require(code != BALLAST_OK, "note_count on a freed model succeeded");
    if (code != BALLAST_OK) return;
    const char *tensor = nullptr, *message = nullptr;
    for (size_t i = 0; i < n; ++i)
      require(CALL(ballast_model_note(m.handle, i, &tensor, &message)) == BALLAST_OK && message != nullptr,
              "a note in range");
    require(CALL(ballast_model_note(m.handle, n, &tensor, &message)) == BALLAST_E_OUT_OF_BOUNDS,
            "the note past the last");
  }

  // Every kind of handle passed where another is expected: INVALID_HANDLE.
  void wrong_kind() {
    ModelSlot& m = pick(w_.models);
    auto& b = pick(w_.backends);
    PlanSlot& p = pick(w_.plans);
    PinSlot& pin = pick(w_.pins);
    size_t n = 0;
    ballast_pin* out = nullptr;
    const auto as = [](auto* h, auto* target) { return reinterpret_cast<decltype(target)>(h); };
    if (m.handle != nullptr)
      require(
          CALL(ballast_plan_count(as(m.handle, static_cast<ballast_plan*>(nullptr)), &n)) == BALLAST_E_INVALID_HANDLE,
          "a model handle taken as a plan");
    if (b.handle != nullptr)
      require(CALL(ballast_model_weight_count(as(b.handle, static_cast<ballast_model*>(nullptr)), &n)) ==
                  BALLAST_E_INVALID_HANDLE,
              "a backend handle taken as a model");
    if (p.handle != nullptr)
      require(CALL(ballast_residency_pin_weight(as(p.handle, static_cast<ballast_residency*>(nullptr)), "x", &out)) ==
                  BALLAST_E_INVALID_HANDLE,
              "a plan handle taken as a residency");
    if (pin.handle != nullptr)
      require(CALL(ballast_backend_free(as(pin.handle, static_cast<ballast_backend*>(nullptr)))) ==
                  BALLAST_E_INVALID_HANDLE,
              "a pin handle taken as a backend");
  }

  // A handle value nobody made: any status, never a crash.
  void made_up() {
    const auto value = in_.ConsumeIntegral<std::uintptr_t>();
    size_t n = 0;
    ballast_value v = BALLAST_INIT(ballast_value);
    switch (in_.ConsumeIntegralInRange<int>(0, 3)) {
      case 0: CALL(ballast_model_weight_count(reinterpret_cast<ballast_model*>(value), &n)); break;
      case 1: CALL(ballast_plan_count(reinterpret_cast<ballast_plan*>(value), &n)); break;
      case 2: CALL(ballast_pin_value(reinterpret_cast<ballast_pin*>(value), 0, &v)); break;
      default: CALL(ballast_residency_group_count(reinterpret_cast<ballast_residency*>(value), &n)); break;
    }
  }

  // A freed handle of each kind is INVALID_HANDLE on a read.
  void freed_handles() {
    size_t n = 0;
    for (auto& m : w_.models)
      if (m.handle != nullptr && !m.live)
        require(CALL(ballast_model_weight_count(m.handle, &n)) == BALLAST_E_INVALID_HANDLE, "a freed model read");
    for (auto& p : w_.plans)
      if (p.handle != nullptr && !p.live)
        require(CALL(ballast_plan_count(p.handle, &n)) == BALLAST_E_INVALID_HANDLE, "a freed plan read");
    for (auto& p : w_.pins)
      if (p.handle != nullptr && !p.live)
        require(CALL(ballast_pin_count(p.handle, &n)) == BALLAST_E_INVALID_HANDLE, "a freed pin read");
    for (auto& r : w_.residencies)
      if (r.handle != nullptr && !r.live)
        require(CALL(ballast_residency_group_count(r.handle, &n)) == BALLAST_E_INVALID_HANDLE,
                "a freed residency read");
  }

  FuzzedDataProvider& in_;
  World w_;
};

void quiet_sink(void*, ballast_log_level, const char* source, const char* text) {
  require(source != nullptr && text != nullptr, "a log message without its source or text");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)models();
  require(CALL(ballast_set_log_sink(quiet_sink, nullptr)) == BALLAST_OK, "set_log_sink failed");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  Run run(in);
  run.start();
  for (int calls = 0; calls < 64 && in.remaining_bytes() > 0; ++calls) run.step();
  run.finish();
  return 0;
}
