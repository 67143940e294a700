// Resolving each weight's split once: the rule, the layout, the checks
// (even splits, whole blocks), and the byte geometry (resolve.hpp).
#include "shard/resolve.hpp"

#include "derive/name_pattern.hpp"
#include "shard/layout.hpp"

#include <ballast/dtype.hpp>

#include <numeric>
#include <unordered_map>

namespace ballast::shard {

namespace {

std::string dims_text(std::span<const std::uint64_t> dims) {
  std::string out = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) out += (i ? ", " : "") + std::to_string(dims[i]);
  return out + "]";
}

Error refuse(ErrorCode code, std::string message) { return make_error(code, std::move(message)); }

// The storage unit of a type along a row: a block (GGUF), a few packed
// elements (4-bit: 2 in a byte; 6-bit: 4 in 3 bytes), or one element.
struct Unit {
  std::uint64_t elements = 1;
  std::uint64_t bytes = 0;
};
std::optional<Unit> unit_of(DataType t) {
  if (auto b = dtype_block(t)) return Unit{b->elements, b->bytes};
  const unsigned bits = dtype_bits(t);
  if (bits == 0) return std::nullopt;
  const unsigned l = std::lcm(bits, 8u);
  return Unit{l / bits, l / 8};
}

std::optional<std::uint64_t> product(std::span<const std::uint64_t> dims) {
  std::uint64_t p = 1;
  for (std::uint64_t d : dims)
    if (__builtin_mul_overflow(p, d, &p)) return std::nullopt;
  return p;
}

// The parts of an axis of `size` elements (the rule's sizes, equal parts, or one).
Result<std::vector<std::uint64_t>> parts_of(const ShardRule& rule, std::uint64_t size, const std::string& axis) {
  if (!rule.parts.empty()) {
    std::uint64_t sum = 0;
    for (std::uint64_t p : rule.parts)
      if (__builtin_add_overflow(sum, p, &sum)) return refuse(ErrorCode::overflow, "the parts' sizes overflow 64 bits");
    if (sum != size) {
      std::string list;
      for (std::uint64_t p : rule.parts) list += (list.empty() ? "" : " + ") + std::to_string(p);
      return refuse(ErrorCode::invalid_argument,
                    "the parts " + list + " = " + std::to_string(sum) + " do not add up to " + axis + " (" +
                        std::to_string(size) + ")");
    }
    return rule.parts;
  }
  if (rule.equal_parts > 1) {
    if (size % rule.equal_parts != 0)
      return refuse(ErrorCode::invalid_argument, axis + " (" + std::to_string(size) + ") is not " +
                                                     std::to_string(rule.equal_parts) + " equal parts");
    return std::vector<std::uint64_t>(rule.equal_parts, size / rule.equal_parts);
  }
  return std::vector<std::uint64_t>{size};
}

// Decision (docs/distributed.md): uneven splits are refused, not padded or
// given to the last rank: an engine's kernels assume equal shards (vLLM
// refuses them too), and a refusal names what to change.
Status check_even(const std::vector<std::uint64_t>& parts, std::uint32_t world, const std::string& axis) {
  for (std::size_t j = 0; j < parts.size(); ++j)
    if (parts[j] % world != 0)
      return refuse(ErrorCode::unsupported,
                    (parts.size() > 1 ? "part " + std::to_string(j) + " of " + axis + " has " : axis + " is ") +
                        std::to_string(parts[j]) + (parts.size() > 1 ? " elements" : "") +
                        ", not a multiple of the world size " + std::to_string(world) +
                        (parts[j] < world ? " (fewer than the ranks)" : "") + ": uneven splits are refused");
  return {};
}

std::string axis_role(ShardSplit split) {
  return split == ShardSplit::row ? "input features" : split == ShardSplit::vocab ? "vocabulary" : "output features";
}

// A dense weight: the layout's axis of its stored dims.
Status plain_geometry(ResolvedWeight& r, const WeightRef& w, const Layout& l, const ShardRule& rule,
                      std::uint32_t world) {
  const int rank = static_cast<int>(w.dims.size());
  if (rank == 0) return refuse(ErrorCode::invalid_argument, "a scalar has no axis to split");
  // A Gather's axis may count from the end; -1 as in_axis means "none".
  int axis = r.split == ShardSplit::row ? l.in_axis : l.out_axis;
  if (r.split != ShardSplit::row && axis < 0) axis += rank;
  std::vector<std::uint64_t> dims;
  for (std::int64_t d : w.dims) dims.push_back(static_cast<std::uint64_t>(d));
  if (axis < 0)
    return refuse(ErrorCode::invalid_argument, "a row split needs an input-features axis; the weight is " +
                                                   dims_text(dims) + " (" + l.text + ")");
  if (axis >= rank)
    return refuse(ErrorCode::invalid_argument, "its layout (" + l.text + ") names axis " + std::to_string(axis) +
                                                   " of a weight of rank " + std::to_string(rank) + " " + dims_text(dims));
  const auto unit = unit_of(w.dtype);
  if (!unit) return refuse(ErrorCode::unsupported, std::string(dtype_name(w.dtype)) + " has no fixed width to split");
  const std::string type = w.dtype == DataType::undefined ? "?" : std::string(dtype_name(w.dtype));
  const std::string what = dtype_block(w.dtype) ? "blocks of " + std::to_string(unit->elements) + " " + type + " elements"
                                                : std::to_string(unit->elements) + " " + type + " elements per " +
                                                      std::to_string(unit->bytes) + " byte" + (unit->bytes > 1 ? "s" : "");
  const bool innermost = axis == rank - 1;
  if (dims.back() % unit->elements != 0)
    return refuse(ErrorCode::unsupported, "rows of " + std::to_string(dims.back()) + " elements are not whole " + what);
  std::vector<std::uint64_t> units = dims;
  units.back() /= unit->elements;
  const auto outer = product(std::span(units).first(static_cast<std::size_t>(axis)));
  const auto after = product(std::span(units).subspan(static_cast<std::size_t>(axis) + 1));
  std::uint64_t inner = 0, total = 0;
  if (!outer || !after || __builtin_mul_overflow(*after, unit->bytes, &inner) ||
      __builtin_mul_overflow(*outer, units[axis], &total) || __builtin_mul_overflow(total, inner, &total))
    return refuse(ErrorCode::overflow, "the weight's dims " + dims_text(dims) + " overflow 64 bits");
  if (total != r.length)
    return refuse(ErrorCode::size_mismatch, "the weight holds " + std::to_string(r.length) + " bytes, " +
                                                dims_text(dims) + " " + type + " need " + std::to_string(total));
  const std::string axis_text =
      "axis " + std::to_string(axis) + " (" + axis_role(r.split) + ") of " + dims_text(dims) + ", " + l.text;
  BALLAST_ASSIGN_OR_RETURN(std::vector<std::uint64_t> parts, parts_of(rule, dims[axis], axis_text));
  BALLAST_RETURN_IF_ERROR(check_even(parts, world, axis_text));
  if (innermost && unit->elements > 1)
    for (std::uint64_t p : parts)
      if ((p / world) % unit->elements != 0)
        return refuse(ErrorCode::unsupported,
                      "each of " + std::to_string(world) + " ranks would take " + std::to_string(p / world) + " of " +
                          std::to_string(p) + " elements along " + axis_text + ": not whole " + what);
  r.axis = axis;
  r.outer = *outer;
  r.axis_units = units[axis];
  r.inner_bytes = inner;
  for (std::uint64_t p : parts) r.part_units.push_back(innermost ? p / unit->elements : p);
  r.rank_dims = w.dims;
  r.rank_dims[static_cast<std::size_t>(axis)] = static_cast<std::int64_t>(dims[axis] / world);
  r.rank_bytes = r.outer * (r.axis_units / world) * r.inner_bytes;
  return {};
}

// MatMulNBits B, scales and zero points: the node's [N, k_blocks] grid.
Status nbits_geometry(ResolvedWeight& r, const WeightRef& w, const Layout& l, const ShardRule& rule,
                      std::uint32_t world) {
  const NbitsShape& s = *l.nbits;
  if (s.bits != 4)
    return refuse(ErrorCode::unsupported, "MatMulNBits node " + in_quotes(s.node) + " has bits=" + std::to_string(s.bits) +
                                              ": only the 4-bit layout is split");
  if (s.k == 0 || s.n == 0 || s.block_size == 0 || s.block_size % 2 != 0)
    return refuse(ErrorCode::invalid_argument, "MatMulNBits node " + in_quotes(s.node) +
                                                   " needs positive K, N and an even block_size");
  const bool packed_zp = l.role == Role::nbits_zero_points && w.dtype == DataType::uint8;
  // Bytes of one k-block in one row, and of one whole row.
  std::uint64_t block_bytes = 0, row_bytes = 0;
  if (l.role == Role::nbits_b) {
    block_bytes = s.block_size / 2;
  } else if (!packed_zp) {
    block_bytes = dtype_bits(w.dtype) / 8;
    if (block_bytes == 0 || dtype_bits(w.dtype) % 8 != 0)
      return refuse(ErrorCode::unsupported, std::string(dtype_name(w.dtype)) + " scales or zero points are not split");
  }
  if (packed_zp) row_bytes = (s.k_blocks + 1) / 2;
  else if (__builtin_mul_overflow(s.k_blocks, block_bytes, &row_bytes))
    return refuse(ErrorCode::overflow, "K and block_size overflow 64 bits");
  std::uint64_t total = 0;
  if (__builtin_mul_overflow(s.n, row_bytes, &total) || total != r.length)
    return refuse(ErrorCode::size_mismatch, "the weight holds " + std::to_string(r.length) + " bytes; N=" +
                                                std::to_string(s.n) + " rows of " + std::to_string(row_bytes) +
                                                " (K=" + std::to_string(s.k) + ", block_size " +
                                                std::to_string(s.block_size) + ") of node " + in_quotes(s.node) + " need " +
                                                std::to_string(total));
  const std::string grid = "[N=" + std::to_string(s.n) + ", K=" + std::to_string(s.k) + "] of MatMulNBits node " +
                           in_quotes(s.node) + " (block_size " + std::to_string(s.block_size) + ")";
  std::vector<std::uint64_t> view_dims = {s.n, packed_zp ? row_bytes : s.k_blocks};
  if (l.role == Role::nbits_b) view_dims.push_back(block_bytes);
  if (r.split == ShardSplit::row) {
    BALLAST_ASSIGN_OR_RETURN(std::vector<std::uint64_t> parts, parts_of(rule, s.k, "K, the input features of " + grid));
    BALLAST_RETURN_IF_ERROR(check_even(parts, world, "K, the input features of " + grid));
    // One rank of one part takes the whole row, its last k-block partial
    // when K is not a multiple of block_size: nothing is cut.
    const bool whole = world == 1 && parts.size() == 1;
    for (std::uint64_t p : parts) {
      const std::uint64_t q = p / world;
      if (whole) {
        r.part_units.push_back(view_dims[1]);
        break;
      }
      if (q % s.block_size != 0)
        return refuse(ErrorCode::unsupported, "each of " + std::to_string(world) + " ranks would take " +
                                                  std::to_string(q) + " of " + std::to_string(p) +
                                                  " input features of " + grid + ": not whole blocks");
      if (packed_zp && (q / s.block_size) % 2 != 0)
        return refuse(ErrorCode::unsupported,
                      "packed 4-bit zero points hold two k-blocks per byte; each of " + std::to_string(world) +
                          " ranks would take " + std::to_string(q / s.block_size) + " k-blocks (" + std::to_string(q) +
                          " input features) of " + grid + ": not whole bytes");
      r.part_units.push_back(packed_zp ? p / s.block_size / 2 : p / s.block_size);
    }
    r.axis = 1;
    r.outer = s.n;
    r.axis_units = view_dims[1];
    r.inner_bytes = packed_zp ? 1 : block_bytes;
  } else {
    BALLAST_ASSIGN_OR_RETURN(std::vector<std::uint64_t> parts, parts_of(rule, s.n, "N, the output features of " + grid));
    BALLAST_RETURN_IF_ERROR(check_even(parts, world, "N, the output features of " + grid));
    r.part_units = parts;
    r.axis = 0;
    r.outer = 1;
    r.axis_units = s.n;
    r.inner_bytes = row_bytes;
  }
  view_dims[static_cast<std::size_t>(r.axis)] /= world;
  r.rank_bytes = r.outer * (r.axis_units / world) * r.inner_bytes;
  // Scales and zero points stored flat keep a flat shard.
  if (w.dims.size() == 1) view_dims = {*product(view_dims)};
  r.rank_dims.clear();
  for (std::uint64_t d : view_dims) r.rank_dims.push_back(static_cast<std::int64_t>(d));
  return {};
}

}  // namespace

Result<std::vector<ResolvedWeight>> resolve_shards(const Model& model, const std::vector<ShardRule>& rules,
                                                   std::uint32_t world, std::vector<std::string>* unmatched) {
  std::vector<derive::NamePattern> patterns;
  patterns.reserve(rules.size());
  for (const ShardRule& rule : rules) {
    const std::string where = "shard rule " + in_quotes(rule.name);
    auto compiled = derive::NamePattern::compile(rule.pattern);
    if (!compiled) return std::move(compiled.error()).with_context(where);
    if (!rule.parts.empty() && rule.equal_parts > 1)
      return refuse(ErrorCode::invalid_argument, where + " gives both parts and equal_parts");
    if ((!rule.parts.empty() || rule.equal_parts > 1) && rule.split == ShardSplit::replicated)
      return refuse(ErrorCode::invalid_argument, where + " gives parts to a replicated weight");
    for (std::uint64_t p : rule.parts)
      if (p == 0) return refuse(ErrorCode::invalid_argument, where + " has a part of size 0");
    patterns.push_back(std::move(*compiled));
  }
  // The rule of each weight first: a MatMulNBits scales tensor follows its B's.
  std::unordered_map<ValueId, const ShardRule*> rule_of;
  for (ValueId id : model.weight_order()) {
    const std::string_view name = model.value_name(id);
    for (std::size_t i = 0; i < rules.size(); ++i)
      if (patterns[i].matches(name)) {
        rule_of.emplace(id, &rules[i]);
        break;
      }
  }
  // The rules that decide some weight's split (a companion's is its B's).
  std::vector<bool> used(rules.size(), false);
  const Consumers consumers(model);
  std::vector<ResolvedWeight> out;
  out.reserve(model.weight_order().size());
  for (ValueId id : model.weight_order()) {
    const WeightRef& w = model.store().weights().at(id);
    ResolvedWeight r;
    r.id = id;
    r.name = std::string(model.value_name(id));
    const Layout layout = consumers.layout_of(id, w);
    const bool companion = layout.role == Role::nbits_scales || layout.role == Role::nbits_zero_points;
    const auto found = rule_of.find(companion ? layout.nbits->b : id);
    const ShardRule* rule = found == rule_of.end() ? nullptr : found->second;
    if (rule != nullptr) used[static_cast<std::size_t>(rule - rules.data())] = true;
    r.split = rule ? rule->split : ShardSplit::replicated;
    r.rule = rule ? rule->name : "";
    r.layout = layout.text;
    r.length = w.byte_length();
    if (w.is_external()) {
      const auto where = model.store().external_mmap_provenance(w);
      if (!where) {
        Error e = refuse(ErrorCode::out_of_bounds, "its bytes are not inside a mapped file");
        e.tensor = r.name;
        return e.with_context("planning shards of weight " + in_quotes(r.name));
      }
      r.mapping = where->mapping;
      r.base = where->offset;
    }
    if (r.split == ShardSplit::replicated) {
      r.rank_dims = w.dims;
      r.rank_bytes = r.length;
      r.axis_units = 1;
      r.inner_bytes = r.length;
      r.part_units = {1};
      out.push_back(std::move(r));
      continue;
    }
    Status s;
    // Two layouts matter only where the weight is cut: at world 1 it is
    // whole whichever the first consumer's is.
    if (!layout.conflict.empty() && world > 1)
      s = refuse(ErrorCode::invalid_argument, "nodes read it with two layouts: " + layout.conflict);
    // At world 1 nothing is cut, so unknown axes do not matter: the whole
    // weight, as any other (a one-rank job loads the file).
    else if (layout.role == Role::plain && world > 1 && r.name.size() > 8 && r.name.ends_with(".qweight"))
      s = refuse(ErrorCode::unsupported,
                 "a packed int4 weight (GPTQ/AWQ) that no MatMulNBits node reads: its axes are not known; a rule with "
                 "split replicated keeps it whole");
    else if (layout.role == Role::plain)
      s = plain_geometry(r, w, layout, *rule, world);
    else
      s = nbits_geometry(r, w, layout, *rule, world);
    if (!s.ok()) {
      s.error().tensor = r.name;
      return std::move(s).with_context("planning the " + std::string(shard_split_name(r.split)) + " split of weight " +
                                       in_quotes(r.name) + " (rule " + in_quotes(r.rule) + ", world " +
                                       std::to_string(world) + ")");
    }
    out.push_back(std::move(r));
  }
  if (unmatched != nullptr)
    for (std::size_t i = 0; i < rules.size(); ++i)
      if (!used[i]) unmatched->push_back(rules[i].name);
  return out;
}

}  // namespace ballast::shard
