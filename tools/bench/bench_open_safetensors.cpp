// bench_open_safetensors: open_model on a sharded safetensors checkpoint of
// 300 tensors in 4 shards (generated here, sparse: 2.3 GiB of tensors that
// take no disk), against its anchor measured in the same run: Python's
// json.loads of the index and the headers plus numpy.memmap of every tensor
// (tools/bench/safetensors_open_baseline.py, timed inside Python). Target:
// ballast's median at most 0.5x the anchor's. Also reports how many pages of
// tensor data the open left resident (mincore; the test
// unit_safetensors asserts zero).
#include <ballast/model.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace {

constexpr int kShards = 4;
constexpr int kTensors = 300;
constexpr int kRepeats = 21;

std::string header_json(int shard, std::uint64_t& buffer_bytes, std::vector<std::string>& names) {
  std::string json = "{\"__metadata__\":{\"format\":\"pt\"}";
  std::uint64_t at = 0;
  for (int t = shard; t < kTensors; t += kShards) {
    // Decoder-like sizes: every fourth tensor a 4096 x 4096 f16 projection, the rest 4096 x 256.
    const int rows = 4096, cols = t % 4 == 0 ? 4096 : 256;
    const std::uint64_t bytes = std::uint64_t(rows) * cols * 2;
    const std::string name = "model.layers." + std::to_string(t / 8) + ".w" + std::to_string(t);
    names.push_back(name);
    json += ",\"" + name + "\":{\"dtype\":\"F16\",\"shape\":[" + std::to_string(rows) + "," + std::to_string(cols) +
            "],\"data_offsets\":[" + std::to_string(at) + "," + std::to_string(at + bytes) + "]}";
    at += bytes;
  }
  json += "}";
  json.append((8 - (8 + json.size()) % 8) % 8, ' ');
  buffer_bytes = at;
  return json;
}

void write_checkpoint(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  std::string map;
  for (int s = 0; s < kShards; ++s) {
    std::uint64_t buffer = 0;
    std::vector<std::string> names;
    const std::string json = header_json(s, buffer, names);
    const std::string file = "model-0000" + std::to_string(s + 1) + "-of-0000" + std::to_string(kShards) + ".safetensors";
    std::ofstream out(dir / file, std::ios::binary | std::ios::trunc);
    const std::uint64_t n = json.size();
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>(n >> (8 * i)));
    out << json;
    out.close();
    std::filesystem::resize_file(dir / file, 8 + n + buffer);  // the tensors: a hole
    for (const std::string& name : names) map += (map.empty() ? "\"" : ",\"") + name + "\":\"" + file + "\"";
  }
  std::ofstream(dir / "model.safetensors.index.json") << "{\"metadata\":{\"total_size\":0},\"weight_map\":{" << map << "}}";
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main() {
  const std::filesystem::path dir = std::filesystem::path(BALLAST_BENCH_MODEL_DIR) / "safetensors_open";
  write_checkpoint(dir);
  const auto index = dir / "model.safetensors.index.json";

  std::vector<double> ballast_times;
  std::size_t weights = 0, resident = 0, tensor_pages = 0;
  for (int r = 0; r < kRepeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    auto model = ballast::open_model(index);
    ballast_times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    if (!model.ok()) {
      std::fprintf(stderr, "open_model: %s\n", model.error().to_string().c_str());
      return 1;
    }
    weights = model->weight_order().size();
    if (r == 0) {  // residency of the tensors (holes read as zero pages only when touched)
      const auto referenced = model->store().referenced_weight_bytes();
      const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
      for (const auto& f : referenced.files) {
        const auto bytes = model->store().mmap_full_bytes(f.mapping);
        const std::size_t from = (f.header_bytes + page - 1) / page * page;
        if (!bytes || from >= bytes->size()) continue;
        std::vector<unsigned char> vec((bytes->size() - from + page - 1) / page);
        if (::mincore(const_cast<std::byte*>(bytes->data()) + from, bytes->size() - from, vec.data()) != 0) continue;
        tensor_pages += vec.size();
        for (unsigned char v : vec) resident += v & 1u;
      }
    }
  }
  const std::string cmd = std::string(BALLAST_BENCH_PYTHON) + " " + BALLAST_SOURCE_DIR +
                          "/tools/bench/safetensors_open_baseline.py " + dir.string() + " " + std::to_string(kRepeats);
  FILE* p = ::popen(cmd.c_str(), "r");
  double anchor = 0;
  int anchor_tensors = 0;
  if (p == nullptr || std::fscanf(p, "%lf %d", &anchor, &anchor_tensors) != 2) {
    std::fprintf(stderr, "the Python anchor did not run: %s\n", cmd.c_str());
    if (p) ::pclose(p);
    return 1;
  }
  ::pclose(p);
  const double mine = median(ballast_times);
  const double ratio = mine / anchor;
  std::printf("safetensors open, %d tensors in %d shards (sparse), median of %d:\n", kTensors, kShards, kRepeats);
  std::printf("  ballast open_model:                      %8.3f ms (%zu weights)\n", mine * 1e3, weights);
  std::printf("  json.loads + numpy.memmap (anchor):      %8.3f ms (%d tensors)\n", anchor * 1e3, anchor_tensors);
  std::printf("  ratio ballast / anchor: %.3fx (target <= 0.5x: %s)\n", ratio, ratio <= 0.5 ? "met" : "NOT met");
  std::printf("  tensor pages resident after open: %zu of %zu\n", resident, tensor_pages);
  return 0;
}
