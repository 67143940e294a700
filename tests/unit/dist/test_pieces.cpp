// The pieces' arithmetic (core/dist/pieces.cpp) against a byte-by-byte
// count: random ranges and strided views, cut by random stretches, and
// ReadPlan::only against the same walk over the plan and the kept ranges.
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

TEST_CASE("ReadPlan::only: exactly the plan's bytes inside the kept ranges, touching ones joined") {
  ScratchDir dir("dist-only");
  auto m = open_model(dir.write("m.safetensors", st_file(hf_tensors())));
  REQUIRE_MESSAGE(m.ok(), m.error().to_string());
  const ReadPlan whole = ReadPlan::of(m->store());
  REQUIRE(whole.files().size() == 1);
  const ReadPlanFile& file = whole.files()[0];
  const std::uint64_t end = file.file_bytes;
  std::vector<int> in_plan(end, 0);
  for (const ReadRange& r : file.ranges)
    for (std::uint64_t b = 0; b < r.length; ++b) in_plan[r.offset + b] = 1;
  std::mt19937_64 rng(7);
  for (int round = 0; round < 200; ++round) {
    // Random sorted, non-overlapping kept ranges (some touching).
    ReadPlanFile keep{file.mapping, {}, 0, 0, {}};
    std::vector<int> kept(end, 0);
    for (std::uint64_t at = rng() % 64; at < end;) {
      const std::uint64_t n = 1 + rng() % 300;
      const std::uint64_t len = std::min(n, end - at);
      keep.ranges.push_back({at, len});
      for (std::uint64_t b = 0; b < len; ++b) kept[at + b] = 1;
      at += len + (rng() % 3 == 0 ? 0 : rng() % 200);
    }
    const ReadPlan got = whole.only(std::span(&keep, 1));
    std::vector<int> seen(end, 0);
    std::uint64_t want_bytes = 0;
    for (std::uint64_t b = 0; b < end; ++b) want_bytes += in_plan[b] & kept[b];
    CHECK(got.bytes() == want_bytes);
    for (const ReadPlanFile& f : got.files()) {
      CHECK(f.mapping == file.mapping);
      for (std::size_t i = 0; i < f.ranges.size(); ++i) {
        if (i > 0) CHECK(f.ranges[i - 1].offset + f.ranges[i - 1].length < f.ranges[i].offset);  // joined where touching
        for (std::uint64_t b = 0; b < f.ranges[i].length; ++b) ++seen[f.ranges[i].offset + b];
      }
    }
    for (std::uint64_t b = 0; b < end; ++b) REQUIRE(seen[b] == (in_plan[b] & kept[b]));
    for (const ReadPlanWeight& w : got.weights()) {
      bool meets = false;
      for (const ReadRange& r : got.files()[0].ranges) meets |= w.offset < r.offset + r.length && r.offset < w.offset + w.length;
      CHECK(meets);
    }
  }
  CHECK(whole.only({}).empty());
}
