// shards_in_place (issue 29): a rank's shards taken from the model it
// opened, with no load. One-range shards are the mapping's own bytes (no
// copy), the others gathered; every shard equals the plan's bytes on every
// format at 2 and 4 ranks. A rank model of them is a view of the same
// files: under Residency, on every strategy and a tight paged budget, it
// derives byte for byte what the cooperative load's shards derive (the
// row-parallel quant_int8 with the ranks' shared maxima too), with no
// host copy, and its store references exactly the rank's in-place ranges.
// A file cut under its mapping is an io error naming it on every path that
// reads; a shard set that says it is in place and is not is refused.
#include "dist/check_shards.hpp"
#include "unit/dist/ranks.hpp"
#include "unit/shard/models.hpp"

#include <ballast/backend_registry.hpp>
#include <ballast/cooperative_load.hpp>
#include <ballast/residency.hpp>

#include <filesystem>

using namespace ballast;
using namespace ballast::testing;

namespace {

bool one_range(const WeightShard& s) { return s.device_bytes > 0 && s.contiguous() && s.ranges.size() == 1; }

std::size_t check_shards_of(const Model& m, std::uint32_t world, std::size_t& gathered) {
  CAPTURE(world);
  auto plans = plan_shards_all(m, ShardSpec{world, 0, {}});
  REQUIRE_MESSAGE(plans.ok(), plans.error().to_string());
  std::size_t in_place = 0;
  for (const ShardPlan& rank : plans->ranks) {
    CAPTURE(rank.rank);
    auto shards = shards_in_place(m, rank);
    REQUIRE_MESSAGE(shards.ok(), shards.error().to_string());
    REQUIRE(shards->shards.size() == rank.weights.size());
    REQUIRE(shards->in_place.size() == rank.weights.size());
    CHECK(shards->report.rank == rank.rank);
    std::uint64_t kept = 0, read = 0;
    for (std::size_t i = 0; i < rank.weights.size(); ++i) {
      const WeightShard& s = rank.weights[i];
      CAPTURE(s.weight);
      const std::span<const std::byte> got = shards->shards[i];
      CHECK(std::vector<std::byte>(got.begin(), got.end()) == gather(m, s));
      CHECK(shards->in_place[i] == one_range(s));
      if (shards->in_place[i]) {
        // The weight's own bytes, not a copy of them.
        const Bytes whole = *m.store().bytes(m.store().weights().at(s.id));
        CHECK(got.data() >= whole.data());
        CHECK(got.data() + got.size() <= whole.data() + whole.size());
        kept += got.size();
        ++in_place;
      } else if (!got.empty()) {
        read += got.size();
        ++gathered;
      }
    }
    CHECK(shards->report.kept_bytes == kept);
    CHECK(shards->report.read_bytes == read);
    CHECK(kept + read == rank.totals.device_bytes);
  }
  return in_place;
}

struct Derived {
  std::vector<std::vector<std::byte>> values;  // in plan order, each pair's halves joined
  std::vector<std::string> skipped;
};

Derived placed_values(GpuBackend& gpu, const Model& m, const ShardPlan& rank, const RankShards& shards,
                      std::span<const PlannedDerivation> plan) {
  auto placed = place_rank(gpu, m, rank, shards, plan);
  REQUIRE_MESSAGE(placed.ok(), placed.error().to_string());
  Derived out;
  for (const RankDerivedValue& v : placed->derived)
    out.values.push_back(read_pair(gpu, v.launch.dst, v.first_bytes, v.launch.dst2, v.second_bytes));
  out.skipped = placed->skipped;
  REQUIRE(placed->release().ok());
  return out;
}

}  // namespace

TEST_CASE("shards_in_place: every shard is the plan's bytes; one-range shards are the mapping itself") {
  ScratchDir dir("dist-in-place");
  auto st = open_model(dir.write("m.safetensors", st_file(hf_tensors())));
  REQUIRE_MESSAGE(st.ok(), st.error().to_string());
  auto onnx = llm_onnx().write(dir);
  REQUIRE_MESSAGE(onnx.ok(), onnx.error().to_string());
  auto gguf = open_model(dir.write("m.gguf", gguf_of(gguf_llama())));
  REQUIRE_MESSAGE(gguf.ok(), gguf.error().to_string());
  for (std::uint32_t world : {1u, 2u, 4u}) {
    std::size_t gathered = 0;
    CHECK(check_shards_of(*st, world, gathered) > 0);
    CHECK(check_shards_of(*onnx, world, gathered) > 0);
    if (world <= 2) CHECK(check_shards_of(*gguf, world, gathered) > 0);  // its q4_0 blocks split in 2 at most
    CHECK((world == 1) == (gathered == 0));  // one rank holds every weight whole
  }
}

TEST_CASE("rank_model in place: Residency derives what the cooperative load's shards derive, on every strategy") {
  ScratchDir dir("dist-in-place-rank-model");
  auto onnx = llm_onnx().write(dir);
  REQUIRE_MESSAGE(onnx.ok(), onnx.error().to_string());
  auto st = open_model(dir.write("m.safetensors", st_file(hf_tensors())));
  REQUIRE_MESSAGE(st.ok(), st.error().to_string());
  auto gpu = open_backend("cpu");
  REQUIRE(gpu.ok());
  for (const Model* m : {&*onnx, &*st}) {
    CAPTURE(m->path().string());
    auto whole_plan = plan_derivations(*m);
    REQUIRE_MESSAGE(whole_plan.ok(), whole_plan.error().to_string());
    auto plans = plan_shards_all(*m, ShardSpec{2, 0, {}});
    REQUIRE(plans.ok());
    auto load = plan_cooperative_load(*m, *plans);
    REQUIRE(load.ok());
    std::vector<RankShards> loaded = load_all(*m, *plans, *load, *whole_plan);
    std::vector<RankShards> in_place = take_all(*m, *plans, *whole_plan, [&](std::uint32_t r, Communicator&) {
      return shards_in_place(*m, plans->ranks[r]);
    });
    for (std::uint32_t r = 0; r < 2; ++r) {
      CAPTURE(r);
      const ShardPlan& rank = plans->ranks[r];
      const Derived want = placed_values(**gpu, *m, rank, loaded[r], *whole_plan);
      CHECK_FALSE(want.values.empty());
      // The maxima shared from in-place shards are the loaded shards'.
      REQUIRE(in_place[r].row_maxima.size() == loaded[r].row_maxima.size());
      for (std::size_t i = 0; i < loaded[r].row_maxima.size(); ++i)
        CHECK(in_place[r].row_maxima[i].maxima == loaded[r].row_maxima[i].maxima);
      // place_rank reads in-place shards through the store: the same values.
      const Derived direct = placed_values(**gpu, *m, rank, in_place[r], *whole_plan);
      CHECK(direct.values == want.values);
      CHECK(direct.skipped == want.skipped);

      std::uint64_t in_place_file_bytes = 0;
      for (std::size_t i = 0; i < rank.weights.size(); ++i)
        if (in_place[r].in_place[i] && m->store().weights().at(rank.weights[i].id).is_external())
          in_place_file_bytes += rank.weights[i].device_bytes;
      REQUIRE(in_place_file_bytes > 0);
      auto ranked = rank_model(*m, rank, std::move(in_place[r]), *whole_plan);
      REQUIRE_MESSAGE(ranked.ok(), ranked.error().to_string());
      REQUIRE(ranked->derivations.size() == want.values.size());
      CHECK(ranked->skipped == want.skipped);
      // A view of the same files: it references its ranges, nothing else.
      const WeightStore& store = ranked->model.store();
      CHECK(store.mapping_count() == m->store().mapping_count());
      const ReferencedWeightBytes referenced = store.referenced_weight_bytes();
      CHECK(referenced.total == in_place_file_bytes);
      CHECK(store.unreferenced_external_bytes(referenced) ==
            store.mapped_external_bytes() - referenced.total - store.format_header_bytes());
      for (std::size_t i = 0; i < rank.weights.size(); ++i) {
        const WeightShard& s = rank.weights[i];
        const WeightRef& w = store.weights().at(ranked->model.weight_order()[i]);
        CHECK(w.byte_length() == s.device_bytes);
        if (one_range(s) && m->store().weights().at(s.id).is_external()) {
          REQUIRE(w.is_external());
          CHECK(store.external_mmap_provenance(w)->offset == s.ranges[0].offset);
        }
      }

      pin_on_every_strategy(**gpu, *ranked, want.values, [](ResidencyStrategy strategy, const ResidencyStats& stats) {
        CHECK(stats.host_copy_bytes == 0);
        // The one-range shards are registered where they lie in the file.
        if (strategy == ResidencyStrategy::zero_copy) CHECK(stats.registered_bytes > 0);
      });
    }
  }
}

TEST_CASE("shards_in_place: a file cut under its mapping is an io error naming it, on every path that reads") {
  ScratchDir dir("dist-in-place-cut");
  const auto path = dir.write("m.safetensors", st_file(hf_tensors()));
  auto m = open_model(path);
  REQUIRE(m.ok());
  auto plans = plan_shards_all(*m, ShardSpec{2, 0, {}});
  REQUIRE(plans.ok());
  const ShardPlan& rank = plans->ranks[0];
  auto shards = shards_in_place(*m, rank);
  REQUIRE_MESSAGE(shards.ok(), shards.error().to_string());
  auto gpu = open_backend("cpu");
  REQUIRE(gpu.ok());
  std::filesystem::resize_file(path, 64);  // inside the header: every weight's bytes are gone
  const auto names_the_file = [&](const Error& e) {
    CHECK(e.code == ErrorCode::io);
    CHECK_MESSAGE(e.to_string().find("m.safetensors") != std::string::npos, e.to_string());
  };
  auto placed = place_rank(**gpu, *m, rank, *shards);
  REQUIRE_FALSE(placed.ok());
  names_the_file(placed.error());
  auto again = shards_in_place(*m, rank);  // gathering reads the file: refused
  REQUIRE_FALSE(again.ok());
  names_the_file(again.error());
  auto ranked = rank_model(*m, rank, std::move(*shards));
  REQUIRE_MESSAGE(ranked.ok(), ranked.error().to_string());
  std::optional<ValueId> in_file;
  for (std::size_t i = 0; i < rank.weights.size(); ++i)
    if (one_range(rank.weights[i])) in_file = ranked->model.weight_order()[i];
  REQUIRE(in_file);
  ResidencyOptions o;
  o.strategy = ResidencyStrategy::paged;
  auto res = Residency::create(**gpu, ranked->model, o);
  REQUIRE_MESSAGE(res.ok(), res.error().to_string());
  auto pinned = (*res)->pin(*in_file);
  REQUIRE_FALSE(pinned.ok());
  names_the_file(pinned.error());
  REQUIRE((*res)->release(**gpu).status.ok());
}

TEST_CASE("shards_in_place: shards that say they are in place and are not are refused") {
  ScratchDir dir("dist-in-place-forged");
  auto m = open_model(dir.write("m.safetensors", st_file(hf_tensors())));
  REQUIRE(m.ok());
  auto plans = plan_shards_all(*m, ShardSpec{2, 0, {}});
  REQUIRE(plans.ok());
  auto gpu = open_backend("cpu");
  REQUIRE(gpu.ok());
  auto shards = shards_in_place(*m, plans->ranks[0]);
  REQUIRE(shards.ok());
  // A gathered copy marked in place (it is the host's memory, not the file's).
  RankShards forged = std::move(*shards);
  std::size_t copy = forged.shards.size();
  for (std::size_t i = 0; i < forged.shards.size(); ++i)
    if (!forged.in_place[i] && !forged.shards[i].empty()) copy = i;
  REQUIRE(copy < forged.shards.size());
  forged.in_place[copy] = true;
  auto placed = place_rank(**gpu, *m, plans->ranks[0], forged);
  REQUIRE_FALSE(placed.ok());
  CHECK(placed.error().code == ErrorCode::invalid_argument);
  CHECK_MESSAGE(placed.error().to_string().find(plans->ranks[0].weights[copy].weight) != std::string::npos,
                placed.error().to_string());
  forged.in_place[copy] = false;
  // A one-range shard that is a copy (the cooperative load's) marked in place.
  auto comm = make_local_communicators(1);
  REQUIRE(comm.ok());
  auto one = plan_shards_all(*m, ShardSpec{1, 0, {}});
  REQUIRE(one.ok());
  auto one_load = plan_cooperative_load(*m, *one);
  REQUIRE(one_load.ok());
  auto loaded = cooperative_load(*m, *one, *one_load, *(*comm)[0]);
  REQUIRE_MESSAGE(loaded.ok(), loaded.error().to_string());
  loaded->in_place.assign(loaded->shards.size(), true);  // every shard of a world of 1 is one range
  auto copied = place_rank(**gpu, *m, one->ranks[0], *loaded);
  REQUIRE_FALSE(copied.ok());
  CHECK(copied.error().code == ErrorCode::invalid_argument);
  CHECK_MESSAGE(copied.error().to_string().find("said to be in place") != std::string::npos, copied.error().to_string());
  forged.in_place.pop_back();  // a count that is not the shards'
  auto ranked = rank_model(*m, plans->ranks[0], std::move(forged));
  REQUIRE_FALSE(ranked.ok());
  CHECK(ranked.error().code == ErrorCode::invalid_argument);
}

TEST_CASE("shards_in_place: a plan of another file, or of an overflowing view, is refused, not read") {
  ScratchDir dir("dist-in-place-hostile-plan");
  auto m = open_model(dir.write("m.safetensors", st_file(hf_tensors())));
  REQUIRE(m.ok());
  auto plans = plan_shards_all(*m, ShardSpec{2, 0, {}});
  REQUIRE(plans.ok());
  // A one-range shard whose plan counts its bytes in another mapping.
  ShardPlan other_file = plans->ranks[0];
  std::size_t one = other_file.weights.size(), strided = one;
  for (std::size_t i = 0; i < other_file.weights.size(); ++i) {
    if (one_range(other_file.weights[i])) one = i;
    if (!other_file.weights[i].strided.empty() && other_file.weights[i].strided[0].rows > 1) strided = i;
  }
  REQUIRE(one < other_file.weights.size());
  REQUIRE(strided < other_file.weights.size());
  other_file.weights[one].mapping = MappingId{99};
  auto refused = shards_in_place(*m, other_file);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code == ErrorCode::invalid_argument);
  CHECK_MESSAGE(refused.error().to_string().find(other_file.weights[one].weight) != std::string::npos,
                refused.error().to_string());
  // A strided view whose rows' span overflows 64 bits.
  ShardPlan huge = plans->ranks[0];
  huge.weights[strided].strided[0].row_stride = std::uint64_t{1} << 62;
  auto overflow = shards_in_place(*m, huge);
  REQUIRE_FALSE(overflow.ok());
  CHECK(overflow.error().code == ErrorCode::overflow);
  // A shard whose device_bytes is fewer than its views hold: refused before
  // a byte is gathered past it (the arena is sized from device_bytes).
  ShardPlan short_shard = plans->ranks[0];
  short_shard.weights[strided].device_bytes -= 1;
  auto cut = shards_in_place(*m, short_shard);
  REQUIRE_FALSE(cut.ok());
  CHECK(cut.error().code == ErrorCode::out_of_bounds);
  CHECK_MESSAGE(
      cut.error().to_string().find("a view of the plan lies outside the weight or its shard") != std::string::npos,
      cut.error().to_string());
}

// The gathered shards share one arena, each 64-byte aligned: every span
// lies inside it, one after another, never past its end.
TEST_CASE("shards_in_place: gathered shards lie inside their arena, aligned, without overlap") {
  ScratchDir dir("dist-in-place-arena");
  auto m = open_model(dir.write("m.safetensors", st_file(hf_tensors())));
  REQUIRE(m.ok());
  auto plans = plan_shards_all(*m, ShardSpec{2, 0, {}});
  REQUIRE(plans.ok());
  auto shards = shards_in_place(*m, plans->ranks[0]);
  REQUIRE_MESSAGE(shards.ok(), shards.error().to_string());
  const std::byte* begin = shards->memory.data();
  const std::byte* end = begin + shards->memory.size();
  const std::byte* next = begin;
  std::size_t gathered = 0;
  for (std::size_t i = 0; i < shards->shards.size(); ++i) {
    if (shards->in_place[i] || shards->shards[i].empty()) continue;
    const std::span<std::byte> s = shards->shards[i];
    CAPTURE(i);
    CHECK(s.data() == next);  // packed: the next 64-byte boundary after the one before
    CHECK(s.data() + s.size() <= end);
    CHECK(reinterpret_cast<std::uintptr_t>(s.data()) % 64 == 0);
    next = s.data() + (s.size() + 63) / 64 * 64;
    ++gathered;
  }
  CHECK(gathered > 0);
  CHECK(static_cast<std::uint64_t>(next - begin) == shards->memory.size());
}

TEST_CASE("a plan naming a weight the model lacks is not_found, naming it, on every reader of its offsets") {
  // shard::shard_source is where gather_launch, in_place_range and the
  // in-place gather find the weight and the base of its offsets: each
  // refuses a shard whose id the model does not hold, by the shard's name.
  ScratchDir dir("dist-in-place-no-weight");
  auto m = open_model(dir.write("m.safetensors", st_file(hf_tensors())));
  REQUIRE(m.ok());
  auto plans = plan_shards_all(*m, ShardSpec{2, 0, {}});
  REQUIRE(plans.ok());
  const ValueId missing{0xfffffff0u};
  REQUIRE(m->store().weights().find(missing) == m->store().weights().end());
  bool one = false, strided = false;
  for (std::size_t i = 0; i < plans->ranks[0].weights.size(); ++i) {
    ShardPlan rank = plans->ranks[0];
    WeightShard& s = rank.weights[i];
    if (!one_range(s) && s.strided.empty()) continue;
    CAPTURE(s.weight);
    s.id = missing;
    auto refused = shards_in_place(*m, rank);  // in_place_range or the gather
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error().code == ErrorCode::not_found);
    CHECK_MESSAGE(refused.error().to_string().find(s.weight) != std::string::npos, refused.error().to_string());
    if (!s.strided.empty()) {
      auto l = gather_launch(*m, s, 0, 0x1000);
      REQUIRE_FALSE(l.ok());
      CHECK(l.code() == ErrorCode::not_found);
      CHECK_MESSAGE(l.error().to_string().find(s.weight) != std::string::npos, l.error().to_string());
    }
    (s.strided.empty() ? one : strided) = true;
  }
  CHECK(one);
  CHECK(strided);
}

TEST_CASE("share_row_maxima: in-place shards with a miscounted flag list are refused, not read") {
  ScratchDir dir("dist-in-place-maxima");
  auto m = llm_onnx().write(dir);
  REQUIRE(m.ok());
  auto plan = plan_derivations(*m);
  REQUIRE(plan.ok());
  auto plans = plan_shards_all(*m, ShardSpec{1, 0, {}});
  REQUIRE(plans.ok());
  auto shards = shards_in_place(*m, plans->ranks[0]);
  REQUIRE(shards.ok());
  shards->in_place.resize(1);  // a count that is not the shards'
  auto comm = make_local_communicators(1);
  REQUIRE(comm.ok());
  const Status s = share_row_maxima(*m, plans->ranks[0], *shards, *plan, *(*comm)[0]);
  REQUIRE_FALSE(s.ok());
  CHECK(s.code() == ErrorCode::invalid_argument);
}

// read_shard()'s own bounds, for callers that did not run check_shards: an
// index the shard set holds and the plan does not, or the reverse, is
// refused, its bytes never handed on.
TEST_CASE("read_shard: an index past the plan's weights or past the shard set's shards is refused") {
  const Model none;
  ShardPlan rank;
  rank.weights.resize(1);
  std::vector<std::byte> bytes(16);
  RankShards shards;
  shards.shards = {std::span(bytes).first(8), std::span(bytes).subspan(8)};  // one more than the plan
  int handed = 0;
  const auto sink = [&](Bytes b) {
    ++handed;
    CHECK(b.size() == 8);
    return Status();
  };
  CHECK(dist::read_shard(none, rank, shards, 0, sink).ok());
  CHECK(handed == 1);
  for (std::size_t i : {std::size_t{1}, std::size_t{2}}) {
    CAPTURE(i);
    const Status s = dist::read_shard(none, rank, shards, i, sink);
    CHECK(s.code() == ErrorCode::invalid_argument);
    CHECK_MESSAGE(s.to_string().find("the shard set has no shard " + std::to_string(i)) != std::string::npos,
                  s.to_string());
  }
  rank.weights.resize(3);  // now the plan names one more than the set holds
  CHECK(dist::read_shard(none, rank, shards, 2, sink).code() == ErrorCode::invalid_argument);
  CHECK(handed == 1);
}
