// The pieces' arithmetic (core/dist/pieces.cpp) against a byte-by-byte
// count: random ranges and strided views, cut by random stretches, and
// read-plan portions that cover a plan exactly once.
#include "dist/pieces.hpp"

#include "unit/shard/models.hpp"

#include <ballast/read_plan.hpp>

#include <random>

using namespace ballast;
using namespace ballast::testing;

TEST_CASE("pieces: runs inside a stretch are exactly the bytes a byte-by-byte walk finds, in order") {
  std::mt19937_64 rng(29);
  for (int round = 0; round < 300; ++round) {
    // One rank's shards over a 4 KiB file: ranges and strided views that
    // may interleave (fused parts do).
    ShardPlan plan;
    const int count = 1 + static_cast<int>(rng() % 4);
    for (int i = 0; i < count; ++i) {
      WeightShard s;
      s.mapping = 0;
      if (rng() % 2 == 0) {
        const std::uint64_t off = rng() % 3000, len = 1 + rng() % 900;
        s.ranges.push_back({off, len});
        s.device_bytes = len;
      } else {
        const std::uint64_t row = 1 + rng() % 16, stride = row + rng() % 24, rows = 1 + rng() % 40;
        s.strided.push_back({rng() % 2000, row, stride, rows});
        s.device_bytes = row * rows;
      }
      plan.weights.push_back(s);
    }
    const dist::RankPieces pieces = dist::pieces_of(plan);
    REQUIRE(pieces.files.size() == 1);
    const dist::FilePieces& file = pieces.files.at(0);
    const std::uint64_t lo = rng() % 4096, hi = lo + rng() % 2048;
    // Expected: for each shard in piece order, the destinations of its
    // bytes inside [lo, hi), walking every byte.
    std::vector<std::pair<std::uint64_t, std::uint64_t>> want;  // (shard, dest) per byte, in visit order
    for (const dist::Piece& p : file.pieces)
      for (std::uint64_t row = 0; row < p.rows; ++row)
        for (std::uint64_t b = 0; b < p.row_bytes; ++b) {
          const std::uint64_t at = p.offset + row * p.row_stride + b;
          if (at >= lo && at < hi) want.push_back({p.shard, p.dest + row * p.row_bytes + b});
        }
    std::vector<std::pair<std::uint64_t, std::uint64_t>> got;
    dist::for_each_run(file, lo, hi, [&](const dist::Piece& p, std::uint64_t at, std::uint64_t n, std::uint64_t dest) {
      CHECK(at >= lo);
      CHECK(at + n <= hi);
      for (std::uint64_t b = 0; b < n; ++b) got.push_back({p.shard, dest + b});
    });
    REQUIRE(got == want);
    CHECK(dist::bytes_in(file, lo, hi) == want.size());
    std::uint64_t sum = 0;
    for (const dist::Piece& p : file.pieces) sum += dist::overlap(p, lo, hi);
    CHECK(sum == want.size());
  }
}

TEST_CASE("read plan portions: every byte of the plan in exactly one part, parts of equal size") {
  ScratchDir dir("dist-portion");
  auto m = open_model(dir.write("m.safetensors", st_file(hf_tensors())));
  REQUIRE_MESSAGE(m.ok(), m.error().to_string());
  const ReadPlan whole = ReadPlan::of(m->store());
  REQUIRE(whole.bytes() > 0);
  for (std::uint32_t parts : {1u, 2u, 3u, 7u, 64u, static_cast<std::uint32_t>(whole.bytes() + 5)}) {
    std::vector<int> seen;
    std::uint64_t first_offset = whole.files()[0].ranges[0].offset;
    std::uint64_t last_end = 0;
    for (const ReadRange& r : whole.files()[0].ranges) last_end = r.offset + r.length;
    seen.assign(last_end - first_offset, 0);
    std::uint64_t total = 0, smallest = UINT64_MAX, largest = 0;
    for (std::uint32_t p = 0; p < parts; ++p) {
      const ReadPlan part = whole.portion(p, parts);
      total += part.bytes();
      smallest = std::min(smallest, part.bytes());
      largest = std::max(largest, part.bytes());
      for (const ReadPlanFile& f : part.files())
        for (const ReadRange& r : f.ranges)
          for (std::uint64_t b = 0; b < r.length; ++b) ++seen[r.offset + b - first_offset];
      // Its weights: those with a byte in it.
      for (const ReadPlanWeight& w : part.weights()) {
        bool meets = false;
        for (const ReadRange& r : part.files()[0].ranges) meets |= w.offset < r.offset + r.length && r.offset < w.offset + w.length;
        CHECK(meets);
      }
    }
    CHECK(total == whole.bytes());
    CHECK(largest - smallest <= 1);
    // Exactly the plan's bytes, each once.
    std::vector<int> want(seen.size(), 0);
    for (const ReadRange& r : whole.files()[0].ranges)
      for (std::uint64_t b = 0; b < r.length; ++b) want[r.offset + b - first_offset] = 1;
    CHECK(seen == want);
  }
  CHECK(whole.portion(3, 3).empty());
}
