// ReadPlan::of: what a cold read fetches. Only the bytes weights point at,
// per mapped file, merged where they touch so that one long read replaces
// many short ones, and split where nothing points (an orphaned prefix, an
// unreferenced tensor, padding), so that dead bytes never cost a read.
#include <ballast/read_plan.hpp>

#include "store/byte_ranges.hpp"
#include "store/store_access.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <unordered_set>

namespace ballast {

namespace {

// Builds the plan from the chosen weights: `take` is called once per
// weight of the store; those it accepts are planned.
template <class Chosen>
void build(const WeightStore& store, Chosen&& chosen, std::vector<ReadPlanFile>& files,
           std::vector<ReadPlanWeight>& weights, std::uint64_t& bytes) {
  // Ranges per mapping, kept in mapping-id order by the ordered map.
  std::map<MappingId, std::vector<ByteRange>> ranges;
  chosen([&](ValueId id, const WeightRef& ref) {
    // Inline weights (and anything the store cannot place) have no
    // provenance: they live in the model file and are not part of a cold read.
    const auto where = store.external_mmap_provenance(ref);
    // A weight of no bytes reads nothing and has nothing to place.
    if (!where || where->length == 0) return;
    ranges[where->mapping].push_back({where->offset, where->length});
    weights.push_back({id, where->mapping, where->offset, where->length});
  });
  for (auto& [mapping, list] : ranges) {
    const auto file = store::StoreAccess::mapping(store, mapping);
    if (!file) continue;  // provenance named it, so it exists; stay safe regardless
    ReadPlanFile out;
    out.mapping = mapping;
    out.path = file->path();
    out.file_bytes = file->size();
    // merge_ranges joins ranges that overlap and those that touch end to
    // start: a read never stops at a boundary no dead byte marks.
    for (const ByteRange& r : store::merge_ranges(std::move(list), file->size())) {
      out.ranges.push_back({r.offset, r.length});
      out.read_bytes += r.length;
    }
    bytes += out.read_bytes;
    files.push_back(std::move(out));
  }
  // By (mapping, offset), then id, so the order does not depend on the
  // store's hash order: equal plans compare and print the same.
  std::sort(weights.begin(), weights.end(), [](const ReadPlanWeight& a, const ReadPlanWeight& b) {
    if (a.mapping != b.mapping) return a.mapping < b.mapping;
    if (a.offset != b.offset) return a.offset < b.offset;
    return a.id < b.id;
  });
}

std::string mib(std::uint64_t bytes) {
  char text[32];
  if (bytes >= (1u << 20))
    std::snprintf(text, sizeof text, "%.2f MiB", static_cast<double>(bytes) / (1u << 20));
  else
    std::snprintf(text, sizeof text, "%llu bytes", static_cast<unsigned long long>(bytes));
  return text;
}

}  // namespace

ReadPlan ReadPlan::of(const WeightStore& store) {
  ReadPlan plan;
  build(
      store,
      [&](auto&& take) {
        for (const auto& [id, ref] : store.weights()) take(id, ref);
      },
      plan.files_, plan.weights_, plan.bytes_);
  return plan;
}

ReadPlan ReadPlan::of(const WeightStore& store, std::span<const ValueId> weights) {
  ReadPlan plan;
  build(
      store,
      [&](auto&& take) {
        std::unordered_set<ValueId> seen;  // a repeated id counts once
        for (ValueId id : weights) {
          if (!seen.insert(id).second) continue;
          const auto it = store.weights().find(id);
          if (it != store.weights().end()) take(id, it->second);
        }
      },
      plan.files_, plan.weights_, plan.bytes_);
  return plan;
}

ReadPlan ReadPlan::only(std::span<const ReadPlanFile> keep) const {
  ReadPlan out;
  for (const ReadPlanFile& f : files_) {
    const auto k = std::find_if(keep.begin(), keep.end(), [&](const ReadPlanFile& x) { return x.mapping == f.mapping; });
    if (k == keep.end()) continue;
    ReadPlanFile kept{f.mapping, f.path, f.file_bytes, 0, {}};
    // Both lists are sorted and non-overlapping: one merge-like walk.
    std::size_t j = 0;
    for (const ReadRange& r : f.ranges) {
      while (j < k->ranges.size() && k->ranges[j].offset + k->ranges[j].length <= r.offset) ++j;
      for (std::size_t i = j; i < k->ranges.size() && k->ranges[i].offset < r.offset + r.length; ++i) {
        const std::uint64_t lo = std::max(r.offset, k->ranges[i].offset);
        const std::uint64_t hi = std::min(r.offset + r.length, k->ranges[i].offset + k->ranges[i].length);
        if (lo >= hi) continue;
        if (!kept.ranges.empty() && kept.ranges.back().offset + kept.ranges.back().length == lo)
          kept.ranges.back().length += hi - lo;  // touching: one read
        else
          kept.ranges.push_back({lo, hi - lo});
        kept.read_bytes += hi - lo;
      }
    }
    if (kept.read_bytes == 0) continue;
    out.bytes_ += kept.read_bytes;
    for (const ReadPlanWeight& w : weights_) {
      if (w.mapping != f.mapping) continue;
      // The first kept range that ends after the weight starts.
      const auto r = std::partition_point(kept.ranges.begin(), kept.ranges.end(),
                                          [&](const ReadRange& x) { return x.offset + x.length <= w.offset; });
      if (r != kept.ranges.end() && r->offset < w.offset + w.length) out.weights_.push_back(w);
    }
    out.files_.push_back(std::move(kept));
  }
  return out;
}

std::uint64_t ReadPlan::range_count() const noexcept {
  std::uint64_t n = 0;
  for (const ReadPlanFile& f : files_) n += f.ranges.size();
  return n;
}

std::string ReadPlan::to_string() const {
  std::string out = std::to_string(files_.size()) + (files_.size() == 1 ? " file, " : " files, ") +
                    std::to_string(range_count()) + (range_count() == 1 ? " range, " : " ranges, ") + mib(bytes_) +
                    " to read";
  for (const ReadPlanFile& f : files_) {
    out += "\n  " + f.path.string() + ": " + std::to_string(f.ranges.size()) +
           (f.ranges.size() == 1 ? " range, " : " ranges, ") + mib(f.read_bytes) + " of " + mib(f.file_bytes);
  }
  return out;
}

}  // namespace ballast
