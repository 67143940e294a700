// The options every command that puts a model on a device takes, spelled
// once: the model path, the backend's config string, the residency
// strategy and the budget (load and replay; derive adds its own rules on
// top of --residency).
#pragma once

#include "support/budget.hpp"
#include "support/residency_report.hpp"

#include <CLI/CLI.hpp>

#include <string>

namespace ballast::cli {

inline void add_model_options(CLI::App& sub, std::string& model, std::string& backend) {
  sub.add_option("model", model, "the model: .onnx, .safetensors, a *.safetensors.index.json, or .gguf")->required();
  sub.add_option("--backend", backend, "backend config string, e.g. cpu, vulkan:0")->capture_default_str();
}

inline void add_residency_options(CLI::App& sub, std::string& residency, std::string& budget) {
  sub.add_option("--residency", residency, "upload, zero-copy or paged")
      ->check(CLI::Validator(check_residency, "STRATEGY", "residency strategy"))
      ->capture_default_str();
  sub.add_option("--budget", budget, "device byte budget: BYTES with an optional K/M/G/KiB/MiB/GiB suffix, or auto")
      ->check(CLI::Validator(check_budget, "BYTES|auto", "byte budget"));
}

}  // namespace ballast::cli
