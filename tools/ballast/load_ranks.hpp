// `ballast load MODEL --comm local|mpi [--world N] [--shard-rules FILE]
// [--dump DIR] [--json]`: the cooperative load of a tensor-parallel
// engine's shards (include/ballast/cooperative_load.hpp). Every rank reads
// its part of the checkpoint, sends the others what their shards need,
// puts its own shards on the device, and says what it read, sent and
// received; --dump writes each rank's shards, read back from the device,
// as DIR/rank<R>/<weight>.shard.npy. "local": --world N ranks as threads
// of this process; "mpi": this process is one rank of the MPI job
// (mpirun -np N ballast load ... --comm mpi). --json: one JSON document
// per rank, one line each (ranks of an MPI job print their own).
// `ballast derive MODEL --comm ...` is the same load followed by every
// planned derivation cut to the rank's shards (plan_shard_derivations).
// --in-place: no load; each rank takes its shards from the model it opened
// (shards_in_place), so it reads its own shards, sends and receives nothing.
#pragma once

#include <ballast/derive.hpp>
#include <ballast/model.hpp>
#include <ballast/read_plan.hpp>

#include <cstdint>
#include <string>

namespace ballast::cli {

// What picks and shapes the ranks: the options load and derive share
// (command_options.hpp adds them to a command).
struct CommOptions {
  std::string config;            // --comm: "local", "mpi", "mpi?..."
  std::uint32_t world = 0;       // local: required; mpi: checked against the job's when given
  std::string shard_rules;
  std::uint32_t timeout_s = 60;  // the longest wait for a peer
  std::string exchange = "auto"; // --exchange: auto, messages or rounds
  std::string round_bytes;       // --round-bytes: a round's size (empty: CooperativeLoadOptions' default)
  std::uint32_t ranks_per_domain = 0;  // --ranks-per-domain: storage domains (0: one)
  bool in_place = false;               // --in-place: shards_in_place, no cooperative load
};

struct RanksOptions {
  std::string model;
  LoadOptions load;  // derive --allow-model-real-dir: how the model opens
  std::string backend = "cpu";
  CommOptions comm;
  std::string dump;
  bool json = false;
  ReadOptions read;
  // derive --comm: every derivation of the whole model's plan (from the
  // graph, or --rules FILE) run on each rank's shards, --dump writing
  // DIR/rank<R>/ under the single-process dump's names.
  bool derive = false;
  std::string rules;
  double max_amplification = kDefaultMaxAmplification;
  // derive --comm --residency S [--budget B]: each rank's derivations
  // pinned through a Residency over its shards (rank_model), not launched
  // directly; the same dump.
  std::string residency, budget;
  std::string command = "load";  // in error lines: "ballast <command>: ..."
};

int run_load_ranks(const RanksOptions& opt);

}  // namespace ballast::cli
