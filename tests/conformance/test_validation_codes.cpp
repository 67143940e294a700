// The core validates every call in front of every backend (GpuBackend's
// non-virtual methods), so each refusal below must carry the same code and
// the same wording on every backend this suite runs on.
#include "conformance/conformance.hpp"

#include <ballast/derivation.hpp>

#include <string>
#include <vector>

using namespace conformance;
using ballast::DataType;
using ballast::Derivation;
using ballast::DerivationLaunch;
using ballast::ErrorCode;
using ballast::HostAccess;
using ballast::Status;
using ballast::ZeroPoints;

namespace {

struct Expect {
  ErrorCode code;
  std::string words;  // a phrase the message must hold
};

void check_refusal(const std::string& what, const Status& s, const Expect& e) {
  INFO(what << ": " << describe(s));
  CHECK_MESSAGE(s.code() == e.code, what << " gave " << describe(s));
  if (!s.ok()) CHECK_MESSAGE(s.error().message.find(e.words) != std::string::npos, what << " gave " << describe(s));
}

// int4 shapes whose every operand is larger than `small` (64 bytes):
// N=16, K=64, block 32 -> B 512, scales 128, unpacked zero points 128,
// dequant output 2048, repack pairs 128.
DerivationLaunch int4_launch(Derivation kind, DevicePtr src, DevicePtr scales, DevicePtr zp, DevicePtr dst, DevicePtr dst2) {
  DerivationLaunch l;
  l.kind = kind;
  l.src_type = DataType::float32;
  l.rows = 16;
  l.cols = 64;
  l.block_size = 32;
  l.zero_points = ZeroPoints::unpacked;
  l.src = src;
  l.scales = scales;
  l.zero_point = zp;
  l.dst = dst;
  l.dst2 = dst2;
  return l;
}

}  // namespace

TEST_CASE("validation: every operand out of range, unknown, or aliased is refused with one code on every backend") {
  LeakCheck leaks;
  DeviceBuffer src = upload(random_bytes(4096, 11));
  DeviceBuffer scales = upload(random_bytes(4096, 12));
  DeviceBuffer zp = upload(random_bytes(4096, 13));
  DeviceBuffer dst = allocate(4096);
  DeviceBuffer dst2 = allocate(4096);
  DeviceBuffer small = allocate(64);
  const DevicePtr unknown = 0xdead0000ull;

  const DerivationLaunch good = int4_launch(Derivation::repack_int4, src.ptr(), scales.ptr(), zp.ptr(), dst.ptr(), dst2.ptr());
  REQUIRE(gpu().launch(good).ok());
  REQUIRE(gpu().synchronize().ok());

  struct Operand {
    const char* name;
    DevicePtr DerivationLaunch::*field;
  };
  const Operand operands[] = {{"src", &DerivationLaunch::src},
                              {"scales", &DerivationLaunch::scales},
                              {"zero_point", &DerivationLaunch::zero_point},
                              {"dst", &DerivationLaunch::dst},
                              {"dst2", &DerivationLaunch::dst2}};
  for (const Operand& o : operands) {
    DerivationLaunch l = good;
    l.*o.field = small.ptr();
    check_refusal(std::string(o.name) + " past the end of its allocation", gpu().launch(l),
                  {ErrorCode::out_of_bounds, std::string(o.name) + " [" });
    l = good;
    l.*o.field = unknown;
    check_refusal(std::string(o.name) + " unknown", gpu().launch(l),
                  {ErrorCode::invalid_argument, "is not inside any live allocation or host registration"});
    l = good;
    l.*o.field = 0;
    check_refusal(std::string(o.name) + " null", gpu().launch(l), {ErrorCode::invalid_argument, "null device pointer"});
  }

  const Expect aliasing{ErrorCode::invalid_argument, "outputs must not alias any operand"};
  DerivationLaunch l = good;
  l.dst = src.ptr();
  check_refusal("dst over src", gpu().launch(l), aliasing);
  l = good;
  l.dst2 = scales.ptr();
  check_refusal("dst2 over scales", gpu().launch(l), aliasing);
  l = good;
  l.dst = zp.ptr();
  check_refusal("dst over zero_point", gpu().launch(l), aliasing);
  l = good;
  l.dst2 = dst.ptr() + 256;  // the repacked words span 512 bytes
  check_refusal("dst2 inside dst", gpu().launch(l), aliasing);

  DerivationLaunch t;
  t.kind = Derivation::transpose;
  t.src_type = DataType::float32;
  t.rows = 16;
  t.cols = 16;  // 1 KiB
  t.src = src.ptr();
  t.dst = src.ptr() + 512;
  check_refusal("transpose onto its own source, shifted", gpu().launch(t), aliasing);

  // The backend is still usable and nothing ran.
  CHECK(gpu().launch(good).ok());
  CHECK(gpu().synchronize().ok());
}

TEST_CASE("validation: outputs and copies into a read-only registration are refused on every backend") {
  if (!gpu().capabilities().read_only_registration) {
    MESSAGE("skipped: " << gpu().info().backend << " has no read-only registration (" << gpu().capabilities().host_registration_note << ")");
    return;
  }
  LeakCheck leaks;
  // The upload first: a REQUIRE that fails between registering and the
  // unregister below would leak the registration into every later case.
  DeviceBuffer src = upload(random_bytes(4096, 22));
  std::vector<std::byte> host = random_bytes(8192, 21);
  auto reg = gpu().register_host(host.data(), host.size(), HostAccess::read_only);
  REQUIRE(reg.ok());
  const Expect read_only{ErrorCode::invalid_argument, "read-only host registration"};

  DerivationLaunch t;
  t.kind = Derivation::transpose;
  t.src_type = DataType::float32;
  t.rows = 16;
  t.cols = 16;
  t.src = src.ptr();
  t.dst = *reg;
  check_refusal("transpose into a read-only registration", gpu().launch(t), read_only);
  const std::vector<std::byte> bytes(16);
  check_refusal("copy_to_device into a read-only registration", gpu().copy_to_device(*reg, 64, bytes), read_only);
  check_refusal("copy_device into a read-only registration", gpu().copy_device(*reg, 0, src.ptr(), 0, 16), read_only);
  // Reading it is fine: a read-only registration is a source.
  t.src = *reg;
  t.dst = src.ptr();
  CHECK(gpu().launch(t).ok());
  CHECK(gpu().synchronize().ok());
  CHECK(gpu().unregister_host(*reg).ok());
  const std::vector<std::byte> back = download(src.ptr(), 4);
  CHECK(back.size() == 4);
}

TEST_CASE("validation: bad copies, frees and registrations carry one code on every backend") {
  LeakCheck leaks;
  DeviceBuffer a = allocate(256);
  DeviceBuffer b = allocate(256);
  std::vector<std::byte> host(64);
  const DevicePtr unknown = 0xdead0000ull;

  check_refusal("copy_to_device past the end", gpu().copy_to_device(a.ptr(), 224, host), {ErrorCode::out_of_bounds, "dst ["});
  check_refusal("copy_to_host past the end", gpu().copy_to_host(host, a.ptr(), 200), {ErrorCode::out_of_bounds, "src ["});
  check_refusal("copy_to_host from an unknown pointer", gpu().copy_to_host(host, unknown, 0),
                {ErrorCode::invalid_argument, "is not inside any live allocation"});
  check_refusal("copy_to_device with a wrapping offset", gpu().copy_to_device(a.ptr(), ~std::uint64_t{0} - 8, host),
                {ErrorCode::overflow, "wraps the address space"});
  check_refusal("copy_device overlapping itself", gpu().copy_device(a.ptr(), 16, a.ptr(), 0, 64),
                {ErrorCode::invalid_argument, "must not overlap"});
  check_refusal("copy_device past the end of the source", gpu().copy_device(b.ptr(), 0, a.ptr(), 128, 192),
                {ErrorCode::out_of_bounds, "src ["});
  CHECK(gpu().copy_device(b.ptr(), 0, a.ptr(), 0, 256).ok());

  check_refusal("free of an interior pointer", gpu().free(a.ptr() + 16), {ErrorCode::invalid_argument, "is not a live allocation"});
  check_refusal("free of an unknown pointer", gpu().free(unknown), {ErrorCode::invalid_argument, "is not a live allocation"});
  check_refusal("unregister of an allocation", gpu().unregister_host(a.ptr()),
                {ErrorCode::invalid_argument, "is not a live host registration"});
  check_refusal("allocate with alignment 3", gpu().allocate(64, 3).status(), {ErrorCode::invalid_argument, "not a power of two"});
  check_refusal("register a null range", gpu().register_host(nullptr, 64, HostAccess::read_write).status(),
                {ErrorCode::invalid_argument, "non-null and non-empty"});
  check_refusal("register an empty range", gpu().register_host(host.data(), 0, HostAccess::read_write).status(),
                {ErrorCode::invalid_argument, "non-null and non-empty"});

  DevicePtr freed = 0;
  {
    DeviceBuffer gone = allocate(64);
    freed = gone.ptr();
  }
  check_refusal("double free", gpu().free(freed), {ErrorCode::invalid_argument, "is not a live allocation"});
}
