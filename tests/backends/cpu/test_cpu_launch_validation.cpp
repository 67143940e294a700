// launch() refuses anything that would make a kernel read or write outside
// live memory, naming the operand, before any kernel runs.
#include "cpu_test_support.hpp"

using namespace ballast;
using cpu_test::open_cpu;

namespace {

struct Fixture {
  std::unique_ptr<GpuBackend> b = open_cpu();
  DevicePtr src = 0, scales = 0, dst = 0, dst2 = 0;
  Fixture() {
    src = *b->allocate(64 * 8);
    scales = *b->allocate(64);
    dst = *b->allocate(64 * 16 * 2);
    dst2 = *b->allocate(64 * 4);
  }
  ~Fixture() {
    for (DevicePtr p : {src, scales, dst, dst2}) CHECK(b->free(p).ok());
    CHECK(b->counters().live_allocations == 0);
  }
  DerivationLaunch dequant() const {
    DerivationLaunch l;
    l.kind = Derivation::dequant_int4;
    l.src_type = DataType::float32;
    l.rows = 16;
    l.cols = 16;
    l.block_size = 16;
    l.src = src;      // 16 x 8 bytes
    l.scales = scales;  // 16 x 4 bytes
    l.dst = dst;      // 16 x 16 x 2 bytes
    return l;
  }
};

std::string error_of(const Status& s) { return s.ok() ? "ok" : s.to_string(); }

}  // namespace

TEST_CASE("a valid launch passes") {
  Fixture f;
  CHECK(f.b->launch(f.dequant()).ok());
}

TEST_CASE("shape errors come from derivation_sizes") {
  Fixture f;
  auto l = f.dequant();
  l.block_size = 12;
  CHECK(f.b->launch(l).code() == ErrorCode::invalid_argument);
  l = f.dequant();
  l.src_type = DataType::int8;
  CHECK(f.b->launch(l).code() == ErrorCode::unsupported);
  l = f.dequant();
  l.rows = 1ull << 40;
  l.cols = 1ull << 40;
  CHECK(f.b->launch(l).code() == ErrorCode::overflow);
}

TEST_CASE("every operand is range-checked and named") {
  Fixture f;
  auto l = f.dequant();
  l.scales = 0;
  Status s = f.b->launch(l);
  CHECK(s.code() == ErrorCode::invalid_argument);
  CHECK(error_of(s).find("scales is a null device pointer") != std::string::npos);
  CHECK(error_of(s).find("launch dequant_int4") != std::string::npos);

  l = f.dequant();
  l.rows = 40;  // src needs 320 bytes of its 512, scales 160 of 64
  s = f.b->launch(l);
  CHECK(s.code() == ErrorCode::out_of_bounds);
  CHECK(error_of(s).find("scales [") != std::string::npos);

  l = f.dequant();
  l.zero_points = ZeroPoints::packed_u4;  // needs a zero-point operand
  s = f.b->launch(l);
  CHECK(error_of(s).find("zero_point is a null") != std::string::npos);

  l = f.dequant();
  l.dst = 0x1000;
  s = f.b->launch(l);
  CHECK(s.code() == ErrorCode::invalid_argument);
  CHECK(error_of(s).find("dst [0x1000") != std::string::npos);

  l = f.dequant();
  l.src = f.src + 500;
  CHECK(f.b->launch(l).code() == ErrorCode::out_of_bounds);
}

TEST_CASE("outputs may not alias inputs or each other") {
  Fixture f;
  auto l = f.dequant();
  l.dst = f.src;
  l.rows = 8;  // so dst (256 bytes) fits in src's allocation
  Status s = f.b->launch(l);
  CHECK(s.code() == ErrorCode::invalid_argument);
  CHECK(error_of(s).find("overlaps src [") != std::string::npos);

  DerivationLaunch q;
  q.kind = Derivation::quant_int8;
  q.src_type = DataType::float32;
  q.rows = 2;
  q.cols = 8;
  q.src = f.src;
  q.dst = f.dst;
  q.dst2 = f.dst + 8;
  s = f.b->launch(q);
  CHECK(error_of(s).find("dst2 [") != std::string::npos);
  CHECK(error_of(s).find("overlaps dst [") != std::string::npos);
  q.dst2 = f.dst2;
  CHECK(f.b->launch(q).ok());
}

TEST_CASE("freed memory cannot be launched on") {
  auto b = open_cpu();
  auto src = b->allocate(16);
  auto dst = b->allocate(8);
  REQUIRE((src.ok() && dst.ok()));
  DerivationLaunch l;
  l.kind = Derivation::to_f16;
  l.src_type = DataType::float32;
  l.rows = 1;
  l.cols = 4;
  l.src = *src;
  l.dst = *dst;
  CHECK(b->launch(l).ok());
  CHECK(b->free(*src).ok());
  CHECK(b->launch(l).code() == ErrorCode::invalid_argument);
  CHECK(b->free(*dst).ok());
}
