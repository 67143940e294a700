// `ballast inspect MODEL [--json] [--hash] [--map FILE.svg] [--world N
// [--shard-rules FILE]]`: every weight of a model, where its bytes live, how
// much of each external file is dead, the auto device budget (referenced
// source bytes + planned derivations), and with --world the tensor-parallel
// shard plan of every rank (docs/distributed.md).
#include "command.hpp"
#include "command_context.hpp"
#include "command_options.hpp"
#include "support/format.hpp"
#include "support/hash.hpp"
#include "support/model.hpp"
#include "support/progress.hpp"
#include "support/shard_report.hpp"
#include "support/shard_rules_file.hpp"
#include "support/terminal.hpp"
#include "support/svg.hpp"

#include <ballast/printable.hpp>
#include <ballast/onnx_loader.hpp>
#include <ballast/residency.hpp>
#include <ballast/cooperative_load.hpp>
#include <ballast/shard.hpp>

#include <nlohmann/json.hpp>

#include <sys/stat.h>

#include <iostream>
#include <optional>
#include <string>

namespace ballast::cli {
namespace {

struct InspectOptions {
  std::string model;
  bool json = false;
  bool hash = false;
  std::string map;
  LoadOptions load;
  double max_amplification = kDefaultMaxAmplification;
  std::uint32_t world = 0;  // --world N: print the shard plan of N ranks (0 is refused by the plan)
  bool world_given = false;
  std::string shard_rules;             // --shard-rules FILE (support/shard_rules_file.hpp)
  std::uint32_t ranks_per_domain = 0;  // --ranks-per-domain N (0: one storage domain)
};

// The shard plan --world asks for, and where its rules came from.
struct Shards {
  std::optional<ShardPlans> plans;
  std::optional<CooperativeLoadPlan> load;
  std::string rules = "built-in";
};

struct Totals {
  std::uint64_t weights = 0;
  std::uint64_t inline_weights = 0;
  std::uint64_t external_weights = 0;
  std::uint64_t weight_bytes = 0;    // sum of every weight's length (aliases counted each time)
  std::uint64_t inline_bytes = 0;
  std::uint64_t external_bytes = 0;  // declared external lengths, aliases counted each time
  std::uint64_t mapped_bytes = 0;
  std::uint64_t referenced_bytes = 0;
  std::uint64_t unreferenced_bytes = 0;
  std::uint64_t header_bytes = 0;
};

Totals totals_of(const std::vector<NamedWeight>& weights, const std::vector<FileAccounting>& files) {
  Totals t;
  for (const auto& w : weights) {
    ++t.weights;
    const std::uint64_t n = w.ref->byte_length();
    t.weight_bytes += n;
    if (w.ref->is_external()) {
      ++t.external_weights;
      t.external_bytes += n;
    } else {
      ++t.inline_weights;
      t.inline_bytes += n;
    }
  }
  for (const auto& f : files) {
    t.mapped_bytes += f.mapped_bytes;
    t.referenced_bytes += f.referenced_bytes;
    t.unreferenced_bytes += f.unreferenced_bytes;
    t.header_bytes += f.header_bytes;
  }
  return t;
}

// SHA-256 of every weight's bytes, in order; nullopt where the bytes are not
// available (a range the store refuses). The bytes are hashed inside
// WeightStore::transfer, so a file truncated meanwhile is an io error for
// that weight (its pages read as zeros, never SIGBUS), not a dead process.
// The first such error ends the hashing (`failure`): the file is no longer
// the one opened, and the error is reported once, not once per weight left.
std::vector<std::optional<std::string>> hash_weights(const WeightStore& store, const std::vector<NamedWeight>& weights,
                                                     std::optional<Error>& failure) {
  std::uint64_t total = 0;
  for (const auto& w : weights) total += w.ref->byte_length();
  ProgressBar bar("hashing", total);
  std::vector<std::optional<std::string>> out;
  out.reserve(weights.size());
  for (const auto& w : weights) {
    if (failure || !store.bytes(*w.ref)) {
      out.emplace_back();
      continue;
    }
    std::string digest;
    Status s = store.transfer(*w.ref, 0, w.ref->byte_length(), [&](Bytes bytes) -> Status {
      digest = hex_digest(Digest::sha256, bytes, [&bar](std::uint64_t n) { bar.advance(n); });
      return Status();
    });
    if (!s.ok()) {
      failure = s.error();
      failure->tensor = std::string(w.name);
      out.emplace_back();
      continue;
    }
    out.emplace_back(std::move(digest));
  }
  return out;
}

std::string_view location_kind(const WeightRef& w) { return w.is_external() ? "external" : "inline"; }

nlohmann::ordered_json ranges_json(const std::vector<ByteRange>& ranges) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const auto& r : ranges) out.push_back({r.offset, r.length});
  return out;
}

int print_json(const Model& model, const std::vector<NamedWeight>& weights,
               const std::vector<std::optional<std::string>>& hashes, const std::vector<FileAccounting>& files,
               const Totals& t, const Result<AutoBudget>& budget, const Shards& shards) {
  using json = nlohmann::ordered_json;
  json doc;
  doc["model"] = model.path().string();
  doc["format"] = std::string(model_format_name(model.format()));
  json jm = json::array();
  for (const ModelMetadata& m : model.metadata())
    jm.push_back({{"file", m.file}, {"key", m.key}, {"value", m.value}, {"type", m.type}, {"count", m.count}});
  doc["metadata"] = std::move(jm);
  // Arrays are built apart and moved in: ordered_json keeps keys in a vector,
  // so a reference into `doc` would not survive the next key.
  json jw = json::array();
  for (std::size_t i = 0; i < weights.size(); ++i) {
    const WeightRef& w = *weights[i].ref;
    json e;
    e["name"] = std::string(weights[i].name);
    e["source"] = std::string(weight_source_name(w.source));
    e["dtype"] = std::string(dtype_name(w.dtype));
    if (model.format() == ModelFormat::gguf) e["gguf_type"] = std::string(dtype_gguf_name(w.dtype));
    e["dims"] = w.dims.to_vector();
    e["bytes"] = w.byte_length();
    e["location"] = std::string(location_kind(w));
    if (w.is_external()) {
      e["file"] = w.external->resolved().string();
      e["offset"] = w.external->offset;
    } else {
      e["file"] = nullptr;
      e["offset"] = nullptr;
    }
    e["length"] = w.byte_length();
    if (!hashes.empty()) e["sha256"] = hashes[i] ? json(*hashes[i]) : json(nullptr);
    jw.push_back(std::move(e));
  }
  doc["weights"] = std::move(jw);
  json jf = json::array();
  for (const auto& f : files) {
    jf.push_back({{"path", f.path.string()},
                  {"mapped_bytes", f.mapped_bytes},
                  {"referenced_bytes", f.referenced_bytes},
                  {"unreferenced_bytes", f.unreferenced_bytes},
                  {"header_bytes", f.header_bytes},
                  {"dead_ranges", ranges_json(f.dead_ranges)}});
  }
  doc["external_files"] = std::move(jf);
  json js = json::array();
  for (const auto& s : model.string_tensors()) {
    js.push_back({{"name", s.name}, {"dims", s.dims.to_vector()}, {"source", std::string(weight_source_name(s.source))}});
  }
  doc["string_tensors"] = std::move(js);
  json jn = json::array();
  for (const auto& n : model.notes()) jn.push_back({{"tensor", n.tensor}, {"message", n.message}});
  doc["notes"] = std::move(jn);
  json jfn = json::array();
  for (const auto& f : model.functions()) jfn.push_back({{"domain", f.domain}, {"name", f.name}, {"nodes", f.nodes}});
  doc["functions"] = std::move(jfn);
  doc["totals"] = {{"weights", t.weights},
                   {"inline_weights", t.inline_weights},
                   {"external_weights", t.external_weights},
                   {"weight_bytes", t.weight_bytes},
                   {"inline_bytes", t.inline_bytes},
                   {"external_bytes", t.external_bytes},
                   {"external_files", files.size()},
                   {"mapped_bytes", t.mapped_bytes},
                   {"referenced_bytes", t.referenced_bytes},
                   {"unreferenced_bytes", t.unreferenced_bytes},
                   {"header_bytes", t.header_bytes},
                   {"model_file_bytes", model.file_size()},
                   // The same as model_file_bytes, kept under its first name.
                   {"onnx_file_bytes", model.file_size()}};
  if (budget.ok()) {
    doc["auto_budget"] = {{"source_bytes", budget->source_bytes},
                          {"external_bytes", budget->external_bytes},
                          {"inline_bytes", budget->inline_bytes},
                          {"derived_bytes", budget->derived_bytes},
                          {"derivations", budget->derivations},
                          {"total_bytes", budget->total}};
  } else {
    doc["auto_budget"] = nullptr;
    doc["auto_budget_error"] = budget.error().to_string();
  }
  if (shards.plans) doc["shards"] = shard_plans_json(*shards.plans, *shards.load, shards.rules);
  // Invalid UTF-8 in names (the proto does not enforce it) is replaced, not fatal.
  std::cout << json_text(doc) << '\n';
  return kExitOk;
}

std::string display_location(const WeightRef& w) {
  return w.is_external() ? w.external->location() : std::string("-");
}

int print_table(const Model& model, const std::vector<NamedWeight>& weights,
                const std::vector<std::optional<std::string>>& hashes, const std::vector<FileAccounting>& files,
                const Totals& t, const Result<AutoBudget>& budget, const Shards& shards) {
  std::ostream& out = std::cout;
  out << "model: " << printable(model.path().string()) << " (" << human_bytes(model.file_size()) << ", "
      << model_format_name(model.format());
  if (model.format() == ModelFormat::onnx) {
    out << ", ir_version " << model.ir_version() << ", opsets";
    for (const auto& [domain, version] : model.opsets())
      out << ' ' << (domain.empty() ? "ai.onnx" : printable(domain)) << '/' << version;
  }
  out << ")\n";
  if (!model.metadata().empty()) {
    out << "metadata:\n";
    // Values may be whole configs: the first line, cut; --json has them whole.
    constexpr std::size_t kShownValue = 72;
    for (const ModelMetadata& m : model.metadata()) {
      if (m.type.rfind("array", 0) == 0) {  // arrays by type and count (a vocabulary is 100,000s of strings)
        out << "  " << printable(m.file) << ": " << printable(m.key) << " = " << m.type << " of " << m.count << '\n';
        continue;
      }
      std::string value = m.value.substr(0, m.value.find('\n'));
      const bool cut = value.size() > kShownValue || value.size() < m.value.size();
      if (value.size() > kShownValue) value.resize(kShownValue);
      out << "  " << printable(m.file) << ": " << printable(m.key) << " = " << printable(value)
          << (cut ? "... (" + human_bytes(m.value.size()) + ")" : std::string()) << '\n';
    }
  }
  out << '\n';

  std::vector<std::string> header = {"NAME", "SOURCE", "DTYPE", "SHAPE", "BYTES", "WHERE", "FILE", "OFFSET"};
  std::vector<bool> right = {false, false, false, false, true, false, false, true};
  if (!hashes.empty()) {
    header.push_back("SHA256");
    right.push_back(false);
  }
  Table table(header, right);
  for (std::size_t i = 0; i < weights.size(); ++i) {
    const WeightRef& w = *weights[i].ref;
    std::vector<std::string> row = {std::string(weights[i].name),
                                    std::string(weight_source_name(w.source)),
                                    std::string(model.format() == ModelFormat::gguf ? dtype_gguf_name(w.dtype)
                                                                                    : dtype_name(w.dtype)),
                                    shape_string(w.dims),
                                    human_bytes(w.byte_length()),
                                    std::string(location_kind(w)),
                                    display_location(w),
                                    w.is_external() ? std::to_string(w.external->offset) : "-"};
    if (!hashes.empty()) row.push_back(hashes[i].value_or("(unavailable)"));
    table.add(std::move(row));
  }
  table.print(out);

  out << "\nweights: " << t.weights << " (" << t.inline_weights << " inline, " << human_bytes(t.inline_bytes) << "; "
      << t.external_weights << " external, " << human_bytes(t.external_bytes) << "), total "
      << human_bytes(t.weight_bytes) << '\n';
  if (!files.empty()) {
    out << (model.format() == ModelFormat::onnx ? "external data: " : "data files: ") << files.size() << " file"
        << (files.size() == 1 ? "" : "s") << ", mapped " << human_bytes(t.mapped_bytes) << ", referenced "
        << human_bytes(t.referenced_bytes);
    if (t.header_bytes != 0) out << ", headers " << human_bytes(t.header_bytes);
    out << ", unreferenced " << human_bytes(t.unreferenced_bytes) << " (" << percent(t.unreferenced_bytes, t.mapped_bytes)
        << ")\n";
  }
  // From the accounting, never from file lengths: dead bytes cost nothing.
  if (budget.ok()) {
    out << "auto budget: " << human_bytes(budget->total) << " (source " << human_bytes(budget->source_bytes)
        << " referenced + derived " << human_bytes(budget->derived_bytes) << " by " << budget->derivations
        << " planned derivation" << (budget->derivations == 1 ? "" : "s") << ")\n";
  } else {
    out << "auto budget: unavailable (" << printable(budget.error().to_string()) << ")\n";
  }

  if (!files.empty()) {
    out << (model.format() == ModelFormat::onnx ? "\nexternal files:\n" : "\ndata files:\n");
    Table ft({"FILE", "MAPPED", "REFERENCED", "UNREFERENCED", "DEAD"}, {false, true, true, true, true});
    for (const auto& f : files) {
      ft.add({f.path.string(), human_bytes(f.mapped_bytes), human_bytes(f.referenced_bytes),
              human_bytes(f.unreferenced_bytes), percent(f.unreferenced_bytes, f.mapped_bytes)});
    }
    ft.print(out, "  ");
    for (const auto& f : files) {
      if (f.dead_ranges.empty()) continue;
      out << "  dead ranges of " << printable(f.path.filename().string()) << ":\n";
      // A fragmented file could list thousands; the JSON has them all.
      constexpr std::size_t kShown = 20;
      for (std::size_t i = 0; i < f.dead_ranges.size() && i < kShown; ++i) {
        const ByteRange& r = f.dead_ranges[i];
        out << "    [" << r.offset << ", " << r.offset + r.length << ")  " << human_bytes(r.length) << '\n';
      }
      if (f.dead_ranges.size() > kShown) {
        out << "    ... " << f.dead_ranges.size() - kShown << " more (see --json)\n";
      }
    }
  }

  if (!model.string_tensors().empty()) {
    out << "\nstring tensors (listed, not weights):\n";
    for (const auto& s : model.string_tensors()) {
      out << "  " << printable(s.name) << "  " << weight_source_name(s.source) << "  " << shape_string(s.dims) << '\n';
    }
  }
  if (!model.notes().empty()) {
    out << "\nnotes:\n";
    for (const auto& n : model.notes()) {
      out << "  " << (n.tensor.empty() ? std::string("(model)") : printable(n.tensor)) << ": " << printable(n.message) << '\n';
    }
  }
  if (shards.plans) print_shard_plans(out, *shards.plans, *shards.load, shards.rules);
  return kExitOk;
}

int run_inspect(const InspectOptions& opt) {
  CommandContext ctx("inspect");
  if (!ctx.load_model(opt.model, opt.load)) return ctx.exit_code();
  const Model& model = ctx.model();
  const std::vector<NamedWeight> weights = weights_in_order(model);
  const std::vector<FileAccounting> files = account_external_files(model.store());
  const Totals totals = totals_of(weights, files);
  std::vector<std::optional<std::string>> hashes;
  std::optional<Error> hash_failure;
  if (opt.hash) hashes = hash_weights(model.store(), weights, hash_failure);
  const Result<AutoBudget> budget = auto_budget(model, opt.max_amplification);
  Shards shards;
  if (opt.world_given) {
    ShardSpec spec;
    spec.world = opt.world;
    if (!opt.shard_rules.empty()) {
      auto rules = read_shard_rules_file(opt.shard_rules);
      if (!rules) return ctx.fail(rules.error());
      spec.rules = std::move(*rules);
      shards.rules = opt.shard_rules;
    }
    auto plans = plan_shards_all(model, spec);
    if (!plans) return ctx.fail(plans.error());
    if (!opt.shard_rules.empty()) note_unmatched_file_rules(plans->unmatched_rules, "inspect");
    auto load = plan_cooperative_load(model, *plans, opt.ranks_per_domain);
    if (!load) return ctx.fail(load.error());
    shards.plans = std::move(*plans);
    shards.load = std::move(*load);
  }

  if (!opt.map.empty()) {
    // The picture replaces whatever file --map names: never one the model
    // is read from (`--map model.onnx`, a data file, a symlink to either).
    struct stat map_st {};
    if (::stat(opt.map.c_str(), &map_st) == 0 && S_ISREG(map_st.st_mode)) {
      std::vector<std::filesystem::path> inputs = {model.path()};
      for (const FileAccounting& f : files) inputs.push_back(f.path);
      for (const std::filesystem::path& input : inputs) {
        struct stat in_st {};
        if (::stat(input.c_str(), &in_st) == 0 && in_st.st_dev == map_st.st_dev && in_st.st_ino == map_st.st_ino) {
          Error e = make_error(ErrorCode::invalid_argument,
                               "--map names a file the model is read from (" + input.string() + "); not replaced");
          e.file = opt.map;
          return ctx.fail(e);
        }
      }
    }
    Status written = write_dead_weight_map(opt.map, model.path().filename().string(), files);
    if (!written.ok()) return ctx.fail(written.error());
  }
  const int printed = opt.json ? print_json(model, weights, hashes, files, totals, budget, shards)
                               : print_table(model, weights, hashes, files, totals, budget, shards);
  // A file that changed while it was read (hashed, or the .onnx while its
  // nodes were read): what was printed for it is not the file's.
  if (hash_failure) return ctx.fail(*hash_failure);
  if (Status s = model.check_unchanged(); !s.ok()) return ctx.fail(s.error());
  return printed;
}

const RegisterCommand kInspect{{
    "inspect",
    "List a model's weights, where their bytes live, and the dead bytes of each external file",
    [](CLI::App& sub) -> std::function<int()> {
      auto opt = std::make_shared<InspectOptions>();
      sub.add_option("MODEL", opt->model, "the model: .onnx, .safetensors, a *.safetensors.index.json, or .gguf")
          ->required();
      sub.add_flag("--json", opt->json, "machine-readable output (schema in docs/tools.md)");
      sub.add_flag("--hash", opt->hash, "add the SHA-256 of every weight's bytes (reads them all)");
      sub.add_option("--map", opt->map, "write an SVG map of referenced vs dead bytes per external file")
          ->type_name("FILE.svg");
      add_allow_holes_option(sub, opt->load);
      add_model_real_dir_option(sub, opt->load);
      add_amplification_option(sub, opt->max_amplification, "refuse an auto budget above R times the referenced bytes");
      auto* world = sub.add_option("--world", opt->world,
                                   "print the tensor-parallel shard plan of N ranks (docs/distributed.md)")
                        ->type_name("N");
      sub.add_option("--shard-rules", opt->shard_rules, "shard rules as JSON, before the built-in ones")
          ->type_name("FILE")
          ->needs(world);
      sub.add_option("--ranks-per-domain", opt->ranks_per_domain,
                     "ranks r/N read their own copy together (a node's ranks); 0: every rank reads one storage")
          ->type_name("N")
          ->needs(world);
      return [opt, world] {
        opt->world_given = world->count() > 0;
        return run_inspect(*opt);
      };
    },
}};

}  // namespace
}  // namespace ballast::cli
