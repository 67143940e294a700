// libFuzzer target: a whole model file through everything an engine calls
// on it, where the format targets (fuzz_safetensors, fuzz_gguf, ...) stop
// at the parsed header. The input is written to a file and opened with
// open_model() in whichever format its bytes say (ONNX, safetensors, a
// sharded index, GGUF); then:
//   - every weight is read in full through the mapping (ASan sees a range
//     past its file) and the store's accounting must add up;
//   - the plan is built (rules and graph), and every entry's source and
//     operands must be weights of the model, long enough for the launch;
//   - when the plan's outputs are small, it is derived on the CPU backend
//     and every value must equal the scalar reference (tests/reference)
//     computed from the weights' bytes: hostile block codes, NaN and
//     infinite scales, subnormals, all through the real kernels;
//   - or, by the flags, through a Residency (paged under its auto budget,
//     paged under a quarter of it, zero_copy): each planned value and each
//     weight pinned one at a time equals the reference, or the weight's
//     bytes; a budget create() accepts never fails a single pin (the auto
//     budget may refuse a plan that passed planning, unsupported: it
//     counts overlapping source ranges apart; create() refuses it alike);
//   - releasing the memo and the sources (or the residency) frees
//     everything: the backend is left with no live allocation or
//     registration.
// Any failure must be a typed error with a message, never a crash.
//
// Input: u8 flags, then the file's bytes.
//   bit 0: max_tensor_elements 1000 (else 1 << 20)
//   bit 1: PlanSource::graph_and_rules (else automatic)
//   bit 2: the portable kernels on one thread (else the vector kernels on two)
//   bit 3: max_amplification 2 (else the default)
//   bits 4-5: 0 derive_weights; 1 Residency paged, auto budget; 2 paged,
//             a quarter of the auto budget (create may refuse it); 3 zero_copy
//   bit 6: the input is part 1 of a GGUF split set, named so; part 2 (one
//          Q4_0 tensor, split.no 1 of 2, split.tensors.count 2) is the
//          harness's own, beside it
// A sharded index names shard_a.safetensors and shard_b.safetensors: the
// harness writes them beside the input (Hugging Face names, float32 and
// bfloat16), as w.bin for ONNX external data. Seeds: make_open_model_seeds.py.
#include <ballast/backend_registry.hpp>
#include <ballast/derive.hpp>
#include <ballast/derived_weights.hpp>
#include <ballast/device_weights.hpp>
#include <ballast/model.hpp>
#include <ballast/residency.hpp>

#include "reference/reference.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

namespace {

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz_open_model: %s\n", what.c_str());
  std::abort();
}

void require(bool ok, const char* what) {
  if (!ok) fail(what);
}

// Derivations whose outputs add up to more than this are planned, not run:
// the amplification cap bounds them, but not below the RSS limit.
constexpr std::uint64_t kMaxDerivedBytes = std::uint64_t{32} << 20;

const std::filesystem::path& data_dir() {
  static const std::filesystem::path dir = std::filesystem::path(BALLAST_FUZZ_DATA_DIR) / "open_model";
  return dir;
}

void write_file(const std::filesystem::path& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) fail("cannot write " + path.string());
}

// A file every process of this target reads (shards, w.bin), written by
// each as it starts: left alone when it already holds these bytes, else
// written under a name of this process's and renamed over the path. Written
// in place, another process's start truncated it under a running one, whose
// mapping then read as changed (io) or lost its pages: a false finding.
void write_shared_file(const std::filesystem::path& path, const std::vector<std::uint8_t>& bytes) {
  {
    std::ifstream in(path, std::ios::binary);
    const std::vector<std::uint8_t> held((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.is_open() && held == bytes) return;
  }
  std::filesystem::path scratch = path;
  scratch += ".tmp" + std::to_string(::getpid());
  write_file(scratch, bytes);
  std::error_code error;
  std::filesystem::rename(scratch, path, error);
  if (error) fail("cannot rename " + scratch.string() + " to " + path.string() + ": " + error.message());
}

void append_u64(std::vector<std::uint8_t>& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}

// A safetensors file of one [8, 4] tensor of `dtype` ("F32" or "BF16").
std::vector<std::uint8_t> shard(const std::string& name, const std::string& dtype, std::uint8_t seed) {
  const std::uint64_t bytes = dtype == "F32" ? 128 : 64;
  std::string json = "{\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":[8,4],\"data_offsets\":[0," +
                     std::to_string(bytes) + "]}}";
  while ((8 + json.size()) % 8 != 0) json += ' ';
  std::vector<std::uint8_t> out;
  append_u64(out, json.size());
  out.insert(out.end(), json.begin(), json.end());
  for (std::uint64_t i = 0; i < bytes; ++i) out.push_back(static_cast<std::uint8_t>(seed + i * 37));
  return out;
}

void append_u32(std::vector<std::uint8_t>& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}

void append_string(std::vector<std::uint8_t>& out, const std::string& s) {
  append_u64(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

// Part 2 of 2 of a GGUF split set: split.no 1, split.count 2,
// split.tensors.count 2, and one Q4_0 tensor blk.1.attn_q.weight [2, 32].
std::vector<std::uint8_t> split_part_two() {
  std::vector<std::uint8_t> out = {'G', 'G', 'U', 'F'};
  append_u32(out, 3);
  append_u64(out, 1);  // tensors
  append_u64(out, 3);  // metadata
  append_string(out, "split.no");
  append_u32(out, 2);  // uint16
  out.insert(out.end(), {1, 0});
  append_string(out, "split.count");
  append_u32(out, 2);
  out.insert(out.end(), {2, 0});
  append_string(out, "split.tensors.count");
  append_u32(out, 5);  // int32
  append_u32(out, 2);
  append_string(out, "blk.1.attn_q.weight");
  append_u32(out, 2);  // n_dims
  append_u64(out, 32);
  append_u64(out, 2);
  append_u32(out, 2);  // Q4_0
  append_u64(out, 0);  // offset
  while (out.size() % 32 != 0) out.push_back(0);
  for (int block = 0; block < 2; ++block) {
    out.insert(out.end(), {0x00, 0x3c});  // f16 scale 1.0
    for (int i = 0; i < 16; ++i) out.push_back(static_cast<std::uint8_t>(i * 17 + block));
  }
  return out;
}

// Each fuzzing process has its own input files (several may run on one
// build: libFuzzer's -jobs or -fork, CI's short run beside a long one): a
// plain one, and part 1 of a split set whose part 2 is written beside it once.
std::string pid_text() { return std::to_string(::getpid()); }

// The files of the process `pid`, by their exact names: a prefix
// "input-" + pid would also match those of a process whose pid starts
// with this one's (12 and 123).
void remove_files_of(const std::string& pid) {
  std::error_code ignored;
  for (const std::string& name :
       {"input-" + pid, "split" + pid + "-00001-of-00002.gguf", "split" + pid + "-00002-of-00002.gguf"})
    std::filesystem::remove(data_dir() / name, ignored);
}

// This process's files, removed as it exits normally (libFuzzer's end of
// -max_total_time).
void remove_own_files() { remove_files_of(pid_text()); }

// A crash, a timeout or a signal leaves a process's files behind (a few KiB
// each): the next process removes those of every process that is gone
// (kill(pid, 0) says ESRCH). A pid reused meanwhile keeps its files.
void remove_files_of_dead_processes() {
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(data_dir(), error)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("input-", 0) != 0) continue;
    const std::string pid = name.substr(6);
    if (pid.empty() || pid.size() > 9 || pid.find_first_not_of("0123456789") != std::string::npos) continue;
    if (::kill(static_cast<pid_t>(std::stol(pid)), 0) != 0 && errno == ESRCH) remove_files_of(pid);
  }
}

std::filesystem::path input_path(bool split_part) {
  const std::string pid = pid_text();
  static const std::filesystem::path plain = data_dir() / ("input-" + pid);
  static const std::filesystem::path part = [&] {
    write_file(data_dir() / ("split" + pid + "-00002-of-00002.gguf"), split_part_two());
    return data_dir() / ("split" + pid + "-00001-of-00002.gguf");
  }();
  return split_part ? part : plain;
}

ballast::GpuBackend& backend(bool portable) {
  static const auto open = [](const char* config) {
    auto b = ballast::open_backend(config);
    if (!b.ok()) fail("open_backend(" + std::string(config) + "): " + b.error().to_string());
    return std::move(*b);
  };
  static const std::unique_ptr<ballast::GpuBackend> vector = open("cpu?threads=2&simd=on");
  static const std::unique_ptr<ballast::GpuBackend> scalar = open("cpu?threads=1&simd=off");
  return portable ? *scalar : *vector;
}

std::span<const std::byte> weight_bytes(const ballast::Model& model, ballast::ValueId id, std::uint64_t need,
                                        const char* operand) {
  const auto it = model.store().weights().find(id);
  if (it == model.store().weights().end()) fail(std::string("a planned ") + operand + " is not a weight");
  auto bytes = model.store().bytes(it->second);
  if (!bytes) fail(std::string("a planned ") + operand + " cannot be read");
  if (bytes->size() < need) fail(std::string("a planned ") + operand + " is shorter than its launch reads");
  return bytes->first(static_cast<std::size_t>(need));
}

// The reference's outputs for a planned entry, from the weights' bytes.
ballast::reference::Outputs expected_of(const ballast::Model& model, const ballast::PlannedDerivation& p,
                                        const ballast::DerivationSizes& sizes) {
  namespace ref = ballast::reference;
  std::vector<std::byte> transposed;
  std::span<const std::byte> src;
  if (p.of_transposed) {
    // quant_int8 per output channel of a weight stored [K, N]: the rows of
    // its [N, K] transpose.
    ballast::DerivationLaunch t;
    t.kind = ballast::Derivation::transpose;
    t.src_type = p.launch.src_type;
    t.rows = p.launch.cols;
    t.cols = p.launch.rows;
    auto t_sizes = ballast::derivation_sizes(t);
    if (!t_sizes.ok()) fail("the transpose a quant_int8 reads is invalid: " + t_sizes.error().to_string());
    auto out = ref::derive(t, {weight_bytes(model, p.source, t_sizes->src_bytes, "weight"), {}, {}});
    if (!out.ok()) fail("the reference refused a planned transpose: " + out.error().to_string());
    transposed = std::move(out->dst);
    src = transposed;
  } else {
    src = weight_bytes(model, p.source, sizes.src_bytes, "weight");
  }
  ref::Inputs in{src, {}, {}};
  if (sizes.scales_bytes != 0) {
    if (!p.scales) fail("a planned launch reads scales the entry does not name");
    in.scales = weight_bytes(model, *p.scales, sizes.scales_bytes, "scales");
  }
  if (sizes.zero_point_bytes != 0) {
    if (!p.zero_points) fail("a planned launch reads zero points the entry does not name");
    in.zero_points = weight_bytes(model, *p.zero_points, sizes.zero_point_bytes, "zero points");
  }
  auto out = ref::derive(p.launch, in);
  if (!out.ok()) fail("the reference refused a planned launch (" + p.why + "): " + out.error().to_string());
  return std::move(*out);
}

// The derived value at `dst`/`dst2` must be the reference's.
void compare_value(ballast::GpuBackend& gpu, const ballast::Model& model, const ballast::PlannedDerivation& p,
                   const ballast::DerivationSizes& sizes, ballast::DevicePtr first, ballast::DevicePtr second) {
  const auto expected = expected_of(model, p, sizes);
  std::vector<std::byte> dst(sizes.dst_bytes), dst2(sizes.dst2_bytes);
  if (!dst.empty() && !gpu.copy_to_host(dst, first, 0).ok()) fail("cannot read a derived value");
  if (!dst2.empty() && !gpu.copy_to_host(dst2, second, 0).ok()) fail("cannot read a derived pair's second half");
  ballast::reference::Tolerance tol;
  tol.flushes_f16_subnormals = gpu.capabilities().flushes_f16_subnormals;
  tol.int8_codes_within_one = gpu.capabilities().int8_codes_within_one;
  const auto cmp = ballast::reference::compare(p.launch, expected, dst, dst2, tol);
  if (!cmp.ok) fail("derived " + p.weight + " (" + p.why + ") differs from the reference: " + cmp.message);
}

// Every planned value and every weight through a Residency, pinned one at
// a time. mode: 1 paged (auto budget), 2 paged (a quarter of it), 3 zero_copy.
void pin_and_compare(ballast::GpuBackend& gpu, const ballast::Model& model,
                     const std::vector<ballast::PlannedDerivation>& plan,
                     const std::vector<ballast::DerivationSizes>& sizes, int mode) {
  ballast::ResidencyOptions options;
  options.strategy = mode == 3 ? ballast::ResidencyStrategy::zero_copy : ballast::ResidencyStrategy::paged;
  options.derivations = plan;
  if (mode != 3) {
    // The auto budget counts each distinct source range once more than the
    // plan's cap does (overlapping ranges, docs/security.md), so it may
    // refuse a model whose plan passed: unsupported, the same cap. Then a
    // paged residency under it is refused too, and nothing is pinned.
    auto budget = ballast::auto_budget(model.store(), plan);
    if (!budget.ok()) {
      if (budget.code() != ballast::ErrorCode::unsupported)
        fail("auto_budget refused a plan that planned: " + budget.error().to_string());
      auto refused = ballast::Residency::create(gpu, model, options);
      require(!refused.ok() && refused.code() == ballast::ErrorCode::unsupported,
              "Residency::create took an auto budget that auto_budget refused");
      return;
    }
    if (mode == 2) options.budget_bytes = budget->total / 4;
  }
  auto residency = ballast::Residency::create(gpu, model, options);
  if (!residency.ok()) {
    // Only the quartered budget may be too small; anything else must fit.
    if (mode != 2 || residency.code() != ballast::ErrorCode::invalid_argument)
      fail("Residency::create refused: " + residency.error().to_string());
    require(!residency.error().message.empty(), "Residency::create failed without a message");
    return;
  }
  ballast::Residency& r = **residency;
  for (std::size_t i = 0; i < plan.size(); ++i) {
    auto pinned = r.pin(plan[i]);
    if (!pinned.ok()) fail("pinning " + plan[i].weight + " (" + plan[i].why + "): " + pinned.error().to_string());
    require(pinned->first_bytes() == sizes[i].dst_bytes && pinned->second_bytes() == sizes[i].dst2_bytes,
            "a pinned value's sizes are not its launch's");
    if (sizes[i].dst_bytes != 0 || sizes[i].dst2_bytes != 0)
      compare_value(gpu, model, plan[i], sizes[i], pinned->first(), pinned->second());
  }
  for (ballast::ValueId id : model.weight_order()) {
    auto bytes = model.store().bytes(model.store().weights().at(id));
    auto pinned = r.pin(id);
    if (!pinned.ok()) fail("pinning weight " + std::string(model.value_name(id)) + ": " + pinned.error().to_string());
    require(pinned->bytes() == bytes->size(), "a pinned weight's size is not its bytes'");
    std::vector<std::byte> back(bytes->size());
    if (!back.empty()) {
      if (!gpu.copy_to_host(back, pinned->first(), 0).ok()) fail("cannot read a pinned weight");
      require(std::equal(back.begin(), back.end(), bytes->begin()), "a pinned weight's bytes are not the file's");
    }
  }
  const ballast::Released released = r.release(gpu);
  require(released.status.ok() && released.failed_frees == 0, "releasing the residency failed");
}

void derive_and_compare(const ballast::Model& model, const std::vector<ballast::PlannedDerivation>& plan, bool portable,
                        int mode) {
  std::uint64_t total = 0;
  std::vector<ballast::DerivationSizes> sizes;
  for (const auto& p : plan) {
    auto s = ballast::derivation_sizes(p.launch);
    if (!s.ok()) fail("a planned launch is invalid (" + p.why + "): " + s.error().to_string());
    total += s->dst_bytes + s->dst2_bytes;
    sizes.push_back(*s);
  }
  if (total > kMaxDerivedBytes) return;

  ballast::GpuBackend& gpu = backend(portable);
  const auto before = gpu.counters();
  if (mode != 0) {
    pin_and_compare(gpu, model, plan, sizes, mode);
  } else {
    ballast::DeviceWeights sources(gpu, model.store());
    ballast::DerivedWeights memo;
    const ballast::DeriveContext ctx{gpu, model, sources, memo};
    auto values = ballast::derive_weights(ctx, plan);
    if (values.ok()) {
      require(values->size() == plan.size(), "derive_weights returned another count than planned");
      for (std::size_t i = 0; i < plan.size(); ++i) {
        // An empty output (a dim of 0) is no launch at all (the validated
        // center returns before the backend); the reference would still
        // walk every row of a [2^32, 0] tensor.
        if (sizes[i].dst_bytes == 0 && sizes[i].dst2_bytes == 0) continue;
        compare_value(gpu, model, plan[i], sizes[i], (*values)[i].first, (*values)[i].second);
      }
    } else {
      // A plan the planner accepted, within the size cap, on a backend with
      // room: nothing may refuse it.
      fail("derive_weights refused a plan planned from this model: " + values.error().to_string());
    }
    const ballast::Released memo_released = memo.release(gpu);
    require(memo_released.status.ok() && memo_released.failed_frees == 0, "releasing the memo failed");
    const ballast::Released sources_released = sources.release(gpu);
    require(sources_released.status.ok() && sources_released.failed_frees == 0, "releasing the sources failed");
  }
  const auto after = gpu.counters();
  require(after.live_allocations == before.live_allocations && after.live_bytes == before.live_bytes &&
              after.live_registrations == before.live_registrations,
          "the derivation left allocations or registrations behind");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  std::filesystem::create_directories(data_dir());
  remove_files_of_dead_processes();
  write_shared_file(data_dir() / "shard_a.safetensors", shard("model.layers.0.self_attn.q_proj.weight", "F32", 3));
  write_shared_file(data_dir() / "shard_b.safetensors", shard("lm_head.weight", "BF16", 11));
  std::vector<std::uint8_t> blob(4096);
  for (std::size_t i = 0; i < blob.size(); ++i) blob[i] = static_cast<std::uint8_t>(i * 31);
  write_shared_file(data_dir() / "w.bin", blob);
  std::atexit(remove_own_files);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::uint8_t flags = data[0];
  const std::filesystem::path input = input_path((flags & 64) != 0);
  write_file(input, std::vector<std::uint8_t>(data + 1, data + size));

  ballast::LoadOptions options;
  options.max_tensor_elements = (flags & 1) != 0 ? 1000 : std::uint64_t{1} << 20;
  auto model = ballast::open_model(input, options);
  if (!model.ok()) {
    require(!model.error().message.empty(), "open_model failed without a message");
    return 0;
  }

  // Every weight, read in full through its mapping.
  const ballast::WeightStore& store = model->store();
  std::uint8_t sink = 0;
  for (ballast::ValueId id : model->weight_order()) {
    const auto it = store.weights().find(id);
    require(it != store.weights().end(), "weight_order names a value the store does not hold");
    auto b = store.bytes(it->second);
    require(b.has_value(), "a weight the open accepted cannot be read");
    for (std::byte x : *b) sink ^= std::to_integer<std::uint8_t>(x);
    require(model->value_id(model->value_name(id)) == id, "a weight's name does not map back to its id");
  }
  for (const auto& m : model->metadata()) sink ^= static_cast<std::uint8_t>(m.key.size() + m.value.size());
  const auto referenced = store.referenced_weight_bytes();
  (void)store.dead_ranges(referenced);
  require(store.unreferenced_external_bytes(referenced) <= store.mapped_external_bytes(),
          "more unreferenced bytes than mapped");
  require(model->check_unchanged().ok(), "the model reads as changed though nothing touched it");

  std::vector<ballast::PlanSkip> skipped;
  ballast::PlanOptions plan_options;
  plan_options.skipped = &skipped;
  if ((flags & 2) != 0) plan_options.source = ballast::PlanSource::graph_and_rules;
  if ((flags & 8) != 0) plan_options.max_amplification = 2;
  auto plan = ballast::plan_derivations(*model, plan_options);
  if (!plan.ok()) {
    require(!plan.error().message.empty(), "plan_derivations failed without a message");
    return 0;
  }
  for (const auto& s : skipped) sink ^= static_cast<std::uint8_t>(s.reason.size());
  derive_and_compare(*model, *plan, (flags & 4) != 0, (flags >> 4) & 3);
  volatile std::uint8_t keep = sink;
  (void)keep;
  return 0;
}
