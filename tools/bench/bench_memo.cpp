// bench_memo: the cost of a memo hit with the full DerivationKey, the path
// every layer of every forward pass takes (target: at most 25 ns median on
// one thread). Hits cycle through 4,096 memoized keys of one derivation, so
// the probe runs out of L1 like an engine's would, not from one hot slot.
//
//   bench_memo [google benchmark flags]
#include <ballast/derived_weights.hpp>

#include <benchmark/benchmark.h>

#include <vector>

namespace {

using namespace ballast;

std::vector<DerivationKey> keys(std::size_t n, bool int4) {
  std::vector<DerivationKey> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    DerivationKey& k = out[i];
    k.source = 0x7f0000000000ull + i * 0x10000;
    k.rows = 4096;
    k.cols = 11008;
    k.src_type = int4 ? DataType::float16 : DataType::float32;
    if (int4) {
      k.block_size = 32;
      k.zero_points = ZeroPoints::packed_u4;
      k.scales = 0x7e0000000000ull + i * 0x1000;
      k.zero_point = 0x7d0000000000ull + i * 0x100;
    }
  }
  return out;
}

template <class Kind>
void hit(benchmark::State& state, Kind kind, bool int4) {
  DerivedWeights memo;
  const auto all = keys(4096, int4);
  for (std::size_t i = 0; i < all.size(); ++i) {
    if constexpr (Kind::pair) {
      (void)memo.insert_pair(kind, all[i], DerivedPair{{0x1000 + i * 64, 64}, {0x2000 + i * 64, 4}});
    } else {
      (void)memo.insert_ptr(kind, all[i], DerivedPtr{0x1000 + i * 64, 64});
    }
  }
  std::size_t i = 0;
  for (auto _ : state) {
    if constexpr (Kind::pair) {
      benchmark::DoNotOptimize(memo.get_pair(kind, all[i]));
    } else {
      benchmark::DoNotOptimize(memo.get_ptr(kind, all[i]));
    }
    i = (i + 1) & 4095;
  }
}

void hit_transpose(benchmark::State& s) { hit(s, derive::transpose, false); }
void hit_dequant_int4(benchmark::State& s) { hit(s, derive::dequant_int4, true); }
void hit_quant_int8_pair(benchmark::State& s) { hit(s, derive::quant_int8, false); }

}  // namespace

BENCHMARK(hit_transpose)->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK(hit_dequant_int4)->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK(hit_quant_int8_pair)->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK(hit_transpose)->Threads(2)->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK_MAIN();
