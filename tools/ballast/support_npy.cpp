#include "support_npy.hpp"

#include <fstream>
#include <string>

namespace ballast::cli {

Status write_npy(const std::filesystem::path& path, std::string_view descr, const std::vector<std::uint64_t>& shape,
                 std::span<const std::byte> data) {
  std::string dims;
  for (std::uint64_t d : shape) dims += std::to_string(d) + ", ";
  if (shape.size() > 1) dims.resize(dims.size() - 1);  // "(3, 4)" but "(3,)"
  std::string header = "{'descr': '" + std::string(descr) + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  // Magic (6) + version (2) + length (2) + header + '\n', padded to 64 bytes.
  const std::size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) {
    Error e = make_error(ErrorCode::io, "cannot create file");
    e.file = path.string();
    return e;
  }
  const char magic[8] = {'\x93', 'N', 'U', 'M', 'P', 'Y', 1, 0};
  out.write(magic, 8);
  const auto len = static_cast<std::uint16_t>(header.size());
  const char len_le[2] = {static_cast<char>(len & 0xff), static_cast<char>(len >> 8)};
  out.write(len_le, 2);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  if (!out.flush()) {
    Error e = make_error(ErrorCode::io, "write failed");
    e.file = path.string();
    return e;
  }
  return Status();
}

std::string safe_file_stem(std::string_view name) {
  std::string out;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_';
    out += ok ? c : '_';
  }
  if (out.empty() || out[0] == '.') out.insert(out.begin(), '_');
  return out;
}

}  // namespace ballast::cli
