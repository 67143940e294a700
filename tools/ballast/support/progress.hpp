// A progress bar on stderr for long byte-streaming work (hashing large
// external files). Silent unless stderr is a terminal and the job is large,
// so logs and pipes never fill with carriage returns.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace ballast::cli {

class ProgressBar {
 public:
  // Jobs smaller than this finish too fast for a bar to help.
  static constexpr std::uint64_t kMinBytes = std::uint64_t{64} << 20;

  ProgressBar(std::string label, std::uint64_t total_bytes);
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  void advance(std::uint64_t bytes);
  bool visible() const noexcept { return visible_; }

 private:
  void draw(bool final);

  std::string label_;
  std::uint64_t total_;
  std::uint64_t done_ = 0;
  bool visible_;
  std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace ballast::cli
