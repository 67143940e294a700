#include "unit/onnx/external_fixture.hpp"

using namespace ballast;
using namespace ballast::testing;
using Bytes8 = std::vector<std::uint8_t>;

namespace {
Bytes8 pattern(std::uint64_t offset, std::uint64_t length) {
  Bytes8 out(length);
  for (std::uint64_t i = 0; i < length; ++i) out[i] = static_cast<std::uint8_t>((offset + i) % 251);
  return out;
}
}  // namespace

TEST_CASE("external data in a subdirectory resolves, slices and records the location") {
  ScratchDir dir("ext-subdir");
  auto blob = dir.write_pattern("weights/deep/blob.bin", 4096);
  auto model = load_written(dir, {external_tensor("w", 16, at("weights/deep/blob.bin", 1024, 64))});
  REQUIRE_MESSAGE(model.ok(), model.error().to_string());
  const WeightRef& w = weight_named(*model, "w");
  CHECK(w.storage == WeightRef::Storage::external);
  CHECK(w.is_external());
  REQUIRE(w.external.has_value());
  CHECK(w.external->location() == "weights/deep/blob.bin");
  CHECK(w.external->resolved() == blob);
  CHECK(w.external->offset == 1024);
  CHECK(w.external->length == 64);
  CHECK(w.external->length_was_given);
  CHECK(w.byte_length() == 64);
  CHECK(bytes_named(*model, "w") == pattern(1024, 64));
  auto p = model->store().external_mmap_provenance(w);
  REQUIRE(p.has_value());
  CHECK(model->store().mapping_path(p->mapping) == blob);
}

TEST_CASE("one mapping per file however many tensors share it") {
  ScratchDir dir("ext-shared");
  dir.write_pattern("shared.bin", 1000);
  dir.write_pattern("other.bin", 100);
  auto model = load_written(dir, {external_tensor("a", 10, at("shared.bin", 0, 40)),
                                  external_tensor("b", 10, at("shared.bin", 40)),
                                  external_tensor("c", 10, at("./shared.bin", 80)),
                                  external_tensor("d", 5, at("other.bin", 0))});
  REQUIRE_MESSAGE(model.ok(), model.error().to_string());
  const WeightStore& store = model->store();
  CHECK(store.mapping_count() == 2);
  CHECK(store.mapped_external_bytes() == 1100);
  auto pa = store.external_mmap_provenance(weight_named(*model, "a"));
  auto pc = store.external_mmap_provenance(weight_named(*model, "c"));
  REQUIRE(pa.has_value());
  REQUIRE(pc.has_value());
  CHECK(pa->mapping == pc->mapping);
  CHECK(bytes_named(*model, "c") == pattern(80, 40));
  CHECK_FALSE(weight_named(*model, "b").external->length_was_given);  // computed from dtype x dims
  CHECK(weight_named(*model, "b").external->length == 40);
  CHECK(bytes_named(*model, "d") == pattern(0, 20));
}

TEST_CASE("checksum and unknown keys are kept; unknown keys are reported, not fatal") {
  ScratchDir dir("ext-keys");
  dir.write_pattern("blob.bin", 64);
  Entries e = at("blob.bin", 0, 16);
  e.emplace_back("checksum", "da39a3ee5e6b4b0d3255bfef95601890afd80709");
  e.emplace_back("basepath", "/mnt/cache");
  auto model = load_written(dir, {external_tensor("w", 4, e)});
  REQUIRE_MESSAGE(model.ok(), model.error().to_string());
  const auto& ext = *weight_named(*model, "w").external;
  CHECK(ext.checksum == "da39a3ee5e6b4b0d3255bfef95601890afd80709");
  REQUIRE(ext.unknown_keys.size() == 1);
  CHECK(ext.unknown_keys[0] == std::pair<std::string, std::string>{"basepath", "/mnt/cache"});
  REQUIRE(model->notes().size() == 1);
  CHECK(model->notes()[0].tensor == "w");
  CHECK(model->notes()[0].message.find("basepath") != std::string::npos);
}

TEST_CASE("a present length that disagrees with dtype x dims is a size mismatch") {
  ScratchDir dir("ext-len");
  dir.write_pattern("blob.bin", 64);
  auto model = load_written(dir, {external_tensor("w", 4, at("blob.bin", 0, 12))});
  CHECK(model.code() == ErrorCode::size_mismatch);
  CHECK(model.error().tensor == "w");
  CHECK(model.error().file.find("model.onnx") != std::string::npos);
  CHECK(model.error().offset.has_value());
  // 4-bit types: the length is ceil(n/2).
  auto int4 = load_written(dir, {external_tensor("q", 5, at("blob.bin", 0, 3), 22)});
  REQUIRE_MESSAGE(int4.ok(), int4.error().to_string());
  CHECK(bytes_named(*int4, "q") == pattern(0, 3));
}

TEST_CASE("the orphaned prefix of a re-exported blob is dead weight, with exact byte counts") {
  // The old export's tensors (first half) stay in the file; the new ones
  // were appended after them and are all the graph references.
  ScratchDir dir("ext-orphan");
  const std::uint64_t tensor_bytes = 4 * 1000;
  const std::uint64_t old_export = 3 * tensor_bytes + 12;  // odd size: no accidental alignment
  dir.write_pattern("model.onnx.data", old_export * 2);
  auto model = load_written(dir, {external_tensor("a", 1000, at("model.onnx.data", old_export + 0)),
                                  external_tensor("b", 1000, at("model.onnx.data", old_export + tensor_bytes)),
                                  external_tensor("c", 1000, at("model.onnx.data", old_export + 2 * tensor_bytes)),
                                  external_tensor("tail", 3, at("model.onnx.data", old_export + 3 * tensor_bytes))});
  REQUIRE_MESSAGE(model.ok(), model.error().to_string());
  const WeightStore& store = model->store();
  auto ref = store.referenced_weight_bytes();
  CHECK(store.mapped_external_bytes() == 2 * old_export);
  CHECK(ref.total == old_export);
  CHECK(store.unreferenced_external_bytes(ref) == old_export);
  auto dead = store.dead_ranges(ref);
  REQUIRE(dead.size() == 1);
  CHECK(dead[0].ranges == std::vector<ByteRange>{{0, old_export}});
  REQUIRE(ref.files.size() == 1);
  CHECK(ref.files[0].ranges == std::vector<ByteRange>{{old_export, old_export}});
}

TEST_CASE("overlapping and aliased external tensors count once") {
  ScratchDir dir("ext-overlap");
  dir.write_pattern("blob.bin", 1000);
  auto model = load_written(dir, {external_tensor("a", 25, at("blob.bin", 0)),     // [0,100)
                                  external_tensor("alias", 25, at("blob.bin", 0)), // same bytes
                                  external_tensor("over", 25, at("blob.bin", 60)), // [60,160)
                                  external_tensor("far", 10, at("blob.bin", 900))});
  REQUIRE_MESSAGE(model.ok(), model.error().to_string());
  auto ref = model->store().referenced_weight_bytes();
  CHECK(ref.total == 200);
  CHECK(model->store().unreferenced_external_bytes(ref) == 800);
  CHECK(model->store().dead_ranges(ref)[0].ranges == std::vector<ByteRange>{{160, 740}, {940, 60}});
  CHECK(bytes_named(*model, "alias") == bytes_named(*model, "a"));
}

TEST_CASE("symlinks that stay inside the model directory are followed") {
  ScratchDir dir("ext-inner-link");
  auto blob = dir.write_pattern("real/blob.bin", 64);
  std::filesystem::create_symlink(blob, dir / "link.bin");
  auto model = load_written(dir, {external_tensor("w", 4, at("link.bin", 16))});
  REQUIRE_MESSAGE(model.ok(), model.error().to_string());
  CHECK(weight_named(*model, "w").external->resolved() == blob);
  CHECK(weight_named(*model, "w").external->location() == "link.bin");
  CHECK(bytes_named(*model, "w") == pattern(16, 16));
}

TEST_CASE("Constant node values can be external too") {
  ScratchDir dir("ext-constant");
  dir.write_pattern("c.bin", 32);
  using namespace onnx_proto;
  Proto m = model(graph({node("Constant", {}, {"c"}, {attribute_tensor("value", external_tensor("", 8, at("c.bin", 0)))})}, {}));
  auto loaded = load_onnx(dir.write("model.onnx", m.data));
  REQUIRE_MESSAGE(loaded.ok(), loaded.error().to_string());
  CHECK(weight_named(*loaded, "c").source == WeightSource::constant);
  CHECK(weight_named(*loaded, "c").is_external());
  CHECK(bytes_named(*loaded, "c") == pattern(0, 32));
}

TEST_CASE("external_data entries without data_location EXTERNAL are ignored with a note") {
  ScratchDir dir("ext-ignored");
  Proto t = onnx_proto::tensor("w", 1, {1});
  onnx_proto::raw_data(t, {0, 0, 0x80, 0x3f});
  Proto e;
  e.str(1, "location").str(2, "nowhere.bin");
  t.msg(13, e);
  auto model = load_written(dir, {t});
  REQUIRE_MESSAGE(model.ok(), model.error().to_string());
  CHECK_FALSE(weight_named(*model, "w").is_external());
  REQUIRE(model->notes().size() == 1);
  CHECK(model->notes()[0].tensor == "w");
}
