// The orphaned-prefix model, written in C++ (no python at test time): a
// data file re-exported by appending fresh tensors to the old blob without
// truncating it, so its first half is an orphaned prefix no weight points
// at. Same layout as tools/gen/make_test_models.py's `orphaned_prefix`
// (float32 [96, 64], float32 [96], float16 [64, 32]), with a graph that
// consumes them, so derivations are planned:
//
//   h = MatMul(X, w0)   w0 float32 [96, 64]  -> transpose, to_f16, quant_int8
//   a = Add(X, w1)      w1 float32 [96]      -> nothing
//   y = MatMul(h, w2)   w2 float16 [64, 32]  -> transpose, quant_int8
//
// Used by the conformance suite and the unit tests; every figure below is
// exact (docs/residency.md works the budget out from them).
#pragma once

#include "unit/onnx/proto_builder.hpp"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace ballast::test_models {

struct OrphanedPrefixModel {
  static constexpr std::uint64_t kW0Bytes = 96 * 64 * 4;                        // 24576
  static constexpr std::uint64_t kW1Bytes = 96 * 4;                             // 384
  static constexpr std::uint64_t kW2Bytes = 64 * 32 * 2;                        // 4096
  static constexpr std::uint64_t kReferenced = kW0Bytes + kW1Bytes + kW2Bytes;  // 29056
  static constexpr std::uint64_t kPrefix = kReferenced;                         // the old export: the same tensors
  static constexpr std::uint64_t kFileBytes = kPrefix + kReferenced;            // 58112
  // Planned derivations' outputs (derivation_sizes):
  //   w0: transpose 96*64*4 + to_f16 96*64*2 + quant_int8 [64 x 96] codes 64*96 + scales 64*4
  //   w2: transpose 64*32*2 + quant_int8 [32 x 64] codes 32*64 + scales 32*4
  static constexpr std::uint64_t kDerived = (24576 + 12288 + 6144 + 256) + (4096 + 2048 + 128);  // 49536
  static constexpr std::uint64_t kDerivations = 5;
  static constexpr std::uint64_t kW0Offset = kPrefix;
  static constexpr std::uint64_t kW1Offset = kW0Offset + kW0Bytes;
  static constexpr std::uint64_t kW2Offset = kW1Offset + kW1Bytes;

  std::filesystem::path onnx;  // <dir>/model.onnx
  std::filesystem::path data;  // <dir>/model.data

  // Writes model.onnx and model.data into `dir` (created). Bytes are a
  // deterministic pattern; the prefix differs from the live tensors.
  static OrphanedPrefixModel write(const std::filesystem::path& dir) {
    using testing::Proto;
    std::filesystem::create_directories(dir);
    OrphanedPrefixModel m{dir / "model.onnx", dir / "model.data"};
    std::vector<char> blob(kFileBytes);
    for (std::size_t i = 0; i < blob.size(); ++i)
      blob[i] = static_cast<char>(i < kPrefix ? (i * 7 + 1) & 0x7f : ((i * 131 + 17) >> 3) & 0x3f);
    std::ofstream(m.data, std::ios::binary | std::ios::trunc)
        .write(blob.data(), static_cast<std::streamsize>(blob.size()));

    auto tensor = [](const char* name, int dtype, std::initializer_list<std::int64_t> dims, std::uint64_t offset,
                     std::uint64_t length) {
      Proto t = testing::onnx_proto::tensor(name, dtype, dims);
      for (auto [k, v] : {std::pair<std::string, std::string>{"location", "model.data"},
                          {"offset", std::to_string(offset)},
                          {"length", std::to_string(length)}}) {
        Proto e;
        e.str(1, k).str(2, v);
        t.msg(13, e);
      }
      t.varint(14, 1);  // data_location = EXTERNAL
      return t;
    };
    auto node = [](const char* name, const char* op, const char* a, const char* b, const char* out) {
      Proto n;
      n.str(1, a).str(1, b).str(2, out).str(3, name).str(4, op);
      return n;
    };
    Proto g;
    g.msg(1, node("mm0", "MatMul", "X", "w0", "h"));
    g.msg(1, node("add1", "Add", "X", "w1", "a"));
    g.msg(1, node("mm2", "MatMul", "h", "w2", "y"));
    g.str(2, "orphaned_prefix");
    g.msg(5, tensor("w0", 1, {96, 64}, kW0Offset, kW0Bytes));  // FLOAT
    g.msg(5, tensor("w1", 1, {96}, kW1Offset, kW1Bytes));
    g.msg(5, tensor("w2", 10, {64, 32}, kW2Offset, kW2Bytes));  // FLOAT16
    const Proto model = testing::onnx_proto::model(g);
    std::ofstream(m.onnx, std::ios::binary | std::ios::trunc)
        .write(reinterpret_cast<const char*>(model.data.data()), static_cast<std::streamsize>(model.data.size()));
    return m;
  }
};

}  // namespace ballast::test_models
