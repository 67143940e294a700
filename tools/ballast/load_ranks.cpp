// The cooperative load of `ballast load --comm` (load_ranks.hpp).
#include "load_ranks.hpp"

#include "command_context.hpp"
#include "support/budget.hpp"
#include "support/derived_dump.hpp"
#include "support/format.hpp"
#include "support/npy.hpp"
#include "support/residency_report.hpp"
#include "support/rules_file.hpp"
#include "support/shard_rules_file.hpp"
#include "support/terminal.hpp"

#include <ballast/cooperative_load.hpp>
#include <ballast/derive.hpp>
#include <ballast/printable.hpp>
#include <ballast/shard.hpp>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>

namespace ballast::cli {
namespace {

using json = nlohmann::ordered_json;

// "1.234": seconds as the text reports print them.
std::string fixed3(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f", seconds);
  return text;
}

// The element size a NumPy type string names ("<f4": 4, "<c16": 16).
std::uint64_t descr_bytes(const std::string& descr) { return std::stoull(descr.substr(2)); }

// What one rank did on its device.
struct Placed {
  std::uint64_t shard_bytes = 0;    // its shards, on the device
  std::uint64_t derived = 0;        // derivations run
  std::uint64_t derived_bytes = 0;  // their outputs
  std::uint64_t row_maxima_bytes = 0;  // row-parallel quant_int8's rows' maxima, on the device beside them
  std::vector<std::string> skipped; // "<kind> of '<weight>': <why>"
  std::optional<ResidencyStats> residency;  // derive --comm --residency
};

// One rank's shards on the device (place_rank), then the dump: its shards
// read back from the device (load), or its derived values under the whole
// plan's names (derive --comm).
Result<Placed> place(GpuBackend& gpu, const Model& model, const ShardPlan& plan, const RankShards& shards,
                     const std::string& dump, const std::vector<PlannedDerivation>* derivations) {
  BALLAST_ASSIGN_OR_RETURN(RankDevice device,
                           place_rank(gpu, model, plan, shards,
                                      derivations ? std::span<const PlannedDerivation>(*derivations)
                                                  : std::span<const PlannedDerivation>()));
  Placed out{device.shard_bytes, device.derived.size(), device.derived_bytes, 0, device.skipped};
  for (const RowMaxima& r : shards.row_maxima) out.row_maxima_bytes += 4 * r.maxima.size();
  if (!dump.empty()) {
    const std::string rank_dir = "rank" + std::to_string(plan.rank);
    if (derivations != nullptr) {
      BALLAST_ASSIGN_OR_RETURN(DerivedDump d, DerivedDump::open(dump, rank_dir));
      const std::vector<std::string> stems = dump_stems(*derivations);
      for (const RankDerivedValue& v : device.derived) {
        PlannedDerivation mine = (*derivations)[v.planned];
        mine.launch = v.launch;
        // A row-parallel quant_int8 ran as quant_int8_given_max: the same
        // outputs, written under the plan's kind (the single-process names).
        mine.launch.kind = mine.kind() == Derivation::quant_int8_given_max ? Derivation::quant_int8 : mine.launch.kind;
        const WeightShard& source = plan.weights[v.source];
        BALLAST_RETURN_IF_ERROR(d.write(gpu, mine, stems[v.planned], source.dims, v.launch.dst, v.launch.dst2));
      }
    } else {
      BALLAST_ASSIGN_OR_RETURN(DumpDirectory d, DumpDirectory::open(dump, rank_dir));
      for (std::size_t i = 0; i < plan.weights.size(); ++i) {
        const WeightShard& s = plan.weights[i];
        if (device.shards[i] == 0) continue;
        // What the device holds, not the host copy: the dump proves the placement.
        std::vector<std::byte> back(s.device_bytes);
        BALLAST_RETURN_IF_ERROR(gpu.copy_to_host(back, device.shards[i], 0), "reading back '" + s.weight + "'");
        std::string descr = npy_descr(model.store().weights().at(s.id).dtype);
        std::vector<std::uint64_t> shape(s.dims.begin(), s.dims.end());
        std::uint64_t elements = 1;
        for (std::uint64_t n : shape) elements *= n;
        if (elements * descr_bytes(descr) != back.size()) {  // block types: their bytes
          descr = "|u1";
          shape = {back.size()};
        }
        BALLAST_RETURN_IF_ERROR(d.write_npy(s.weight, "shard", descr, shape, back).status());
      }
    }
  }
  BALLAST_RETURN_IF_ERROR(device.release());
  return out;
}

// derive --comm --residency: the rank's shards as a model of their own
// (rank_model), every derivation pinned through a Residency over it in
// plan order (paged: evicting under the budget), dumped while pinned under
// the names of place()'s dump.
Result<Placed> place_resident(GpuBackend& gpu, const Model& model, const ShardPlan& plan, RankShards shards,
                              const std::string& dump, const std::vector<PlannedDerivation>& derivations,
                              ResidencyOptions options) {
  Placed out;
  for (const std::span<std::byte> s : shards.shards) out.shard_bytes += s.size();
  for (const RowMaxima& r : shards.row_maxima) out.row_maxima_bytes += 4 * r.maxima.size();
  BALLAST_ASSIGN_OR_RETURN(RankModel ranked, rank_model(model, plan, std::move(shards), derivations));
  out.skipped = ranked.skipped;
  options.derivations = ranked.derivations;
  BALLAST_ASSIGN_OR_RETURN(auto residency, create_residency(gpu, ranked.model, options));
  std::optional<DerivedDump> d;
  if (!dump.empty()) {
    auto opened = DerivedDump::open(dump, "rank" + std::to_string(plan.rank));
    if (!opened) return opened.error();
    d.emplace(std::move(*opened));
  }
  const std::vector<std::string> stems = dump_stems(derivations);
  Status failed;
  for (std::size_t i = 0; i < ranked.derivations.size() && failed.ok(); ++i) {
    const PlannedDerivation& p = ranked.derivations[i];
    auto pinned = residency->pin(p);
    if (!pinned) {
      failed = pinned.status();
      break;
    }
    ++out.derived;
    out.derived_bytes += pinned->bytes();
    if (d) {
      const Dims& dims = ranked.model.store().weights().at(p.source).dims;
      PlannedDerivation named = p;  // a row-parallel quant_int8 under the plan's kind, as place() writes it
      if (named.kind() == Derivation::quant_int8_given_max) named.launch.kind = Derivation::quant_int8;
      failed = d->write(gpu, named, stems[ranked.planned[i]], dims, pinned->first(), pinned->second());
    }
  }
  out.residency = residency->stats();
  const Released released = residency->release(gpu);
  BALLAST_RETURN_IF_ERROR(failed);
  BALLAST_RETURN_IF_ERROR(released.status);
  return out;
}

json rank_json(const CooperativeLoadReport& r, const Placed& placed, std::size_t shards, const std::string& comm,
               std::uint32_t world, std::uint32_t domain, bool derive, bool in_place,
               const std::vector<std::string>& plan_skipped) {
  json doc = {{"rank", r.rank},
          {"world", world},
          {"in_place", in_place},
          {"domain", domain},
          {"comm", comm},
          {"read_bytes", r.read_bytes},
          {"kept_bytes", r.kept_bytes},
          {"sent_bytes", r.sent_bytes},
          {"received_bytes", r.received_bytes},
          {"inline_bytes", r.inline_bytes},
          {"messages_sent", r.messages_sent},
          {"messages_received", r.messages_received},
          {"exchange", in_place ? "none" : r.rounds ? "rounds" : "messages"},
          {"rounds", r.round_count},
          {"shards", shards},
          {"device_bytes", placed.shard_bytes},
          {"read_engine", in_place ? std::string("none") : std::string(read_engine_name(r.read.engine))},
          {"seconds", r.seconds}};
  if (derive) {
    doc["derived"] = placed.derived;
    doc["derived_bytes"] = placed.derived_bytes;
    doc["row_maxima_bytes"] = placed.row_maxima_bytes;
    doc["skipped"] = placed.skipped;
    doc["plan_skipped"] = plan_skipped;  // the whole plan's skips: no rank derives these
  }
  if (placed.residency) doc["residency"] = residency_stats_json(*placed.residency);
  return doc;
}

}  // namespace

int run_load_ranks(const RanksOptions& opt) {
  CommandContext ctx(opt.command);
  // --round-bytes sizes rounds and nothing else: where the ranks trade in
  // messages it would be ignored, so it is refused (auto is checked once
  // the communicator says whether it has messages, below).
  const bool round_bytes_given = !opt.comm.round_bytes.empty();  // the parse refuses an empty count
  if (round_bytes_given && opt.comm.exchange == "messages")
    return ctx.fail(ErrorCode::invalid_argument,
                    "--round-bytes sizes the rounds of --exchange rounds, and --exchange messages trades in none");
  // The ranks this process runs: all of them as threads, or its own.
  std::vector<std::unique_ptr<Communicator>> comms;
  std::uint32_t world = opt.comm.world;
  if (opt.comm.config == "local") {
    if (world == 0)
      return ctx.fail(ErrorCode::invalid_argument,
                      "--comm local needs --world N: the number of ranks to run as threads");
    auto made = make_local_communicators(world);
    if (!made) return ctx.fail(made.error());
    comms = std::move(*made);
  } else {
    auto opened = open_communicator(opt.comm.config);
    if (!opened) return ctx.fail(opened.error());
    const std::uint32_t job = (*opened)->world();
    if (world != 0 && world != job)
      return ctx.fail(
          ErrorCode::invalid_argument,
          "--world " + std::to_string(world) + " but the " + (*opened)->name() + " job has " + std::to_string(job) +
              (job == 1 ? " rank (was it started by mpirun -np " + std::to_string(world) + "?)" : " ranks"));
    if (world == 0 && job == 1)
      std::cerr << "ballast " << opt.command << ": note: the " << (*opened)->name()
                << " job has 1 rank, which loads the whole model (start it with mpirun -np N, or give --world 1)\n";
    world = job;
    comms.push_back(std::move(*opened));
  }
  // auto trades in messages where the communicator has them
  // (CooperativeLoadOptions): there a round size would be ignored too.
  if (round_bytes_given && opt.comm.exchange == "auto" && comms[0]->any_source())
    return ctx.fail(ErrorCode::invalid_argument,
                    "--round-bytes sizes the rounds of --exchange rounds, and --exchange "
                    "auto trades in messages on " +
                        comms[0]->name() + ": give --exchange rounds with it");

  // From here on a failure of this process is announced to the other
  // ranks, so theirs end at once instead of at their timeout.
  // An MPI rank's lines say which rank it is; local ranks' errors do already.
  const std::string who = comms.size() == 1 && world > 1
                              ? "rank " + std::to_string(comms[0]->rank()) + " of " + std::to_string(world)
                              : "";
  // This process's own lines name its rank too (ctx), and so does what
  // its peers hear.
  ctx.set_who(who);
  const auto fail_all = [&](Error error) {
    for (auto& c : comms) c->fail(Status(who.empty() ? error : Error(error).with_context(who)));
    return ctx.fail(error);
  };
  // A step that reported its own error (the model, the backend): the
  // peers hear that error, not a summary.
  const auto failed_step = [&] {
    const Error e = ctx.last_error() ? *ctx.last_error() : make_error(ErrorCode::unavailable, "failed");
    for (auto& c : comms) c->fail(Status(who.empty() ? e : Error(e).with_context(who)));
    return ctx.exit_code();
  };
  if (!ctx.load_model(opt.model, opt.load)) return failed_step();
  const Model& model = ctx.model();
  // derive --comm: the whole model's plan, cut to each rank's shards later.
  std::optional<std::vector<PlannedDerivation>> derivations;
  // What the whole model's plan skipped (a rule's kind that does not fit a
  // weight it matches, a node the graph cannot derive for), as the
  // single-process derive lists them: without this list plan_derivations
  // fails on the first rule skip, so a --rules file that the single derive
  // accepts failed every rank.
  std::vector<std::string> plan_skipped;
  if (opt.derive) {
    PlanOptions planning;
    planning.max_amplification = opt.max_amplification;
    if (!opt.rules.empty())
      if (Status s = read_rules_file(opt.rules, planning); !s.ok()) return fail_all(s.error());
    std::vector<PlanSkip> skips;
    planning.skipped = &skips;
    auto planned = plan_derivations(model, planning);
    if (!planned) return fail_all(planned.error());
    derivations = std::move(*planned);
    for (const PlanSkip& s : skips) plan_skipped.push_back(plan_skip_subject(s) + ": " + s.reason);
    // Said once per job, by rank 0's process (every rank plans the same).
    if (comms[0]->rank() == 0)
      for (const std::string& why : plan_skipped)
        std::cerr << "ballast " << opt.command << ": note: not planned: " << printable(why) << "\n";
  }
  ShardSpec spec;
  spec.world = world;
  if (!opt.comm.shard_rules.empty()) {
    auto rules = read_shard_rules_file(opt.comm.shard_rules);
    if (!rules) return fail_all(rules.error());
    spec.rules = std::move(*rules);
  }
  auto plans = plan_shards_all(model, spec);
  if (!plans) return fail_all(plans.error());
  // Said once per job: by rank 0's process.
  if (!opt.comm.shard_rules.empty() && comms[0]->rank() == 0)
    note_unmatched_file_rules(plans->unmatched_rules, opt.command);
  auto load = plan_cooperative_load(model, *plans, opt.comm.ranks_per_domain);
  if (!load) return fail_all(load.error());
  std::optional<ResidencyOptions> residency;
  if (!opt.residency.empty()) {
    auto parsed = residency_options(opt.residency, opt.budget);
    if (!parsed) return fail_all(parsed.error());
    residency = std::move(*parsed);
    residency->max_amplification = opt.max_amplification;
  }
  // Each local rank's dump folder made and opened now: a path that cannot
  // be is said (once, to the peers too) before the load, not after it.
  if (!opt.dump.empty())
    for (const auto& c : comms)
      if (auto d = DumpDirectory::open(opt.dump, "rank" + std::to_string(c->rank())); !d) return fail_all(d.error());
  if (!ctx.open_backend(opt.backend)) return failed_step();

  CooperativeLoadOptions options;
  options.read = opt.read;
  options.timeout = std::chrono::seconds(opt.comm.timeout_s);
  options.exchange = opt.comm.exchange == "rounds"     ? ExchangeMode::rounds
                     : opt.comm.exchange == "messages" ? ExchangeMode::messages
                                                       : ExchangeMode::automatic;
  if (!opt.comm.round_bytes.empty()) {
    std::optional<std::uint64_t> bytes;
    static_cast<void>(parse_budget(opt.comm.round_bytes, bytes));  // checked when parsed
    if (bytes) options.round_bytes = *bytes;
  }
  std::vector<std::optional<Result<RankShards>>> results(comms.size());
  {
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < comms.size(); ++i)
      threads.emplace_back([&, i] {
        if (opt.comm.in_place) {
          results[i] = shards_in_place(model, plans->ranks[comms[i]->rank()]);
          // The load announces its own failures; taking shards in place has
          // no communicator, so the peers (waiting in share_row_maxima or the
          // reports' gather) hear it here, not at their timeout.
          if (!results[i]->ok()) comms[i]->fail(results[i]->status());
        } else {
          results[i] = cooperative_load(model, *plans, *load, *comms[i], options);
        }
        // derive --comm: the ranks' maxima of row-parallel quant_int8 rows,
        // all-reduced here, where every rank runs at once (placing is one
        // rank after another).
        if (results[i]->ok() && derivations)
          if (Status s = share_row_maxima(model, plans->ranks[comms[i]->rank()], **results[i], *derivations,
                                          *comms[i], options.timeout);
              !s.ok())
            results[i] = s.error();
      });
    for (std::thread& t : threads) t.join();
  }
  int exit_code = kExitOk;
  ctx.set_who("");  // from here every error names its rank itself
  // Each rank's report is one block of text (a JSON line, or its lines),
  // printed whole: ranks of an MPI job share one stdout through the
  // launcher, which forwards what each writes in pieces (a terminal's
  // 1 KiB), so two ranks' lines written side by side could interleave.
  std::vector<std::string> blocks(comms.size());
  for (std::size_t i = 0; i < comms.size(); ++i) {
    const std::uint32_t rank = comms[i]->rank();
    Result<RankShards>& got = *results[i];
    if (!got) {
      ctx.report(got.error());  // the load's own context names the rank
      exit_code = kExitBadInput;
      continue;
    }
    const CooperativeLoadReport report = got->report;
    const std::size_t shard_count = got->shards.size();
    auto placed = residency ? place_resident(ctx.gpu(), model, plans->ranks[rank], std::move(*got), opt.dump,
                                             *derivations, *residency)
                            : place(ctx.gpu(), model, plans->ranks[rank], *got, opt.dump,
                                    derivations ? &*derivations : nullptr);
    if (!placed) {
      ctx.report(Error(placed.error()).with_context("rank " + std::to_string(rank) + " of " + std::to_string(world)));
      exit_code = kExitBadInput;
      continue;
    }
    const CooperativeLoadReport& r = report;
    std::ostringstream out;
    if (opt.json) {
      out << json_line(rank_json(r, *placed, shard_count, comms[i]->name(), world, load->ranks[rank].domain, opt.derive,
                                 opt.comm.in_place, plan_skipped))
          << '\n';
    } else if (opt.comm.in_place) {
      // kept: the shards that are their mapping's bytes, read from it as
      // they are placed; read: those gathered from it on the host first (the
      // seconds are that gather's: placing is not timed here).
      out << "rank " << rank << " of " << world << " (" << comms[i]->name() << "), in place: "
          << human_bytes(r.kept_bytes) << " in its mapping, " << human_bytes(r.read_bytes) << " gathered on the host in "
          << fixed3(r.seconds) << " s; " << shard_count << " shards, " << human_bytes(placed->shard_bytes) << " on "
          << ctx.gpu().info().backend << "\n";
    } else {
      const std::string how =
          r.rounds ? " in " + std::to_string(r.round_count) + (r.round_count == 1 ? " round" : " rounds") : "";
      out << "rank " << rank << " of " << world << " (" << comms[i]->name() << "): read " << human_bytes(r.read_bytes)
          << " from storage (kept " << human_bytes(r.kept_bytes) << "), sent " << human_bytes(r.sent_bytes)
          << ", received " << human_bytes(r.received_bytes) << how << ", inline " << human_bytes(r.inline_bytes) << "; "
          << shard_count << " shards, " << human_bytes(placed->shard_bytes) << " on " << ctx.gpu().info().backend
          << "; " << fixed3(r.seconds) << " s\n";
    }
    if (!opt.json) {
      if (opt.derive) {
        out << "  derived " << placed->derived << " values of its shards (" << human_bytes(placed->derived_bytes) << ")";
        if (placed->skipped.empty())
          out << "\n";
        else
          out << "; skipped " << placed->skipped.size() << ":\n";
        for (const std::string& why : placed->skipped) out << "    " << printable(why) << "\n";
        if (placed->residency) print_residency_summary(out, *placed->residency, "  ");
      }
    }
    blocks[i] = std::move(out).str();
  }
  if (comms.size() == 1 && world > 1) {
    // One process per rank: rank 0 prints every rank's block in rank
    // order (a rank that failed gives none; its error is on its stderr).
    // If the gather fails (a peer failed or died), each rank prints its
    // own block rather than lose it.
    std::vector<std::vector<std::byte>> to(world);
    const auto* bytes = reinterpret_cast<const std::byte*>(blocks[0].data());
    to[0].assign(bytes, bytes + blocks[0].size());
    const auto deadline = std::chrono::steady_clock::now() + options.timeout;
    // A rank that failed takes part with nothing, so the others do not
    // wait for it (after a failed load the exchange ends at once).
    auto gathered = comms[0]->exchange(std::move(to), deadline);
    if (!gathered) {
      if (exit_code == kExitOk) {
        ctx.report(Error(gathered.error()).with_context("rank " + std::to_string(comms[0]->rank()) + " of " +
                                                        std::to_string(world) + ": gathering the ranks' reports"));
        exit_code = kExitBadInput;
      }
      std::cout << blocks[0];
    } else if (comms[0]->rank() == 0) {
      for (const std::vector<std::byte>& b : *gathered)
        std::cout.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
    }
  } else {
    for (const std::string& b : blocks) std::cout << b;
  }
  std::cout.flush();
  if (exit_code == kExitOk && comms.size() == world && !opt.json && opt.comm.in_place)
    std::printf("in place: the ranks' shards are %s in all, each rank's read from its own mapping as it places "
                "them (a cooperative load reads %s from storage together)\n",
                human_bytes(load->read_per_rank_bytes).c_str(), human_bytes(load->union_bytes).c_str());
  else if (exit_code == kExitOk && comms.size() == world && !opt.json)
    std::printf("the ranks read %s together (%s); each reading its own shards: %s; "
                "each reading everything: %s\n",
                human_bytes(load->union_bytes).c_str(),
                load->union_bytes == 0 ? "no external data: inline weights are copied from each rank's model"
                : load->domains == 1   ? "the referenced bytes, once"
                                       : ("once per storage domain, " + std::to_string(load->domains) + " domains").c_str(), human_bytes(load->read_per_rank_bytes).c_str(),
                human_bytes(load->read_everything_bytes).c_str());
  return exit_code;
}

}  // namespace ballast::cli
