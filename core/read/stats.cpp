// The names and the one-line summary of a cold read.
#include <ballast/read_plan.hpp>

#include <cstdio>

namespace ballast {

std::string_view read_engine_name(ReadEngine e) noexcept {
  switch (e) {
    case ReadEngine::automatic: return "auto";
    case ReadEngine::io_uring: return "io_uring";
    case ReadEngine::threads: return "threads";
  }
  return "unknown";
}

// "io_uring: 2814 MiB in 1.92 s (1466 MiB/s), 352 reads, 352 chunks, 3 files
// (3 O_DIRECT), io 2814 MiB, staging 32 MiB (peak 32 MiB), consumer 0.41 s"
std::string ReadStats::to_string() const {
  constexpr double kMiB = 1 << 20;
  const double rate = seconds > 0 ? static_cast<double>(bytes) / kMiB / seconds : 0;
  char text[512];
  std::snprintf(text, sizeof text,
                "%s: %.0f MiB in %.3f s (%.0f MiB/s), %llu reads, %llu chunks, %u files (%u O_DIRECT), io %.0f MiB, "
                "staging %.0f MiB (peak %.0f MiB), consumer %.3f s",
                std::string(read_engine_name(engine)).c_str(), static_cast<double>(bytes) / kMiB, seconds, rate,
                static_cast<unsigned long long>(reads), static_cast<unsigned long long>(chunks), files, direct_files,
                static_cast<double>(io_bytes) / kMiB, static_cast<double>(staging_bytes) / kMiB,
                static_cast<double>(peak_staging_in_use) / kMiB, consumer_seconds);
  std::string out = text;
  if (mapped_files != 0) out += ", " + std::to_string(mapped_files) + " file(s) read through their mapping";
  return out;
}

}  // namespace ballast
