#include "support/progress.hpp"

#include "support/format.hpp"

#include <ballast/printable.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace ballast::cli {

ProgressBar::ProgressBar(std::string label, std::uint64_t total_bytes)
    : label_(printable(label)), total_(total_bytes), visible_(total_bytes >= kMinBytes && isatty(STDERR_FILENO) == 1) {}

ProgressBar::~ProgressBar() {
  if (visible_) draw(true);
}

void ProgressBar::advance(std::uint64_t bytes) {
  done_ = std::min(total_, done_ + bytes);
  // The destructor draws the finished bar (with its newline) exactly once.
  if (!visible_ || done_ == total_) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  draw(false);
}

void ProgressBar::draw(bool final) {
  constexpr int kWidth = 30;
  const double fraction = total_ ? static_cast<double>(done_) / static_cast<double>(total_) : 1.0;
  const int filled = static_cast<int>(fraction * kWidth);
  std::string bar(static_cast<std::size_t>(filled), '#');
  bar.append(static_cast<std::size_t>(kWidth - filled), '.');
  std::fprintf(stderr, "\r%s [%s] %5.1f%% %s / %s%s", label_.c_str(), bar.c_str(), 100.0 * fraction,
               human_bytes(done_).c_str(), human_bytes(total_).c_str(), final ? "\n" : "");
  std::fflush(stderr);
}

}  // namespace ballast::cli
