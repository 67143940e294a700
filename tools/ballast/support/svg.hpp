// `inspect --map`: an SVG with one bar per external file, referenced ranges
// and dead ranges in two colours, so an orphaned prefix shows at a glance.
#pragma once

#include "support/model.hpp"

#include <ballast/status.hpp>

#include <filesystem>
#include <string>
#include <vector>

namespace ballast::cli {

std::string dead_weight_map_svg(const std::string& title, const std::vector<FileAccounting>& files);

// Writes the map to `out`, replacing it whole (support/temp_files.hpp: a
// failure leaves the earlier file as it was); io error naming the file on
// failure.
Status write_dead_weight_map(const std::filesystem::path& out, const std::string& title,
                             const std::vector<FileAccounting>& files);

}  // namespace ballast::cli
