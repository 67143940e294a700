// A decode loop's shape in miniature, for the block pool's tests: kLayers
// weights of one size (float32 [64, 64], 16384 bytes each), chained by
// MatMul, and one weight of another size (float32 [32, 64], 8192 bytes)
// read by an Add. Every weight holds its own byte pattern, so a value read
// from another weight's block (a pooled block handed out wrong) differs.
//
//   h0 = MatMul(X, layer0) ... h7 = MatMul(h6, layer7);  y = Add(h7, odd)
#pragma once

#include "unit/onnx/proto_builder.hpp"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace ballast::test_models {

struct UniformLayersModel {
  static constexpr int kLayers = 8;
  static constexpr std::uint64_t kLayerBytes = 64 * 64 * 4;  // 16384
  static constexpr std::uint64_t kOddBytes = 32 * 64 * 4;    // 8192
  static constexpr std::uint64_t kFileBytes = kLayers * kLayerBytes + kOddBytes;

  static std::string layer(int i) { return "layer" + std::to_string(i); }

  // Writes model.onnx and model.data into `dir` (created).
  static void write(const std::filesystem::path& dir) {
    using testing::Proto;
    std::filesystem::create_directories(dir);
    std::vector<char> blob(kFileBytes);
    for (std::size_t i = 0; i < blob.size(); ++i)
      blob[i] = static_cast<char>(((i / kLayerBytes) * 37 + i * 13 + (i >> 9)) & 0x3f);  // per weight its own bytes
    std::ofstream(dir / "model.data", std::ios::binary | std::ios::trunc)
        .write(blob.data(), static_cast<std::streamsize>(blob.size()));

    auto tensor = [](const std::string& name, std::initializer_list<std::int64_t> dims, std::uint64_t offset,
                     std::uint64_t length) {
      Proto t = testing::onnx_proto::tensor(name.c_str(), 1, dims);  // FLOAT
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
    auto node = [](const std::string& name, const char* op, const std::string& a, const std::string& b,
                   const std::string& out) {
      Proto n;
      n.str(1, a).str(1, b).str(2, out).str(3, name).str(4, op);
      return n;
    };
    Proto g;
    std::string in = "X";
    for (int i = 0; i < kLayers; ++i) {
      const std::string out = "h" + std::to_string(i);
      g.msg(1, node("mm" + std::to_string(i), "MatMul", in, layer(i), out));
      in = out;
    }
    g.msg(1, node("add", "Add", in, "odd", "y"));
    g.str(2, "uniform_layers");
    for (int i = 0; i < kLayers; ++i) g.msg(5, tensor(layer(i), {64, 64}, i * kLayerBytes, kLayerBytes));
    g.msg(5, tensor("odd", {32, 64}, kLayers * kLayerBytes, kOddBytes));
    const Proto model = testing::onnx_proto::model(g);
    std::ofstream(dir / "model.onnx", std::ios::binary | std::ios::trunc)
        .write(reinterpret_cast<const char*>(model.data.data()), static_cast<std::streamsize>(model.data.size()));
  }
};

}  // namespace ballast::test_models
