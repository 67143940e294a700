// The options every command that puts a model on a device takes, spelled
// once: the model path, the backend's config string, the residency
// strategy and the budget (load and replay; derive adds its own rules on
// top of --residency), and the tensor-parallel ranks (load and derive).
#pragma once

#include "load_ranks.hpp"
#include "support/budget.hpp"
#include "support/residency_report.hpp"

#include <ballast/shard.hpp>

#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdlib>
#include <string>

namespace ballast::cli {

inline void add_model_options(CLI::App& sub, std::string& model, std::string& backend) {
  sub.add_option("model", model, "the model: .onnx, .safetensors, a *.safetensors.index.json, or .gguf")->required();
  sub.add_option("--backend", backend, "backend config string, e.g. cpu, vulkan:0")->capture_default_str();
}

// --allow-model-real-dir, for every command that opens a model (a Hugging
// Face cache snapshot's files are symlinks into ../../blobs/, refused
// without it); --allow-external-outside-model-dir is its older name.
inline void add_model_real_dir_option(CLI::App& sub, LoadOptions& load) {
  sub.add_flag("--allow-model-real-dir,--allow-external-outside-model-dir", load.allow_model_real_dir,
               "also accept data files beneath the folder of the model file's real path (symlinked caches)");
}

// --allow-holes, for every command that opens a model: the library's
// refusal of a safetensors file with holes names this flag, so each
// command that can show that error takes it (inspect, verify and compact
// had it alone, and load, derive and replay answered with a hint they
// refused as an unknown option).
inline void add_allow_holes_option(CLI::App& sub, LoadOptions& load, const std::string& what = "reported as dead") {
  sub.add_flag("--allow-holes", load.allow_holes,
               "open a safetensors file whose byte buffer has bytes no tensor covers (" + what + ")");
}

inline void add_residency_options(CLI::App& sub, std::string& residency, std::string& budget) {
  sub.add_option("--residency", residency, "upload, zero-copy or paged")
      ->check(CLI::Validator(check_residency, "STRATEGY", "residency strategy"))
      ->capture_default_str();
  sub.add_option("--budget", budget,
                 "device byte budget: BYTES with an optional K/M/G/T/KiB/MiB/GiB/TiB suffix, or auto")
      ->check(CLI::Validator(check_budget, "BYTES|auto", "byte budget"));
}

// --max-amplification (derive, inspect): a finite number >= 0, 0 for no cap.
// (CLI11's NonNegativeNumber let "nan" through, to fail later as "above the
// cap of nanx", and answered -1 with a range bound of 300 digits.)
inline void add_amplification_option(CLI::App& sub, double& cap, const std::string& what) {
  sub.add_option("--max-amplification", cap, what + " (0: no cap; docs/security.md)")
      ->type_name("R")
      ->check(CLI::Validator(
          [](const std::string& v) {
            char* end = nullptr;
            const double r = std::strtod(v.c_str(), &end);
            if (v.empty() || end != v.c_str() + v.size() || !std::isfinite(r) || r < 0)
              return "'" + v + "' is not a finite number >= 0 (0: no cap)";
            return std::string();
          },
          "R", "amplification cap"))
      ->capture_default_str();
}

// --comm, --world, --shard-rules, --exchange, --round-bytes, --ranks-per-domain, --timeout-s and --in-place (load and derive: the
// tensor-parallel ranks, load_ranks.hpp). `what` says what each rank does.
// Returns --comm, for the options it excludes.
inline CLI::Option* add_comm_options(CLI::App& sub, CommOptions& o, const std::string& what) {
  auto* comm = sub.add_option("--comm", o.config,
                              "tensor-parallel ranks: local (threads, with --world), mpi or nccl (under mpirun): each rank " +
                                  what + " (docs/distributed.md)");
  comm->check(CLI::Validator(
      [](const std::string& v) { return v.empty() ? std::string("--comm needs a communicator: local, mpi or nccl") : std::string(); },
      "local|mpi|nccl", "communicator"));
  sub.add_option("--world", o.world, "ranks (--comm local); checked against the job's with mpi")
      ->check(CLI::Range(1u, kMaxShardWorld))
      ->needs(comm);
  sub.add_option("--shard-rules", o.shard_rules, "shard rules as JSON (docs/distributed.md)")->needs(comm);
  auto* exchange = sub.add_option("--exchange", o.exchange,
                 "how ranks trade bytes: messages (each chunk as it is read), rounds (collective, bounded), "
                 "or auto (messages where the communicator has them)")
      ->check(CLI::IsMember({"auto", "messages", "rounds"}))
      ->capture_default_str()
      ->needs(comm);
  auto* round_bytes =
      sub.add_option("--round-bytes", o.round_bytes,
                     "rounds: what a rank gathers for its peers before it trades (BYTES with an optional "
                     "K/M/G/T/KiB/MiB/GiB/TiB suffix; default 32 MiB); only where the ranks trade in rounds: "
                     "--exchange rounds, or auto on nccl")
          ->check(CLI::Validator(
              [](const std::string& v) {
                // No automatic round size: auto is refused, and no reason offers it.
                std::optional<std::uint64_t> bytes;
                return parse_budget(v, bytes, "round size", /*allow_auto=*/false);
              },
              "BYTES", "byte count"))
          ->needs(comm);
  auto* domains = sub.add_option("--ranks-per-domain", o.ranks_per_domain,
                 "ranks r/N share a storage domain (a node with its own copy) and read it together; "
                 "0: every rank reads one storage")
      ->type_name("N")
      ->capture_default_str()
      ->needs(comm);
  sub.add_option("--timeout-s", o.timeout_s, "the longest a rank waits for a peer")
      ->check(CLI::Range(1u, 86400u))
      ->capture_default_str()
      ->needs(comm);
  sub.add_flag("--in-place", o.in_place,
               "no cooperative load: each rank takes its shards from the model it opened (one-range shards are "
               "its mapping's bytes, the others gathered on the host): for ranks that share one copy of the "
               "checkpoint")
      ->needs(comm)
      ->excludes(exchange)
      ->excludes(round_bytes)
      ->excludes(domains);
  return comm;
}

}  // namespace ballast::cli
