// libFuzzer target for the external-data resolver: arbitrary locations
// (and LoadOptions) against a small generated tree with symlinks in and out
// of the model directory, absolute and relative, loops, a hard link to an
// outside file, a FIFO and a directory. Whatever loads must hold only bytes
// from inside the tree: the outside file is 0xEE, the hard-linked one 0xDD.
//
// Input: byte 0 = flags (bit 0: per-component walk instead of openat2,
// bit 1: allow_hard_links), bytes 1-2 = offset, the rest = the location.
#include <ballast/onnx_loader.hpp>

#include "store/safe_open.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace {

namespace fs = std::filesystem;

const fs::path& root() {
  static const fs::path dir = fs::path(BALLAST_FUZZ_DATA_DIR).parent_path() / "fuzz-resolver-data";
  return dir;
}
fs::path model_dir() { return root() / "model"; }

void fill(const fs::path& p, std::size_t n, char c) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << std::string(n, c);
}

void make_tree() {
  std::error_code ec;
  fs::remove_all(root(), ec);
  const fs::path m = model_dir();
  fs::create_directories(m / "sub" / "deeper");
  fs::create_directories(root() / "outside");
  fill(root() / "outside" / "secret.bin", 4096, '\xEE');
  fill(root() / "outside" / "linked.bin", 4096, '\xDD');
  for (char c = 'a'; c <= 'c'; ++c) fill(m / (std::string(1, c) + ".bin"), 4096, c);
  fill(m / "sub" / "s.bin", 4096, 's');
  fill(m / "sub" / "deeper" / "d.bin", 4096, 'd');
  fs::create_symlink("a.bin", m / "in_rel");
  fs::create_symlink(m / "b.bin", m / "in_abs");
  fs::create_symlink("../c.bin", m / "sub" / "up_in");
  fs::create_symlink("sub", m / "dir_in");
  fs::create_symlink("../outside/secret.bin", m / "out_rel");
  fs::create_symlink(root() / "outside" / "secret.bin", m / "out_abs");
  fs::create_symlink("../../outside", m / "sub" / "out_dir");
  fs::create_symlink("/proc/self/cwd", m / "magic");
  fs::create_symlink("/dev/zero", m / "dev");
  fs::create_symlink("loop", m / "loop");
  fs::create_symlink("ping", m / "pong");
  fs::create_symlink("pong", m / "ping");
  fs::create_symlink("../model/sub/../a.bin", m / "sub" / "round_trip");
  ::link((root() / "outside" / "linked.bin").c_str(), (m / "hard.bin").c_str());
  ::mkfifo((m / "fifo").c_str(), 0600);
}

// A ModelProto with one external uint8 tensor "w" of 16 elements.
void put_varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}
void put_len(std::string& out, std::uint32_t field, std::string_view payload) {
  put_varint(out, (static_cast<std::uint64_t>(field) << 3) | 2);
  put_varint(out, payload.size());
  out += payload;
}
std::string model_bytes(std::string_view location, std::uint64_t offset) {
  std::string tensor;
  put_varint(tensor, (1 << 3) | 0);  // dims: 16
  put_varint(tensor, 16);
  put_varint(tensor, (2 << 3) | 0);  // data_type: uint8
  put_varint(tensor, 2);
  put_len(tensor, 8, "w");
  std::string entry;
  put_len(entry, 1, "location");
  put_len(entry, 2, location);
  put_len(tensor, 13, entry);
  entry.clear();
  put_len(entry, 1, "offset");
  put_len(entry, 2, std::to_string(offset));
  put_len(tensor, 13, entry);
  put_varint(tensor, (14 << 3) | 0);  // data_location: EXTERNAL
  put_varint(tensor, 1);
  std::string graph;
  put_len(graph, 5, tensor);
  std::string model;
  put_varint(model, (1 << 3) | 0);  // ir_version
  put_varint(model, 8);
  put_len(model, 7, graph);
  return model;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  make_tree();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 3) return 0;
  const bool walk = (data[0] & 1) != 0;
  ballast::LoadOptions options;
  options.allow_hard_links = (data[0] & 2) != 0;
  const std::uint64_t offset = data[1] | (std::uint64_t{data[2]} << 8);
  const std::string_view location(reinterpret_cast<const char*>(data + 3), size - 3);
  const std::string bytes = model_bytes(location, offset);
  ballast::store::force_component_walk_for_testing(walk);
  auto model = ballast::load_onnx_from_bytes(std::as_bytes(std::span<const char>(bytes.data(), bytes.size())),
                                             model_dir(), options);
  ballast::store::force_component_walk_for_testing(false);
  if (!model) {
    // Errors may echo the location as written, never where a symlink led.
    if (location.find("outside") == std::string_view::npos &&
        model.error().to_string().find("fuzz-resolver-data/outside") != std::string::npos)
      __builtin_trap();
    return 0;
  }
  for (ballast::ValueId id : model->weight_order()) {
    auto b = model->store().bytes(model->store().weights().at(id));
    if (!b) __builtin_trap();
    for (std::byte x : *b) {
      const auto v = std::to_integer<unsigned char>(x);
      if (v == 0xEE) __builtin_trap();                              // read outside the model directory
      if (v == 0xDD && !options.allow_hard_links) __builtin_trap();  // read through a hard link
    }
  }
  return 0;
}
