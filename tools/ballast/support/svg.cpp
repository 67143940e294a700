#include "support/svg.hpp"

#include "support/format.hpp"
#include "support/temp_files.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace ballast::cli {
namespace {

constexpr const char* kReferencedColour = "#2f6fd0";
constexpr const char* kDeadColour = "#e0452b";
constexpr double kLeft = 20;
constexpr double kBarWidth = 960;
constexpr double kRowHeight = 96;
constexpr double kFirstRow = 92;

std::string xml_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        // Control characters are not allowed in XML 1.0 text.
        if (static_cast<unsigned char>(c) >= 0x20 || c == '\t') out += c;
    }
  }
  return out;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

void draw_ranges(std::ostringstream& svg, const std::vector<ByteRange>& ranges, std::uint64_t size, double y,
                 double height, const char* colour) {
  if (size == 0) return;
  const double scale = kBarWidth / static_cast<double>(size);
  for (const ByteRange& r : ranges) {
    const std::uint64_t end = std::min(size, r.offset + std::min(r.length, size - std::min(size, r.offset)));
    if (r.offset >= end) continue;
    const double x = kLeft + static_cast<double>(r.offset) * scale;
    // Tiny ranges stay visible: at least one pixel.
    const double w = std::max(1.0, static_cast<double>(end - r.offset) * scale);
    svg << "  <rect x=\"" << num(x) << "\" y=\"" << num(y) << "\" width=\"" << num(w) << "\" height=\""
        << num(height) << "\" fill=\"" << colour << "\"><title>[" << r.offset << ", " << end << ") "
        << xml_escape(human_bytes(end - r.offset)) << "</title></rect>\n";
  }
}

}  // namespace

std::string dead_weight_map_svg(const std::string& title, const std::vector<FileAccounting>& files) {
  const double height = kFirstRow + static_cast<double>(std::max<std::size_t>(files.size(), 1)) * kRowHeight;
  const double width = kLeft * 2 + kBarWidth;
  std::ostringstream svg;
  svg << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << num(width) << "\" height=\"" << num(height)
      << "\" viewBox=\"0 0 " << num(width) << ' ' << num(height)
      << "\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"13\">\n"
      << "  <rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n"
      << "  <text x=\"" << kLeft << "\" y=\"28\" font-size=\"17\" font-weight=\"bold\">"
      << xml_escape("External data of " + title) << "</text>\n"
      << "  <rect x=\"" << kLeft << "\" y=\"46\" width=\"16\" height=\"16\" fill=\"" << kReferencedColour << "\"/>\n"
      << "  <text x=\"" << kLeft + 22 << "\" y=\"59\">referenced: some weight points at these bytes</text>\n"
      << "  <rect x=\"" << kLeft + 360 << "\" y=\"46\" width=\"16\" height=\"16\" fill=\"" << kDeadColour << "\"/>\n"
      << "  <text x=\"" << kLeft + 382 << "\" y=\"59\">dead: mapped, but no weight points here</text>\n";
  if (files.empty()) {
    svg << "  <text x=\"" << kLeft << "\" y=\"" << kFirstRow + 20 << "\">no external data files</text>\n";
  }
  for (std::size_t i = 0; i < files.size(); ++i) {
    const FileAccounting& f = files[i];
    const double y = kFirstRow + static_cast<double>(i) * kRowHeight;
    const double bar_y = y + 10;
    const double bar_h = 30;
    svg << "  <g>\n"
        << "  <text x=\"" << kLeft << "\" y=\"" << num(y) << "\" font-weight=\"bold\">"
        << xml_escape(f.path.string()) << "</text>\n"
        << "  <rect x=\"" << kLeft << "\" y=\"" << num(bar_y) << "\" width=\"" << kBarWidth << "\" height=\""
        << bar_h << "\" fill=\"#eeeeee\" stroke=\"#555555\" stroke-width=\"1\"/>\n";
    draw_ranges(svg, f.dead_ranges, f.mapped_bytes, bar_y, bar_h, kDeadColour);
    draw_ranges(svg, f.referenced_ranges, f.mapped_bytes, bar_y, bar_h, kReferencedColour);
    svg << "  <text x=\"" << kLeft << "\" y=\"" << num(bar_y + bar_h + 14) << "\" font-size=\"11\" fill=\"#555555\">0</text>\n"
        << "  <text x=\"" << kLeft + kBarWidth << "\" y=\"" << num(bar_y + bar_h + 14)
        << "\" font-size=\"11\" fill=\"#555555\" text-anchor=\"end\">" << f.mapped_bytes << " bytes</text>\n"
        << "  <text x=\"" << kLeft << "\" y=\"" << num(bar_y + bar_h + 31) << "\">"
        << xml_escape("mapped " + human_bytes(f.mapped_bytes) + "  ·  referenced " + human_bytes(f.referenced_bytes) +
                      " (" + percent(f.referenced_bytes, f.mapped_bytes) + ")  ·  dead " +
                      human_bytes(f.unreferenced_bytes) + " (" + percent(f.unreferenced_bytes, f.mapped_bytes) +
                      ") in " + std::to_string(f.dead_ranges.size()) + " range" +
                      (f.dead_ranges.size() == 1 ? "" : "s"))
        << "</text>\n  </g>\n";
  }
  svg << "</svg>\n";
  return svg.str();
}

Status write_dead_weight_map(const std::filesystem::path& out, const std::string& title,
                             const std::vector<FileAccounting>& files) {
  // Whole or not at all: a full disk or a signal leaves the earlier map as
  // it was, never a truncated one.
  Status written = write_file_atomically(out, dead_weight_map_svg(title, files));
  if (!written.ok()) written.error().message = "cannot write the --map SVG: " + written.error().message;
  return written;
}

}  // namespace ballast::cli
