// libFuzzer target: arbitrary bytes through the protobuf wire reader and
// the ONNX loader. Every weight of a model that loads is read in full so
// that a slice reaching past its buffer shows up under ASan.
#include <ballast/onnx_loader.hpp>

#include <cstddef>
#include <cstdint>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string_view>
#include <vector>

namespace {

// External locations in the corpus point at fuzz-data/w.bin; a FIFO and a
// directory sit next to it so that those refusals are reachable too.
const std::filesystem::path& data_dir() {
  static const std::filesystem::path dir = BALLAST_FUZZ_DATA_DIR;
  return dir;
}

void prepare_data_dir() {
  std::filesystem::create_directories(data_dir() / "sub");
  std::ofstream blob(data_dir() / "w.bin", std::ios::binary | std::ios::trunc);
  for (int i = 0; i < 4096; ++i) blob.put(static_cast<char>(i * 31));
  std::ofstream(data_dir() / "sub" / "empty.bin", std::ios::binary | std::ios::trunc);
  std::filesystem::create_directories(data_dir() / "adir");
  if (!std::filesystem::exists(data_dir() / "fifo")) ::mkfifo((data_dir() / "fifo").c_str(), 0600);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  prepare_data_dir();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto bytes = std::as_bytes(std::span<const std::uint8_t>(data, size));
  ballast::LoadOptions options;
  options.max_tensor_elements = std::uint64_t{1} << 24;  // keep decoded buffers within the RSS limit
  auto model = ballast::load_onnx_from_bytes(bytes, data_dir(), options);
  if (!model) {
    (void)model.error().to_string();
    return 0;
  }
  const ballast::WeightStore& store = model->store();
  std::uint8_t sink = 0;
  for (ballast::ValueId id : model->weight_order()) {
    const ballast::WeightRef& w = store.weights().at(id);
    auto b = store.bytes(w);
    if (!b) __builtin_trap();  // the loader validated every range: this must resolve
    for (std::byte x : *b) sink ^= std::to_integer<std::uint8_t>(x);
    (void)model->value_name(id);
  }
  // The node table and the other values' ids are built on first use from
  // what the open validated: every view must be readable and every value a
  // node names must have an id that maps back to it.
  std::size_t text = 0;
  for (const ballast::NodeInfo& node : model->nodes()) {
    text += node.name.size() + node.op_type.size() + node.domain.size();
    for (const auto& a : node.int_attributes) text += a.name.size();
    for (auto list : {node.inputs, node.outputs}) {
      for (std::string_view v : list) {
        text += v.size();
        if (v.empty()) continue;
        auto id = model->value_id(v);
        if (!id || model->value_name(*id) != v) __builtin_trap();
      }
    }
  }
  sink ^= static_cast<std::uint8_t>(text);
  auto referenced = store.referenced_weight_bytes();
  (void)store.dead_ranges(referenced);
  if (store.unreferenced_external_bytes(referenced) > store.mapped_external_bytes()) __builtin_trap();
  volatile std::uint8_t keep = sink;
  (void)keep;
  return 0;
}
