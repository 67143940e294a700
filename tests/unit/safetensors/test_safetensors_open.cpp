// safetensors through the public API: open_model on single files and
// sharded indexes, every dtype, the accounting, and the path rules shards
// share with ONNX external data.
#include "unit/safetensors/writer.hpp"
#include "unit/store/scratch_dir.hpp"

#include <ballast/dtype.hpp>
#include <ballast/model.hpp>
#include <ballast/onnx_loader.hpp>
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

using namespace ballast;
using namespace ballast::testing;

namespace {

std::vector<std::uint8_t> bytes_of(const Model& m, std::string_view name) {
  const WeightRef* w = m.weight(name);
  REQUIRE_MESSAGE(w != nullptr, std::string(name));
  auto b = m.store().bytes(*w);
  REQUIRE(b.has_value());
  const auto* p = reinterpret_cast<const std::uint8_t*>(b->data());
  return {p, p + b->size()};
}

Result<Model> open_written(const ScratchDir& dir, const std::vector<std::uint8_t>& file, const LoadOptions& o = {}) {
  return open_model(dir.write("model.safetensors", file), o);
}

std::string index_json(const std::vector<std::pair<std::string, std::string>>& map, std::string extra = "") {
  std::string json = "{\"metadata\":{\"total_size\":123,\"format\":\"pt\"}" + extra + ",\"weight_map\":{";
  for (std::size_t i = 0; i < map.size(); ++i)
    json += (i ? "," : "") + json_quoted(map[i].first) + ":" + json_quoted(map[i].second);
  return json + "}}";
}

}  // namespace

TEST_CASE("a safetensors file opens by its bytes: weights by name, zero-copy, metadata kept") {
  ScratchDir dir("st-single");
  const std::vector<StTensor> tensors = {
      {"model.embed_tokens.weight", "F32", {4, 3}, pattern(48)},
      {"model.norm.weight", "BF16", {3}, pattern(6, 3)},
      {"lm_head.weight", "F16", {2, 3}, pattern(12, 5)},
  };
  // Written under a name that says nothing: the format is told by the bytes.
  const auto path = dir.write("weights.bin", st_file(tensors, {{"format", "pt"}, {"source", "test"}}));
  CHECK(detect_model_format(path).value() == ModelFormat::safetensors);
  auto model = open_model(path);
  REQUIRE_MESSAGE(model.ok(), model.error().to_string());
  CHECK(model->format() == ModelFormat::safetensors);
  CHECK(model_format_name(model->format()) == "safetensors");
  CHECK(model->nodes().empty());
  REQUIRE(model->weight_order().size() == 3);
  CHECK(model->value_name(model->weight_order()[0]) == "model.embed_tokens.weight");
  const WeightRef* embed = model->weight("model.embed_tokens.weight");
  REQUIRE(embed != nullptr);
  CHECK(embed->dtype == DataType::float32);
  CHECK(embed->dims == Dims{4, 3});
  CHECK(embed->is_external());
  CHECK(model->weight("model.norm.weight")->dtype == DataType::bfloat16);
  CHECK(bytes_of(*model, "model.embed_tokens.weight") == pattern(48));
  CHECK(bytes_of(*model, "model.norm.weight") == pattern(6, 3));
  CHECK(bytes_of(*model, "lm_head.weight") == pattern(12, 5));
  // Borrowed from the one mapping of the file.
  CHECK(model->store().mapping_count() == 1);
  const auto whole = model->store().mmap_full_bytes(1);
  REQUIRE(whole.has_value());
  const auto b = model->store().bytes(*embed);
  CHECK(b->data() >= whole->data());
  CHECK(b->data() + b->size() <= whole->data() + whole->size());
  REQUIRE(model->metadata().size() == 2);
  CHECK(model->metadata()[0].key == "format");
  CHECK(model->metadata()[0].value == "pt");
  CHECK(model->metadata()[1].file == "weights.bin");
}

TEST_CASE("the accounting: the JSON header is the format's, not dead weight; everything else referenced") {
  ScratchDir dir("st-accounting");
  const std::vector<StTensor> tensors = {{"a", "F32", {8}, pattern(32)}, {"b", "U8", {5}, pattern(5)}};
  const auto file = st_file(tensors);
  auto model = open_written(dir, file);
  REQUIRE_MESSAGE(model.ok(), model.error().to_string());
  const WeightStore& store = model->store();
  const auto referenced = store.referenced_weight_bytes();
  CHECK(store.mapped_external_bytes() == file.size());
  CHECK(referenced.total == 37);
  CHECK(store.format_header_bytes() == file.size() - 37);
  CHECK(referenced.header_total == file.size() - 37);
  CHECK(store.unreferenced_external_bytes(referenced) == 0);
  const auto dead = store.dead_ranges(referenced);
  REQUIRE(dead.size() == 1);
  CHECK(dead[0].total == 0);
}

TEST_CASE("every dtype of the specification opens as its DataType, sub-byte ones by their bit size") {
  struct Row {
    const char* name;
    DataType type;
  };
  const Row rows[] = {
      {"BOOL", DataType::bool_},       {"U8", DataType::uint8},          {"I8", DataType::int8},
      {"I16", DataType::int16},        {"U16", DataType::uint16},        {"F16", DataType::float16},
      {"BF16", DataType::bfloat16},    {"I32", DataType::int32},         {"U32", DataType::uint32},
      {"F32", DataType::float32},      {"F64", DataType::float64},       {"I64", DataType::int64},
      {"U64", DataType::uint64},       {"C64", DataType::complex64},     {"F8_E4M3", DataType::float8e4m3fn},
      {"F8_E5M2", DataType::float8e5m2}, {"F8_E8M0", DataType::float8e8m0}, {"F8_E4M3FNUZ", DataType::float8e4m3fnuz},
      {"F8_E5M2FNUZ", DataType::float8e5m2fnuz}, {"F4", DataType::float4e2m1}, {"F6_E2M3", DataType::float6e2m3},
      {"F6_E3M2", DataType::float6e3m2},
  };
  ScratchDir dir("st-dtypes");
  std::vector<StTensor> tensors;
  for (const Row& r : rows) {
    // 8 elements fill whole bytes for every width.
    const std::size_t bytes = *dtype_storage_bytes(r.type, 8);
    tensors.push_back({std::string("t_") + r.name, r.name, {2, 4}, pattern(bytes)});
  }
  auto model = open_written(dir, st_file(tensors));
  REQUIRE_MESSAGE(model.ok(), model.error().to_string());
  for (const Row& r : rows) {
    CAPTURE(r.name);
    const WeightRef* w = model->weight(std::string("t_") + r.name);
    REQUIRE(w != nullptr);
    CHECK(w->dtype == r.type);
    CHECK(w->byte_length() == *dtype_storage_bytes(r.type, 8));
  }
  CHECK(model->weight("t_F6_E2M3")->byte_length() == 6);
  CHECK(model->weight("t_F4")->byte_length() == 4);
}

TEST_CASE("a sub-byte tensor that does not fill whole bytes is refused, never rounded") {
  ScratchDir dir("st-subbyte");
  // 3 six-bit elements are 18 bits.
  auto r = open_written(dir, st_file({{"w", "F6_E2M3", {3}, pattern(3)}}));
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == ErrorCode::size_mismatch);
  CHECK(r.error().tensor == "w");
  CHECK(r.error().message.find("whole bytes") != std::string::npos);
}

TEST_CASE("holes in the byte buffer are refused by default, opened as dead bytes with allow_holes") {
  ScratchDir dir("st-holes");
  // a at [0, 8), b at [12, 16): bytes 8..12 belong to no tensor; 4 more trail.
  const std::string json =
      R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[4],"data_offsets":[12,16]}})";
  const auto file = st_file_raw(json, pattern(20));
  auto refused = open_written(dir, file);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code == ErrorCode::malformed);
  CHECK(refused.error().message.find("[8, 12)") != std::string::npos);
  // The way in, for the library's callers and the command line's.
  CHECK(refused.error().message.find("LoadOptions::allow_holes, --allow-holes") != std::string::npos);
  CHECK(refused.error().offset == 8 + json.size() + 8);
  LoadOptions o;
  o.allow_holes = true;
  auto model = open_written(dir, file, o);
  REQUIRE_MESSAGE(model.ok(), model.error().to_string());
  const auto referenced = model->store().referenced_weight_bytes();
  CHECK(referenced.total == 12);
  CHECK(model->store().unreferenced_external_bytes(referenced) == 8);
  const auto dead = model->store().dead_ranges(referenced);
  REQUIRE(dead.size() == 1);
  REQUIRE(dead[0].ranges.size() == 2);
  CHECK(dead[0].ranges[0] == ByteRange{8 + json.size() + 8, 4});
  CHECK(dead[0].ranges[1] == ByteRange{8 + json.size() + 16, 4});
  const auto buffer = pattern(20);
  CHECK(bytes_of(*model, "b") == std::vector<std::uint8_t>(buffer.begin() + 12, buffer.begin() + 16));
}

TEST_CASE("a sharded checkpoint: every shard once, tensors the index leaves out are dead bytes") {
  ScratchDir dir("st-index");
  const std::vector<StTensor> one = {{"layers.0.w", "F32", {2, 2}, pattern(16)}, {"orphan", "U8", {100}, pattern(100)}};
  const std::vector<StTensor> two = {{"layers.1.w", "F32", {2, 2}, pattern(16, 9)}, {"lm_head.weight", "F16", {4}, pattern(8)}};
  dir.write("model-00001-of-00002.safetensors", st_file(one, {{"format", "pt"}}));
  dir.write("model-00002-of-00002.safetensors", st_file(two));
  const auto index = dir.write("model.safetensors.index.json",
                               index_json({{"layers.0.w", "model-00001-of-00002.safetensors"},
                                           {"layers.1.w", "model-00002-of-00002.safetensors"},
                                           {"lm_head.weight", "model-00002-of-00002.safetensors"}},
                                          ",\"unknown\":[1,{\"deep\":[]}]"));
  CHECK(detect_model_format(index).value() == ModelFormat::safetensors_index);
  auto model = open_model(index);
  REQUIRE_MESSAGE(model.ok(), model.error().to_string());
  CHECK(model->format() == ModelFormat::safetensors_index);
  CHECK(model->weight_order().size() == 3);
  CHECK(model->weight("orphan") == nullptr);
  CHECK(bytes_of(*model, "layers.1.w") == pattern(16, 9));
  CHECK(model->store().mapping_count() == 2);
  const auto referenced = model->store().referenced_weight_bytes();
  CHECK(referenced.total == 40);
  // The orphan's 100 bytes are dead, like an orphaned ONNX prefix.
  CHECK(model->store().unreferenced_external_bytes(referenced) == 100);
  // Index metadata first (numbers as text), then each shard's.
  REQUIRE(model->metadata().size() == 3);
  CHECK(model->metadata()[0].key == "total_size");
  CHECK(model->metadata()[0].value == "123");
  CHECK(model->metadata()[0].file == "model.safetensors.index.json");
  CHECK(model->metadata()[2].file == "model-00001-of-00002.safetensors");
}

TEST_CASE("index errors name both sides") {
  ScratchDir dir("st-index-errors");
  dir.write("a.safetensors", st_file({{"x", "U8", {4}, pattern(4)}, {"y", "U8", {4}, pattern(4)}}));
  dir.write("b.safetensors", st_file({{"y", "U8", {4}, pattern(4)}}));
  auto open_index = [&](const std::string& json) { return open_model(dir.write("m.safetensors.index.json", json)); };

  SUBCASE("a tensor the index names is not in its shard") {
    auto r = open_index(index_json({{"x", "a.safetensors"}, {"z", "a.safetensors"}}));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == ErrorCode::not_found);
    CHECK(r.error().tensor == "z");
    CHECK(r.error().message.find("'a.safetensors'") != std::string::npos);
  }
  SUBCASE("a tensor in two shards") {
    // Whichever of the two opened shards the index names, the first or the
    // second: readers that take the first or the last would disagree.
    dir.write("d.safetensors", st_file({{"y", "U8", {4}, pattern(4)}, {"z", "U8", {4}, pattern(4)}}));
    for (const char* named : {"d.safetensors", "a.safetensors"}) {
      CAPTURE(std::string(named));
      auto r = open_index(index_json({{"x", "a.safetensors"}, {"y", named}, {"z", "d.safetensors"}}));
      REQUIRE_FALSE(r.ok());
      CHECK(r.error().code == ErrorCode::malformed);
      CHECK(r.error().tensor == "y");
      CHECK(r.error().message.find("readers disagree") != std::string::npos);
      CHECK(r.error().message.find("'a.safetensors'") != std::string::npos);
      CHECK(r.error().message.find("'d.safetensors'") != std::string::npos);
    }
    auto r = open_index(index_json({{"x", "a.safetensors"}, {"y", "b.safetensors"}}));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().tensor == "y");
    CHECK(r.error().message.find("'a.safetensors'") != std::string::npos);
    CHECK(r.error().message.find("'b.safetensors'") != std::string::npos);
  }
  SUBCASE("a tensor placed in the wrong, opened shard") {
    dir.write("c.safetensors", st_file({{"w", "U8", {4}, pattern(4)}}));
    auto r = open_index(index_json({{"x", "c.safetensors"}, {"w", "a.safetensors"}, {"y", "a.safetensors"}}));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == ErrorCode::not_found);
    CHECK(r.error().message.find("but it is in shard") != std::string::npos);
  }
  SUBCASE("one shard under two names") {
    auto r = open_index(index_json({{"x", "a.safetensors"}, {"y", "./a.safetensors"}}));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == ErrorCode::malformed);
    CHECK(r.error().message.find("listed twice") != std::string::npos);
  }
  SUBCASE("a shard path escaping the directory") {
    ScratchDir outside("st-outside");
    outside.write("c.safetensors", st_file({{"q", "U8", {1}, pattern(1)}}));
    const std::string rel = "../" + outside.path().filename().string() + "/c.safetensors";
    auto r = open_index(index_json({{"q", rel}}));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == ErrorCode::path_escapes);
    auto a = open_index(index_json({{"q", (outside / "c.safetensors").string()}}));
    REQUIRE_FALSE(a.ok());
    CHECK(a.error().code == ErrorCode::path_escapes);
    // A symlink inside the directory that points out of it.
    std::filesystem::create_symlink(outside / "c.safetensors", dir / "link.safetensors");
    auto s = open_index(index_json({{"q", "link.safetensors"}}));
    REQUIRE_FALSE(s.ok());
    CHECK(s.error().code == ErrorCode::path_escapes);
  }
  SUBCASE("a FIFO as a shard is never opened") {
    REQUIRE(::mkfifo((dir / "fifo.safetensors").c_str(), 0600) == 0);
    auto r = open_index(index_json({{"x", "fifo.safetensors"}}));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == ErrorCode::io);
  }
  SUBCASE("a hard-linked shard") {
    std::filesystem::create_hard_link(dir / "a.safetensors", dir / "hard.safetensors");
    auto r = open_index(index_json({{"x", "hard.safetensors"}}));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == ErrorCode::path_escapes);
    CHECK(r.error().message.find("hard links") != std::string::npos);
  }
  SUBCASE("a tensor twice in the weight_map") {
    auto r = open_index(R"({"weight_map":{"x":"a.safetensors","x":"b.safetensors"}})");
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == ErrorCode::malformed);
    CHECK(r.error().tensor == "x");
  }
  SUBCASE("an index without a weight_map") {
    // Told apart from other JSON by its weight_map: this is not an index at all.
    auto r = open_index(R"({"metadata":{}})");
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == ErrorCode::unsupported);
  }
}

TEST_CASE("a Hugging Face cache snapshot: shards are symlinks into ../../blobs/, opened with allow_model_real_dir") {
  ScratchDir cache("st-hf-cache");
  const std::filesystem::path blobs = cache.path() / "blobs", snapshot = cache.path() / "snapshots" / "rev";
  std::filesystem::create_directories(blobs);
  std::filesystem::create_directories(snapshot);
  cache.write("blobs/1f3a", st_file({{"x", "U8", {4}, pattern(4)}}));
  cache.write("blobs/9c2e", st_file({{"y", "F32", {2}, pattern(8, 3)}}));
  const std::string index =
      index_json({{"x", "model-00001-of-00002.safetensors"}, {"y", "model-00002-of-00002.safetensors"}});
  cache.write("blobs/77d0", std::vector<std::uint8_t>(index.begin(), index.end()));
  std::filesystem::create_symlink("../../blobs/1f3a", snapshot / "model-00001-of-00002.safetensors");
  std::filesystem::create_symlink("../../blobs/9c2e", snapshot / "model-00002-of-00002.safetensors");
  std::filesystem::create_symlink("../../blobs/77d0", snapshot / "model.safetensors.index.json");
  const auto path = snapshot / "model.safetensors.index.json";
  // Refused by default, and the refusal names the option that admits it
  // (as ONNX external data's does).
  auto refused = open_model(path);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code == ErrorCode::path_escapes);
  CHECK_MESSAGE(refused.error().message.find("allow_model_real_dir") != std::string::npos, refused.error().message);
  LoadOptions o;
  o.allow_model_real_dir = true;
  auto model = open_model(path, o);
  REQUIRE_MESSAGE(model.ok(), model.error().to_string());
  CHECK(bytes_of(*model, "x") == pattern(4));
  CHECK(bytes_of(*model, "y") == pattern(8, 3));
}

TEST_CASE("open_model still opens ONNX, and refuses what it cannot read by name") {
  ScratchDir dir("st-detect");
  // A minimal ModelProto: ir_version 8.
  const auto onnx = dir.write("m.onnx", std::vector<std::uint8_t>{0x08, 0x08});
  auto m = open_model(onnx);
  REQUIRE_MESSAGE(m.ok(), m.error().to_string());
  CHECK(m->format() == ModelFormat::onnx);
  // GGUF's magic sends the file to the GGUF reader, which says where it ends.
  auto gguf = open_model(dir.write("m.gguf", std::string("GGUF\3\0\0\0", 8)));
  REQUIRE_FALSE(gguf.ok());
  CHECK(gguf.error().code == ErrorCode::out_of_bounds);
  CHECK(gguf.error().message.find("GGUF") != std::string::npos);
  auto text = open_model(dir.write("readme.txt", std::string("hello")));
  REQUIRE_FALSE(text.ok());
  CHECK(text.error().code == ErrorCode::unsupported);
  auto empty = open_model(dir.write("empty", std::string()));
  REQUIRE_FALSE(empty.ok());
  CHECK(open_model(dir / "missing").error().code == ErrorCode::not_found);
}

TEST_CASE("a safetensors file truncated while open: reads are io errors naming it, never SIGBUS") {
  ScratchDir dir("st-truncated");
  const auto path = dir.write("model.safetensors", st_file({{"w", "F32", {4096}, pattern(16384)}}));
  auto model = open_model(path);
  REQUIRE(model.ok());
  const WeightRef& w = *model->weight("w");
  REQUIRE(::truncate(path.c_str(), 100) == 0);
  const Status changed = model->store().check_unchanged(w);
  REQUIRE_FALSE(changed.ok());
  CHECK(changed.code() == ErrorCode::io);
  std::vector<std::byte> dst(16384);
  const Status copied = model->store().copy_bytes(w, 0, dst);
  REQUIRE_FALSE(copied.ok());
  CHECK(copied.error().file.find("model.safetensors") != std::string::npos);
}

namespace {

// Pages of [offset, offset + length) of `mapping` resident in memory.
std::size_t resident_pages(Bytes mapping, std::size_t offset, std::size_t length) {
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> vec((length + page - 1) / page);
  auto* start = const_cast<std::byte*>(mapping.data()) + offset;
  if (::mincore(start, length, vec.data()) != 0) return SIZE_MAX;
  std::size_t n = 0;
  for (unsigned char v : vec) n += v & 1u;
  return n;
}

// Writes `bytes` to `path`, flushed and dropped from the page cache; false
// when the file system keeps the pages anyway (the test then says so).
bool write_uncached(const std::filesystem::path& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                              static_cast<std::streamsize>(bytes.size()));
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return false;
  ::fdatasync(fd);
  const bool dropped = ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0;
  ::close(fd);
  return dropped;
}

}  // namespace

TEST_CASE("opening reads the header and no tensor data (page-cache residency of the tensors stays zero)") {
  ScratchDir dir("st-no-read");
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  // Tensors of 1 MiB each, the buffer starting on a page boundary (the
  // header padded with spaces), so any resident tensor page was read.
  std::vector<StTensor> tensors;
  for (int i = 0; i < 4; ++i) tensors.push_back({"w" + std::to_string(i), "F32", {512, 512}, pattern(1 << 20, 3 + i)});
  std::string json = st_header_json(tensors);
  json.append(page - 8 - json.size() % page, ' ');
  const auto file = st_file_raw(json, st_buffer(tensors));
  const auto path = dir / "model.safetensors";
  if (!write_uncached(path, file)) {
    MESSAGE("skipped: posix_fadvise(DONTNEED) is refused here, so residency cannot be measured");
    return;
  }
  {
    // The file system must really have dropped the pages for this to measure anything.
    const int fd = ::open(path.c_str(), O_RDONLY);
    void* p = ::mmap(nullptr, file.size(), PROT_READ, MAP_SHARED, fd, 0);
    const std::size_t cached = resident_pages(Bytes(static_cast<std::byte*>(p), file.size()), 0, file.size());
    ::munmap(p, file.size());
    ::close(fd);
    if (cached != 0) {
      MESSAGE("skipped: the file system kept " << cached << " pages cached after POSIX_FADV_DONTNEED");
      return;
    }
  }
  auto model = open_model(path);
  REQUIRE_MESSAGE(model.ok(), model.error().to_string());
  const auto mapping = model->store().mmap_full_bytes(1);
  REQUIRE(mapping.has_value());
  const std::size_t header = 8 + json.size();
  REQUIRE(header % page == 0);
  const std::size_t before = resident_pages(*mapping, header, mapping->size() - header);
  if (before == SIZE_MAX) {
    MESSAGE("skipped: mincore is not available");
    return;
  }
  // The header pages were read (something was); the tensors' were not.
  CHECK(resident_pages(*mapping, 0, header) >= 1);
  CHECK(before == 0);
  // Reading a weight does read it: the measurement sees reads.
  std::vector<std::byte> dst(1 << 20);
  REQUIRE(model->store().copy_bytes(*model->weight("w2"), 0, dst).ok());
  CHECK(resident_pages(*mapping, header, mapping->size() - header) >= (1u << 20) / page);
}

TEST_CASE("a sharded checkpoint opens without reading its shards' tensors either") {
  ScratchDir dir("st-no-read-index");
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<std::size_t> headers;
  std::string map;
  for (int s = 0; s < 2; ++s) {
    std::vector<StTensor> tensors;
    for (int i = 0; i < 2; ++i) {
      const std::string name = "s" + std::to_string(s) + ".w" + std::to_string(i);
      tensors.push_back({name, "F32", {512, 512}, pattern(1 << 20, 5 + i)});
      map += std::string(map.empty() ? "" : ",") + "\"" + name + "\":\"shard" + std::to_string(s) + ".safetensors\"";
    }
    std::string json = st_header_json(tensors);
    json.append(page - 8 - json.size() % page, ' ');
    headers.push_back(8 + json.size());
    if (!write_uncached(dir / ("shard" + std::to_string(s) + ".safetensors"), st_file_raw(json, st_buffer(tensors)))) {
      MESSAGE("skipped: posix_fadvise(DONTNEED) is refused here");
      return;
    }
  }
  auto model = open_model(dir.write("model.safetensors.index.json", "{\"weight_map\":{" + map + "}}"));
  REQUIRE_MESSAGE(model.ok(), model.error().to_string());
  for (MappingId id = 1; id <= 2; ++id) {
    const auto mapping = model->store().mmap_full_bytes(id);
    REQUIRE(mapping.has_value());
    const std::size_t header = headers[id - 1];
    // Without MADV_RANDOM while the header is read, the fault on its page
    // reads ahead into the tensors.
    CHECK(resident_pages(*mapping, header, mapping->size() - header) == 0);
  }
}

TEST_CASE("a ModelProto is told by its first key, whichever field an exporter wrote first") {
  ScratchDir dir("st-detect-keys");
  // Each field of ModelProto with its wire type: varints for ir_version (1)
  // and model_version (5), length-delimited for the rest; training_info (20)
  // and functions (25) have two-byte keys.
  const std::vector<std::vector<std::uint8_t>> onnx = {
      {0x08, 0x08},        {0x28, 0x01},        {0x12, 0x00},        {0x1a, 0x00}, {0x22, 0x00},
      {0x32, 0x00},        {0x3a, 0x00},        {0x42, 0x00},        {0x72, 0x00},
      {0xa2, 0x01, 0x00}, {0xca, 0x01, 0x00},
  };
  for (const auto& head : onnx) {
    CAPTURE(static_cast<int>(head[0]));
    CHECK(detect_model_format(dir.write("m.onnx", head)).value() == ModelFormat::onnx);
  }
  // The right field with the wrong wire type, fields ModelProto lacks, a
  // two-byte key of another field: not ONNX.
  const std::vector<std::vector<std::uint8_t>> not_onnx = {
      {0x0a, 0x00}, {0x2a, 0x00}, {0x10, 0x00}, {0x48, 0x00}, {0x70, 0x00},
      {0x4a, 0x00}, {0x6a, 0x00}, {0x7a, 0x00}, {0xa2, 0x02, 0x00}, {0xaa, 0x01, 0x00}, {0xa2},
  };
  for (const auto& head : not_onnx) {
    CAPTURE(static_cast<int>(head[0]));
    auto got = detect_model_format(dir.write("m.bin", head));
    REQUIRE_FALSE(got.ok());
    CHECK(got.error().code == ErrorCode::unsupported);
  }
  // The refusal shows the first bytes in hex: all of a short file, at
  // most 8 of a longer one.
  const std::vector<std::pair<std::vector<std::uint8_t>, std::string>> shown = {
      {{0x0a}, "0a"},
      {{0x0a, 0x00, 0xff}, "0a00ff"},
      {{0x4a, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0xef}, "4a010203040506ef"},
      {{0x4a, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0xef, 0x99}, "4a010203040506ef"},
  };
  for (const auto& [head, hex] : shown) {
    CAPTURE(hex);
    auto got = detect_model_format(dir.write("m.bin", head));
    REQUIRE_FALSE(got.ok());
    const std::string& message = got.error().message;
    const std::string tail = "it begins with bytes " + hex;
    CHECK_MESSAGE(
        (message.size() >= tail.size() && message.compare(message.size() - tail.size(), tail.size(), tail) == 0),
        message);
  }
}

TEST_CASE("an index whose weight_map comes after 4 KiB of metadata is still an index") {
  // Writers that sort keys put "metadata" first; a long one (a quantizer's
  // settings) pushed "weight_map" past the first 4 KiB, and the index was
  // refused as "not a model".
  ScratchDir dir("st-index-late-map");
  dir.write("w.safetensors", st_file({{"layers.0.w", "F32", {2}, pattern(8)}}));
  const std::string map = ",\"weight_map\":{\"layers.0.w\":\"w.safetensors\"}}";
  // The key wholly past 4 KiB, cut by the 4 KiB boundary, and past the
  // first 1 MiB chunk of the search (cut by that chunk's end too).
  for (const std::size_t before : {std::size_t{5000}, std::size_t{4090}, std::size_t{4096 - 5},
                                   (std::size_t{1} << 20) + 4096 - 3, std::size_t{3} << 20}) {
    CAPTURE(before);
    std::string json = "{\"metadata\":{\"note\":\"";
    json.append(before - json.size() - 2, 'x');
    json += "\"}";
    REQUIRE(json.size() == before);
    const auto index = dir.write("model.safetensors.index.json", json + map);
    auto format = detect_model_format(index);
    REQUIRE_MESSAGE(format.ok(), format.error().to_string());
    CHECK(*format == ModelFormat::safetensors_index);
    auto model = open_model(index);
    REQUIRE_MESSAGE(model.ok(), model.error().to_string());
    CHECK(bytes_of(*model, "layers.0.w") == pattern(8));
  }
  // A long JSON object without the key anywhere is still not a model.
  const auto other = dir.write("config.json", "{\"note\":\"" + std::string(10000, 'y') + "\"}");
  auto got = detect_model_format(other);
  REQUIRE_FALSE(got.ok());
  CHECK(got.error().code == ErrorCode::unsupported);
  // Only a JSON object is searched past 4 KiB: a file that begins with
  // anything else (an array, text, whitespace before either) holding the key
  // later is not a model, and whitespace before the '{' is still an object.
  const std::string note = std::string(5000, 'z');
  for (const std::string start : {"[\"", "note: \"", " \r\n\t[\"", "0 \""}) {
    CAPTURE(start);
    auto refused = detect_model_format(dir.write("notes.json", start + note + "\"" + map));
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error().code == ErrorCode::unsupported);
  }
  auto spaced = detect_model_format(dir.write("spaced.json", " \r\n\t{\"metadata\":{\"note\":\"" + note + "\"}" + map));
  REQUIRE_MESSAGE(spaced.ok(), spaced.error().to_string());
  CHECK(*spaced == ModelFormat::safetensors_index);
  // A caller's errno left at EINTR (a signal that interrupted its own call)
  // makes no read of the search retry: only a read that failed is retried.
  const auto stale_path = dir.write("stale.json", "{\"metadata\":{\"note\":\"" + note + "\"}" + map);
  errno = EINTR;
  auto stale = detect_model_format(stale_path);
  REQUIRE_MESSAGE(stale.ok(), stale.error().to_string());
  CHECK(*stale == ModelFormat::safetensors_index);
}

TEST_CASE("tensor names in UTF-8 of every length open; surrogates and overlong forms do not") {
  ScratchDir dir("st-utf8");
  // Two-, three- and four-byte sequences, and the edges of the ranges the
  // checks exclude (U+D7FF and U+E000 beside the surrogates, U+10FFFF last).
  const std::vector<std::string> names = {
      "gr\xc3\xb6\xc3\x9f"
      "e",
      "\xe6\x97\xa5\xe6\x9c\xac", "\xed\x9f\xbf", "\xee\x80\x80", "\xf0\x9f\x98\x80", "\xf4\x8f\xbf\xbf",
      "\xe0\xa0\x80",
      // Each lead byte's range at both ends: U+0080 and U+07FF (C2, DF),
      // U+FFFD and U+FFFF (EF), U+10000 (F0).
      "\xc2\x80", "\xdf\xbf", "\xef\xbf\xbd", "\xef\xbf\xbf", "\xf0\x90\x80\x80"};
  for (const std::string& name : names) {
    CAPTURE(name);
    auto model = open_written(dir, st_file({{name, "F32", {1}, pattern(4)}}));
    REQUIRE_MESSAGE(model.ok(), model.error().to_string());
    CHECK(model->weight(name) != nullptr);
  }
  // Just past each edge: a surrogate at both ends, U+110000, an overlong
  // three-byte U+07FF and an overlong four-byte U+FFFF.
  for (const std::string bad : {"\xed\xa0\x80", "\xed\xbf\xbf", "\xf4\x90\x80\x80", "\xe0\x9f\xbf", "\xf0\x8f\xbf\xbf"}) {
    CAPTURE(bad);
    auto model = open_written(dir, st_file({{bad, "F32", {1}, pattern(4)}}));
    REQUIRE_FALSE(model.ok());
    CHECK(model.error().code == ErrorCode::malformed);
  }
}

TEST_CASE("a model whose first bytes cannot be read is an io error naming it, at once") {
  // /proc/self/mem is a regular file whose offset 0 (the unmapped first
  // page of this process) reads as EIO: the sniff's one read fails for a
  // reason that is not EINTR, so it is said, not retried.
  const std::filesystem::path mem = "/proc/self/mem";
  auto got = detect_model_format(mem);
  REQUIRE_FALSE(got.ok());
  CHECK(got.error().code == ErrorCode::io);
  CHECK(got.error().file == mem.string());
  CHECK_MESSAGE(got.error().message.find("reading the model's first bytes") != std::string::npos,
                got.error().to_string());
  auto model = open_model(mem);
  REQUIRE_FALSE(model.ok());
  CHECK(model.error().code == ErrorCode::io);
}
