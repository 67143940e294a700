// Every f32 bit pattern (2^32, NaNs included) and every bf16 through the
// Vulkan to_f16 shader on this machine's Vulkan device (lavapipe in CI),
// compared bit for bit with kernel_math's reference: proves the packet
// pipeline's branch-free rounding (normal results and zeros) and the
// integer routine it falls back to for everything else, as the driver
// compiles them. Operands are 16-byte aligned and every chunk is whole
// packets, so every input goes through the packet pipeline.
#include "support.hpp"

#include "common/kernel_math.hpp"

#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

namespace ballast::vulkan::test {
namespace {

// Reference f16 bits of inputs [first, first + n) into `out`, on both cores.
void reference(std::uint64_t first, std::size_t n, std::vector<std::uint16_t>& out) {
  auto part = [&](std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i)
      out[i] = kmath::f16_bits_from_f32(kmath::f32_from_bits(static_cast<std::uint32_t>(first + i)));
  };
  std::thread other(part, n / 2, n);
  part(0, n / 2);
  other.join();
}

}  // namespace

TEST_CASE("to_f16 on the device: every f32 and every bf16, bit for bit") {
  auto b = open();
  constexpr std::size_t kChunk = std::size_t{1} << 26;  // 256 MiB of f32 per launch, 64 launches
  auto src = b->allocate(kChunk * 4, 256);
  auto dst = b->allocate(kChunk * 2, 256);
  REQUIRE(src.ok());
  REQUIRE(dst.ok());
  auto convert = [&](DataType type, std::uint64_t rows, std::uint64_t cols) {
    DerivationLaunch l;
    l.kind = Derivation::to_f16;
    l.src_type = type;
    l.rows = rows;
    l.cols = cols;
    l.src = *src;
    l.dst = *dst;
    REQUIRE(b->launch(l).ok());
  };
  std::vector<std::uint32_t> in(kChunk);
  std::vector<std::uint16_t> want(kChunk), got(kChunk);
  std::uint64_t wrong = 0;
  for (std::uint64_t first = 0; first < (std::uint64_t{1} << 32); first += kChunk) {
    for (std::size_t i = 0; i < kChunk; ++i) in[i] = static_cast<std::uint32_t>(first + i);
    REQUIRE(b->copy_to_device(*src, 0, std::as_bytes(std::span(in))).ok());
    convert(DataType::float32, 1, kChunk);
    std::thread ref([&] { reference(first, kChunk, want); });  // overlaps the device's work
    REQUIRE(b->synchronize().ok());
    REQUIRE(b->copy_to_host(std::as_writable_bytes(std::span(got)), *dst, 0).ok());
    ref.join();
    for (std::size_t i = 0; i < kChunk; ++i) {
      if (got[i] != want[i] && wrong++ == 0)
        FAIL_CHECK("f32 bits 0x" << std::hex << first + i << ": got 0x" << got[i] << ", want 0x" << want[i]);
    }
  }
  CHECK(wrong == 0);

  std::vector<std::uint16_t> bf(65536), bf_got(65536);
  for (std::size_t i = 0; i < bf.size(); ++i) bf[i] = static_cast<std::uint16_t>(i);
  REQUIRE(b->copy_to_device(*src, 0, std::as_bytes(std::span(bf))).ok());
  convert(DataType::bfloat16, 256, 256);
  REQUIRE(b->synchronize().ok());
  REQUIRE(b->copy_to_host(std::as_writable_bytes(std::span(bf_got)), *dst, 0).ok());
  std::size_t bf_wrong = 0;
  for (std::size_t i = 0; i < bf.size(); ++i) bf_wrong += bf_got[i] != kmath::f16_bits_from_bf16_bits(bf[i]);
  CHECK(bf_wrong == 0);
  CHECK(b->free(*src).ok());
  CHECK(b->free(*dst).ok());
}

}  // namespace ballast::vulkan::test
