// libFuzzer target (issue 12 §5): derivation_sizes() and the validated
// center in front of every backend (core/backend/gpu_backend.cpp:
// GpuBackend::launch, the copies, free, register_host, unregister_host),
// driven by fuzzed operations against the CPU backend's real allocations.
//
// Every call must succeed or return an error, never crash, and which of
// the two it does must agree with an independent model of the rules in
// include/ballast/gpu_backend.hpp and derivation.hpp: operand sizes
// recomputed here in 128-bit arithmetic, and the harness's own record of
// the live allocations and registrations. A call that succeeds must have
// changed exactly what it promises and nothing else: the harness keeps a
// shadow copy of every allocation and of a host arena (where all
// registrations live) and compares them all after every operation; the
// bytes a launch writes must equal the scalar reference
// (tests/reference). On the CPU backend device pointers are host
// addresses, so the harness reads device memory directly and ASan sees any
// access outside an allocation; the arena's unregistered bytes are guard
// bytes. Shapes are fuzzed over the whole 64-bit range, yet a launch that
// passes validation stays cheap: its operands lie in allocations of at
// most 8 KiB or in the 16 KiB arena.
//
// Input (little-endian, reading past the end gives zeros):
//   u8 flags            bit 0: portable kernels on one thread, else the
//                       vector kernels (where the CPU has them) on two
//   4 x allocation      u16 size % 8193, u8 alignment code (below)
//   u8 fill seed        allocation and arena contents
//   registration        u16 offset, u16 length in the arena, read-only
//   then operations, each u8 op % 9 and its fields:
//     0 launch          u8 kind, u8 src_type (0xE0 + i: the GGUF block
//                       type 2000 + i), count rows, count cols,
//                       block size, u8 zero_points, pointer src, scales,
//                       zero_point, dst, dst2; for kind 9 (slice) then
//                       count src_cols, count col_offset
//     1 copy_to_device  pointer dst, count offset, u16 length, u8 fill
//     2 copy_to_host    pointer src, count offset, u16 length
//     3 copy_device     pointer dst, count dst offset, pointer src,
//                       count src offset, count bytes
//     4 allocate        u16 size % 8193, u8 alignment code
//     5 free            pointer
//     6 register_host   u16 offset, u16 length, u8 flags (bit 0 read-write,
//                       bit 1 a null host pointer)
//     7 unregister_host pointer
//     8 synchronize
//   pointer: u8 s; s < 0xC0: known range s % n (allocations and
//            registrations made so far, live or not, and the arena) plus
//            an i16 offset; s < 0xE0: 0; else a u64.
//   count:   u8 c; c < 0xE0: c; c < 0xF0: an edge value (kEdges); c < 0xF8:
//            a u16; else a u64.
//   block size: u8 b; b < 0x80: 1 << (b % 32); else a u32.
//   alignment code: u8 a; a < 0xF0: 1 << (a % 13); else a itself.
#include <ballast/backend_registry.hpp>
#include <ballast/derivation.hpp>
#include <ballast/gpu_backend.hpp>

#include "reference/reference.hpp"
#include "fuzz/launch_input.hpp"
#include "fuzz/reference_sizes.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace {

using ballast::DataType;
using ballast::Derivation;
using ballast::DerivationLaunch;
using ballast::DevicePtr;
using ballast::GpuBackend;
using ballast::ZeroPoints;
using fuzz::kMax64;
using fuzz::Reader;
using fuzz::reference_sizes;
using fuzz::u128;
using fuzz::u64;

constexpr u64 kMaxAllocation = 8192;
constexpr u64 kArena = 16384;
constexpr std::size_t kMaxLive = 8;
constexpr std::size_t kMaxKnown = 64;
constexpr std::size_t kMaxOps = 96;

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz_launch_validation: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

std::string hex(u64 v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string describe(const DerivationLaunch& l) {
  return std::string(ballast::derivation_name(l.kind)) + "(kind " + std::to_string(static_cast<int>(l.kind)) +
         ", type " + std::to_string(static_cast<int>(l.src_type)) + ", rows " + std::to_string(l.rows) + ", cols " +
         std::to_string(l.cols) + ", block " + std::to_string(l.block_size) + ", zp form " +
         std::to_string(static_cast<int>(l.zero_points)) + ", src " + hex(l.src) + ", scales " + hex(l.scales) +
         ", zero_point " + hex(l.zero_point) + ", dst " + hex(l.dst) + ", dst2 " + hex(l.dst2) + ")";
}

// derivation_sizes() against reference_sizes(): the same verdict and, when
// both accept, the same five sizes.
std::optional<ballast::DerivationSizes> checked_sizes(const DerivationLaunch& l) {
  const auto expected = reference_sizes(l);
  auto got = ballast::derivation_sizes(l);
  if (!got.ok()) {
    if (got.code() == ballast::ErrorCode::ok || got.error().to_string().empty()) fail("an error without a code");
    if (expected)
      fail("derivation_sizes refused " + describe(l) + ": " + got.error().to_string() + "; expected src " +
           std::to_string(static_cast<u64>(expected->src)) + " dst " + std::to_string(static_cast<u64>(expected->dst)));
    return std::nullopt;
  }
  if (!expected)
    fail("derivation_sizes accepted " + describe(l) + " (src " + std::to_string(got->src_bytes) + ", dst " +
         std::to_string(got->dst_bytes) + ", dst2 " + std::to_string(got->dst2_bytes) + ")");
  const ballast::DerivationSizes& g = *got;
  if (g.src_bytes != expected->src || g.scales_bytes != expected->scales ||
      g.zero_point_bytes != expected->zero_point || g.dst_bytes != expected->dst || g.dst2_bytes != expected->dst2)
    fail("derivation_sizes of " + describe(l) + " gave src " + std::to_string(g.src_bytes) + " scales " +
         std::to_string(g.scales_bytes) + " zero_point " + std::to_string(g.zero_point_bytes) + " dst " +
         std::to_string(g.dst_bytes) + " dst2 " + std::to_string(g.dst2_bytes) + "; expected src " +
         std::to_string(static_cast<u64>(expected->src)) + " scales " +
         std::to_string(static_cast<u64>(expected->scales)) + " zero_point " +
         std::to_string(static_cast<u64>(expected->zero_point)) + " dst " +
         std::to_string(static_cast<u64>(expected->dst)) + " dst2 " + std::to_string(static_cast<u64>(expected->dst2)));
  return g;
}

// ------------------------------------------------------------ the world
struct Allocation {
  DevicePtr ptr = 0;
  u64 bytes = 0;
  std::vector<std::byte> shadow;  // what it must hold
};

struct Registration {
  DevicePtr ptr = 0;
  u64 bytes = 0;
  bool read_only = true;
};

std::byte* host(DevicePtr p) { return reinterpret_cast<std::byte*>(static_cast<std::uintptr_t>(p)); }
DevicePtr device(const void* p) { return static_cast<DevicePtr>(reinterpret_cast<std::uintptr_t>(p)); }

bool inside(u64 start, u64 size, u64 ptr, u64 bytes) { return ptr >= start && u128{ptr} + bytes <= u128{start} + size; }
bool overlap(u64 a, u64 an, u64 b, u64 bn) {
  return an != 0 && bn != 0 && u128{a} < u128{b} + bn && u128{b} < u128{a} + an;
}

void fill(std::span<std::byte> out, std::uint32_t seed) {
  std::uint32_t x = seed * 2654435761u + 0x9e3779b9u;
  for (std::byte& b : out) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    b = static_cast<std::byte>(x >> 7);
  }
}

class World {
 public:
  World(GpuBackend& gpu, std::uint8_t seed) : gpu_(gpu), seed_(seed), arena_(kArena), arena_shadow_(kArena) {
    fill(arena_, seed);
    arena_shadow_ = arena_;
  }

  ~World() {
    for (const Allocation& a : allocations_)
      if (!gpu_.free(a.ptr).ok()) fail("free of a live allocation refused at teardown");
    for (auto it = registrations_.rbegin(); it != registrations_.rend(); ++it)
      if (!gpu_.unregister_host(it->ptr).ok()) fail("unregister of a live registration refused at teardown");
    const ballast::AllocationCounters c = gpu_.counters();
    if (c.live_allocations != 0 || c.live_bytes != 0 || c.live_registrations != 0)
      fail("the backend's record is not empty after freeing everything: " + std::to_string(c.live_allocations) +
           " allocations, " + std::to_string(c.live_bytes) + " bytes, " + std::to_string(c.live_registrations) +
           " registrations");
  }

  DevicePtr pointer(Reader& in) const {
    const std::uint8_t s = in.u8();
    if (s < 0xC0) {
      const auto offset = static_cast<std::int16_t>(in.u16());
      const DevicePtr base = known_.empty() ? device(arena_.data()) : known_[s % known_.size()];
      return base + static_cast<u64>(static_cast<std::int64_t>(offset));
    }
    if (s < 0xE0) return 0;
    return in.u64v();
  }

  void remember(DevicePtr p) {
    if (known_.size() < kMaxKnown) known_.push_back(p);
  }

  // ---- the rules (gpu_backend.hpp), from the harness's own record
  bool operand_ok(DevicePtr p, u64 bytes, bool write) const {
    if (bytes == 0) return true;
    if (p == 0 || u128{p} + bytes > kMax64) return false;
    if (write)
      for (const Registration& r : registrations_)
        if (r.read_only && overlap(r.ptr, r.bytes, p, bytes)) return false;
    for (const Allocation& a : allocations_)
      if (inside(a.ptr, a.bytes, p, bytes)) return true;
    for (const Registration& r : registrations_)
      if ((!write || !r.read_only) && inside(r.ptr, r.bytes, p, bytes)) return true;
    return false;
  }

  // ---- the check after every operation: everything the harness can see
  // holds what it must
  void verify(const char* after) const {
    for (const Allocation& a : allocations_)
      if (a.bytes != 0 && std::memcmp(host(a.ptr), a.shadow.data(), a.bytes) != 0)
        fail(std::string("after ") + after + ": allocation " + hex(a.ptr) + " (+" + std::to_string(a.bytes) +
             ") changed outside what the operation may write" + first_difference(host(a.ptr), a.shadow));
    if (arena_ != arena_shadow_)
      fail(std::string("after ") + after + ": the host arena changed outside what the operation may write" +
           first_difference(arena_.data(), arena_shadow_));
  }

  // The operation wrote [p, +bytes) (inside one allocation or registration):
  // take those bytes into the shadows, whatever they are.
  void accept_write(DevicePtr p, u64 bytes) {
    if (bytes == 0) return;
    for (Allocation& a : allocations_)
      if (inside(a.ptr, a.bytes, p, bytes)) std::memcpy(a.shadow.data() + (p - a.ptr), host(p), bytes);
    if (inside(device(arena_.data()), kArena, p, bytes))
      std::memcpy(arena_shadow_.data() + (p - device(arena_.data())), host(p), bytes);
  }
  // The shadow bytes at [p, +bytes), from wherever the harness keeps them.
  std::vector<std::byte> shadow_bytes(DevicePtr p, u64 bytes) const {
    std::vector<std::byte> out(bytes);
    if (bytes == 0) return out;
    for (const Allocation& a : allocations_)
      if (inside(a.ptr, a.bytes, p, bytes)) {
        std::memcpy(out.data(), a.shadow.data() + (p - a.ptr), bytes);
        return out;
      }
    if (inside(device(arena_.data()), kArena, p, bytes)) {
      std::memcpy(out.data(), arena_shadow_.data() + (p - device(arena_.data())), bytes);
      return out;
    }
    fail("shadow_bytes of a range the harness does not hold: " + hex(p));
  }
  void write_shadow(DevicePtr p, std::span<const std::byte> bytes) {
    if (bytes.empty()) return;
    for (Allocation& a : allocations_)
      if (inside(a.ptr, a.bytes, p, bytes.size()))
        std::memcpy(a.shadow.data() + (p - a.ptr), bytes.data(), bytes.size());
    if (inside(device(arena_.data()), kArena, p, bytes.size()))
      std::memcpy(arena_shadow_.data() + (p - device(arena_.data())), bytes.data(), bytes.size());
  }

  // ---- operations
  void allocate(u64 bytes, u64 alignment) {
    if (allocations_.size() >= kMaxLive) return;
    auto ptr = gpu_.allocate(bytes, alignment);
    // The CPU backend's own limits: alignment up to 2^30, any size here.
    const bool expected = alignment != 0 && (alignment & (alignment - 1)) == 0 && alignment <= (u64{1} << 30);
    if (ptr.ok() != expected)
      fail("allocate(" + std::to_string(bytes) + ", alignment " + std::to_string(alignment) + ") " +
           (ptr.ok() ? "succeeded" : "failed: " + ptr.error().to_string()));
    if (!ptr.ok()) return;
    if (*ptr % alignment != 0) fail("allocate returned " + hex(*ptr) + ", not aligned to " + std::to_string(alignment));
    for (const Allocation& a : allocations_)
      if (overlap(a.ptr, std::max<u64>(a.bytes, 1), *ptr, std::max<u64>(bytes, 1)))
        fail("allocate returned " + hex(*ptr) + ", overlapping the live allocation " + hex(a.ptr));
    Allocation a{*ptr, bytes, std::vector<std::byte>(bytes)};
    fill(a.shadow, seed_ + static_cast<std::uint32_t>(known_.size()));
    if (bytes != 0) std::memcpy(host(a.ptr), a.shadow.data(), bytes);
    allocations_.push_back(std::move(a));
    remember(*ptr);
  }

  void free(DevicePtr p) {
    const auto it =
        std::find_if(allocations_.begin(), allocations_.end(), [&](const Allocation& a) { return a.ptr == p; });
    const ballast::Status s = gpu_.free(p);
    check_verdict(s, it != allocations_.end(), "free(" + hex(p) + ")");
    if (s.ok()) allocations_.erase(it);
  }

  void register_host(u64 offset, u64 length, std::uint8_t flags) {
    offset %= kArena + 1;
    length %= kArena - offset + 1;
    const bool read_write = (flags & 1) != 0;
    const std::byte* p = (flags & 2) != 0 ? nullptr : arena_.data() + offset;
    auto r =
        gpu_.register_host(p, length, read_write ? ballast::HostAccess::read_write : ballast::HostAccess::read_only);
    check_verdict(r.status(), p != nullptr && length != 0, "register_host(+" + std::to_string(length) + ")");
    if (!r.ok()) return;
    if (*r != device(p)) fail("the cpu backend registered " + hex(device(p)) + " as " + hex(*r));
    registrations_.push_back({*r, length, !read_write});
    remember(*r);
  }

  void unregister_host(DevicePtr p) {
    // The most recent registration starting at p is the one ended.
    auto it = registrations_.end();
    for (auto i = registrations_.begin(); i != registrations_.end(); ++i)
      if (i->ptr == p) it = i;
    const ballast::Status s = gpu_.unregister_host(p);
    check_verdict(s, it != registrations_.end(), "unregister_host(" + hex(p) + ")");
    if (s.ok()) registrations_.erase(it);
  }

  void copy_to_device(DevicePtr dst, u64 offset, u64 length, std::uint8_t seed) {
    std::vector<std::byte> src(length);
    fill(src, seed);
    const ballast::Status s = gpu_.copy_to_device(dst, offset, src);
    const u128 to = u128{dst} + offset;
    const bool expected = to <= kMax64 && operand_ok(static_cast<u64>(to), length, true);
    check_verdict(
        s, expected,
        "copy_to_device(" + hex(dst) + " + " + std::to_string(offset) + ", " + std::to_string(length) + " bytes)");
    if (s.ok()) write_shadow(static_cast<u64>(to), src);
  }

  void copy_to_host(DevicePtr src, u64 offset, u64 length) {
    constexpr std::size_t kGuard = 64;
    std::vector<std::byte> buffer(length + 2 * kGuard, std::byte{0xA5});
    const std::span<std::byte> dst(buffer.data() + kGuard, length);
    const ballast::Status s = gpu_.copy_to_host(dst, src, offset);
    const u128 from = u128{src} + offset;
    const bool expected = from <= kMax64 && operand_ok(static_cast<u64>(from), length, false);
    check_verdict(
        s, expected,
        "copy_to_host(" + hex(src) + " + " + std::to_string(offset) + ", " + std::to_string(length) + " bytes)");
    for (std::size_t i = 0; i < kGuard; ++i)
      if (buffer[i] != std::byte{0xA5} || buffer[kGuard + length + i] != std::byte{0xA5})
        fail("copy_to_host wrote outside its destination span");
    if (!s.ok()) {
      for (std::byte b : dst)
        if (b != std::byte{0xA5}) fail("a refused copy_to_host wrote its destination");
      return;
    }
    if (std::vector<std::byte>(dst.begin(), dst.end()) != shadow_bytes(static_cast<u64>(from), length))
      fail("copy_to_host returned other bytes than the device holds");
  }

  void copy_device(DevicePtr dst, u64 dst_offset, DevicePtr src, u64 src_offset, u64 bytes) {
    const ballast::Status s = gpu_.copy_device(dst, dst_offset, src, src_offset, bytes);
    const u128 to = u128{dst} + dst_offset, from = u128{src} + src_offset;
    const bool expected = to <= kMax64 && from <= kMax64 && operand_ok(static_cast<u64>(from), bytes, false) &&
                          operand_ok(static_cast<u64>(to), bytes, true) &&
                          !overlap(static_cast<u64>(to), bytes, static_cast<u64>(from), bytes);
    check_verdict(s, expected,
                  "copy_device(" + hex(dst) + " + " + std::to_string(dst_offset) + " <- " + hex(src) + " + " +
                      std::to_string(src_offset) + ", " + std::to_string(bytes) + " bytes)");
    if (s.ok()) write_shadow(static_cast<u64>(to), shadow_bytes(static_cast<u64>(from), bytes));
  }

  void launch(const DerivationLaunch& l) {
    const auto sizes = checked_sizes(l);
    const ballast::Status s = gpu_.launch(l);
    const bool expected = sizes && launch_ok(l, *sizes);
    check_verdict(s, expected, "launch " + describe(l));
    if (!s.ok() || (sizes->dst_bytes == 0 && sizes->dst2_bytes == 0)) return;
    // The outputs must be the reference's, computed from the inputs'
    // shadows (the launch may not have changed them: verify() says).
    const auto src = shadow_bytes(l.src, sizes->src_bytes);
    const auto scales = shadow_bytes(l.scales, sizes->scales_bytes);
    const auto zero_points = shadow_bytes(l.zero_point, sizes->zero_point_bytes);
    auto expected_out = ballast::reference::derive(l, {src, scales, zero_points});
    if (!expected_out.ok()) fail("the reference refused " + describe(l) + ": " + expected_out.error().to_string());
    const std::span<const std::byte> dst(host(l.dst), sizes->dst_bytes), dst2(host(l.dst2), sizes->dst2_bytes);
    ballast::reference::Tolerance tol;
    tol.flushes_f16_subnormals = gpu_.capabilities().flushes_f16_subnormals;
    tol.int8_codes_within_one = gpu_.capabilities().int8_codes_within_one;
    const auto cmp = ballast::reference::compare(l, *expected_out, dst, dst2, tol);
    if (!cmp.ok) fail(describe(l) + " differs from the reference: " + cmp.message);
    accept_write(l.dst, sizes->dst_bytes);
    accept_write(l.dst2, sizes->dst2_bytes);
  }

  void synchronize() {
    if (const ballast::Status s = gpu_.synchronize(); !s.ok()) fail("synchronize: " + s.error().to_string());
  }

 private:
  // Alignment (check_operand_alignment, derivation.hpp), every operand
  // inside a live range, outputs sharing no byte with any other operand.
  bool launch_ok(const DerivationLaunch& l, const ballast::DerivationSizes& s) const {
    if (!gpu_.capabilities().unaligned_operands) {
      // Every operand the kind's row lists, at its element size.
      struct Align {
        DevicePtr p;
        u64 align;
      };
      std::vector<Align> rules;
      const DevicePtr ptrs[] = {l.src, l.scales, l.zero_point, l.dst, l.dst2};
      const auto& row = ballast::derivation_kind(l.kind);
      for (int i = 0; i < row.operand_count; ++i) {
        const auto& o = row.operands[i];
        if (!ballast::kinds::present(row, o, l.zero_points)) continue;
        rules.push_back({ptrs[static_cast<int>(o.slot)],
                         ballast::derivation_operand_alignment(o.launch_type ? l.src_type : o.type)});
      }
      for (const Align& a : rules)
        if (a.p % a.align != 0) return false;
    }
    struct Operand {
      DevicePtr p;
      u64 bytes;
      bool write;
    };
    const Operand ops[] = {{l.src, s.src_bytes, false},
                           {l.scales, s.scales_bytes, false},
                           {l.zero_point, s.zero_point_bytes, false},
                           {l.dst, s.dst_bytes, true},
                           {l.dst2, s.dst2_bytes, true}};
    for (const Operand& o : ops)
      if (!operand_ok(o.p, o.bytes, o.write)) return false;
    for (const Operand& out : ops) {
      if (!out.write) continue;
      for (const Operand& other : ops)
        if (&other != &out && overlap(out.p, out.bytes, other.p, other.bytes)) return false;
    }
    return true;
  }

  static void check_verdict(const ballast::Status& s, bool expected, const std::string& call) {
    if (!s.ok() && (s.code() == ballast::ErrorCode::ok || s.error().to_string().empty()))
      fail(call + ": an error without a code or words");
    if (s.ok() && !expected) fail(call + " succeeded; the rules say it must be refused");
    if (!s.ok() && expected) fail(call + " was refused: " + s.error().to_string() + "; the rules allow it");
  }

  static std::string first_difference(const std::byte* actual, const std::vector<std::byte>& shadow) {
    for (std::size_t i = 0; i < shadow.size(); ++i)
      if (actual[i] != shadow[i])
        return " (first at byte " + std::to_string(i) + ": " + std::to_string(static_cast<int>(actual[i])) +
               ", expected " + std::to_string(static_cast<int>(shadow[i])) + ")";
    return "";
  }

  GpuBackend& gpu_;
  std::uint8_t seed_;
  std::vector<std::byte> arena_;
  std::vector<std::byte> arena_shadow_;
  std::vector<Allocation> allocations_;
  std::vector<Registration> registrations_;  // in registration order
  std::vector<DevicePtr> known_;             // every pointer handed out, live or not

 public:
  DevicePtr arena() const { return device(arena_.data()); }
};

std::unique_ptr<GpuBackend> open(const char* config) {
  auto gpu = ballast::open_backend(config);
  if (!gpu.ok()) fail(std::string("cannot open ") + config + ": " + gpu.error().to_string());
  return std::move(*gpu);
}

GpuBackend& backend(bool portable) {
  // The vector kernels split launches over two threads, the portable ones
  // run on the caller alone: both tables and both paths of the pool.
  static const std::unique_ptr<GpuBackend> vector = open("cpu?threads=2&simd=on");
  static const std::unique_ptr<GpuBackend> scalar = open("cpu?threads=1&simd=off");
  return portable ? *scalar : *vector;
}

void run(GpuBackend& gpu, Reader& in) {
  std::uint64_t sizes[4];
  u64 alignments[4];
  for (int i = 0; i < 4; ++i) {
    sizes[i] = in.u16() % (kMaxAllocation + 1);
    alignments[i] = in.alignment();
  }
  World world(gpu, in.u8());
  for (int i = 0; i < 4; ++i) world.allocate(sizes[i], alignments[i]);
  world.remember(world.arena());
  {
    const u64 offset = in.u16(), length = in.u16();
    world.register_host(offset, length, 0);
  }
  world.verify("setting up");
  for (std::size_t ops = 0; ops < kMaxOps && !in.empty(); ++ops) {
    const std::uint8_t op = in.u8() % 9;
    const char* name = "";
    switch (op) {
      case 0: {
        name = "a launch";
        DerivationLaunch l;
        l.kind = static_cast<Derivation>(in.u8());
        const std::uint8_t type = in.u8();
        l.src_type = static_cast<DataType>(type >= 0xE0 ? 2000 + (type - 0xE0) : type);
        l.rows = in.count();
        l.cols = in.count();
        l.block_size = in.block_size();
        l.zero_points = static_cast<ZeroPoints>(in.u8());
        l.src = world.pointer(in);
        l.scales = world.pointer(in);
        l.zero_point = world.pointer(in);
        l.dst = world.pointer(in);
        l.dst2 = world.pointer(in);
        if (l.kind == Derivation::slice) {
          l.src_cols = in.count();
          l.col_offset = in.count();
        }
        world.launch(l);
        break;
      }
      case 1: {
        name = "copy_to_device";
        const DevicePtr dst = world.pointer(in);
        const u64 offset = in.count(), length = in.u16() % (kMaxAllocation + 1);
        world.copy_to_device(dst, offset, length, in.u8());
        break;
      }
      case 2: {
        name = "copy_to_host";
        const DevicePtr src = world.pointer(in);
        const u64 offset = in.count(), length = in.u16() % (kMaxAllocation + 1);
        world.copy_to_host(src, offset, length);
        break;
      }
      case 3: {
        name = "copy_device";
        const DevicePtr dst = world.pointer(in);
        const u64 dst_offset = in.count();
        const DevicePtr src = world.pointer(in);
        const u64 src_offset = in.count(), bytes = in.count();
        world.copy_device(dst, dst_offset, src, src_offset, bytes);
        break;
      }
      case 4: {
        name = "allocate";
        const u64 bytes = in.u16() % (kMaxAllocation + 1);
        world.allocate(bytes, in.alignment());
        break;
      }
      case 5:
        name = "free";
        world.free(world.pointer(in));
        break;
      case 6: {
        name = "register_host";
        const u64 offset = in.u16(), length = in.u16();
        world.register_host(offset, length, in.u8());
        break;
      }
      case 7:
        name = "unregister_host";
        world.unregister_host(world.pointer(in));
        break;
      case 8:
        name = "synchronize";
        world.synchronize();
        break;
    }
    world.verify(name);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)backend(false);
  (void)backend(true);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Reader in(data, size);
  const bool portable = (in.u8() & 1) != 0;
  run(backend(portable), in);
  return 0;
}
