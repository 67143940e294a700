#include <ballast/weight_store.hpp>

#include "store/mapped_file.hpp"
#include "store/store_access.hpp"
#include "unit/store/scratch_dir.hpp"

#include <doctest/doctest.h>

#include <sys/resource.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

using namespace ballast;
using ballast::testing::ScratchDir;

namespace {

WeightRef external_ref(const std::filesystem::path& resolved, std::uint64_t offset, std::uint64_t length) {
  WeightRef w;
  w.dtype = DataType::uint8;
  w.dims = {static_cast<std::int64_t>(length)};
  w.storage = WeightRef::Storage::external;
  ExternalLocation loc;
  loc.file = std::make_shared<const ExternalFile>(ExternalFile{resolved.filename().string(), resolved});
  loc.offset = offset;
  loc.length = length;
  w.external = loc;
  return w;
}

std::uint8_t pattern_at(std::uint64_t i) { return static_cast<std::uint8_t>(i % 251); }

}  // namespace

TEST_CASE("map_external is idempotent by canonical path") {
  ScratchDir dir("store-idem");
  auto blob = dir.write_pattern("w/blob.bin", 1000);
  std::filesystem::create_symlink(blob, dir / "alias.bin");

  WeightStore store;
  auto a = store.map_external(blob);
  REQUIRE(a.ok());
  auto b = store.map_external(dir / "w/../w/./blob.bin");
  auto c = store.map_external(dir / "alias.bin");
  REQUIRE(b.ok());
  REQUIRE(c.ok());
  CHECK(*a == *b);
  CHECK(*a == *c);
  CHECK(*a != 0);
  CHECK(store.mapping_count() == 1);
  CHECK(store.mapped_external_bytes() == 1000);
  CHECK(store.mapping_for(blob) == *a);
  CHECK(store.mapping_for(dir / "alias.bin") == *a);
  CHECK(store.mapping_path(*a) == blob);
  CHECK_FALSE(store.mapping_for(dir / "nope.bin").has_value());
  CHECK_FALSE(store.mapping_path(0).has_value());
  CHECK_FALSE(store.mapping_path(*a + 1).has_value());

  auto other = store.map_external(dir.write_pattern("other.bin", 10));
  REQUIRE(other.ok());
  CHECK(*other != *a);
  CHECK(store.mapping_count() == 2);
  CHECK(store.mapped_external_bytes() == 1010);
}

TEST_CASE("zero-length files map to an empty region") {
  ScratchDir dir("store-empty");
  auto empty = dir.write("empty.bin", std::vector<std::uint8_t>{});
  WeightStore store;
  auto id = store.map_external(empty);
  REQUIRE(id.ok());
  auto full = store.mmap_full_bytes(*id);
  REQUIRE(full.has_value());
  CHECK(full->empty());
  CHECK(store.mmap_region_bytes(*id, 0, 0).has_value());
  CHECK_FALSE(store.mmap_region_bytes(*id, 0, 1).has_value());
  CHECK(store.mapped_external_bytes() == 0);
  auto ref = store.referenced_weight_bytes();
  CHECK(store.unreferenced_external_bytes(ref) == 0);
  CHECK(store.dead_ranges(ref).at(0).ranges.empty());
}

TEST_CASE("map_external refuses what is not a regular file, before opening it") {
  ScratchDir dir("store-kinds");
  WeightStore store;
  auto missing = store.map_external(dir / "missing.bin");
  CHECK(missing.code() == ErrorCode::not_found);
  CHECK(missing.error().file.find("missing.bin") != std::string::npos);

  auto directory = store.map_external(dir.path());
  CHECK(directory.code() == ErrorCode::io);
  CHECK(directory.error().message.find("directory") != std::string::npos);

  REQUIRE(::mkfifo((dir / "fifo").c_str(), 0600) == 0);
  auto fifo = store.map_external(dir / "fifo");  // would block forever if opened
  CHECK(fifo.code() == ErrorCode::io);
  CHECK(fifo.error().message.find("FIFO") != std::string::npos);

  auto device = store.map_external("/dev/null");
  CHECK(device.code() == ErrorCode::io);
  CHECK(device.error().message.find("device") != std::string::npos);

  std::filesystem::create_symlink(dir / "gone", dir / "dangling");
  CHECK(store.map_external(dir / "dangling").code() == ErrorCode::not_found);
  CHECK(store.mapping_count() == 0);
}

TEST_CASE("bytes() borrows inline bytes and slices mappings, refusing what is out of bounds") {
  ScratchDir dir("store-bytes");
  auto blob = dir.write_pattern("blob.bin", 4096);
  WeightStore store;

  const std::byte inline_data[3] = {std::byte{7}, std::byte{8}, std::byte{9}};
  WeightRef inl;
  inl.dtype = DataType::uint8;
  inl.dims = {3};
  inl.inline_bytes = Bytes(inline_data, 3);
  auto ib = store.bytes(inl);
  REQUIRE(ib.has_value());
  CHECK(ib->data() == inline_data);
  CHECK(ib->size() == 3);
  CHECK_FALSE(store.external_mmap_provenance(inl).has_value());

  auto slice = external_ref(blob, 1000, 16);
  CHECK_FALSE(store.bytes(slice).has_value());  // not mapped yet
  auto id = store.map_external(blob);
  REQUIRE(id.ok());
  auto b = store.bytes(slice);
  REQUIRE(b.has_value());
  REQUIRE(b->size() == 16);
  for (std::size_t i = 0; i < 16; ++i) CHECK(std::to_integer<std::uint8_t>((*b)[i]) == pattern_at(1000 + i));

  auto p = store.external_mmap_provenance(slice);
  REQUIRE(p.has_value());
  CHECK(p->mapping == *id);
  CHECK(p->offset == 1000);
  CHECK(p->length == 16);
  auto region = store.mmap_region_bytes(p->mapping, p->offset, p->length);
  REQUIRE(region.has_value());
  CHECK(region->data() == b->data());

  CHECK(store.bytes(external_ref(blob, 4096, 0)).has_value());           // empty at the very end
  CHECK(store.bytes(external_ref(blob, 0, 4096)).has_value());           // the whole file
  CHECK_FALSE(store.bytes(external_ref(blob, 4090, 7)).has_value());     // past EOF
  CHECK_FALSE(store.bytes(external_ref(blob, 4097, 0)).has_value());     // starts past EOF
  CHECK_FALSE(store.bytes(external_ref(blob, 8, UINT64_MAX)).has_value());  // offset+length wraps
  CHECK_FALSE(store.bytes(external_ref(blob, UINT64_MAX, 2)).has_value());
  CHECK_FALSE(store.external_mmap_provenance(external_ref(blob, 4090, 7)).has_value());
  CHECK_FALSE(store.mmap_region_bytes(*id, UINT64_MAX, 2).has_value());
  CHECK_FALSE(store.mmap_region_bytes(*id + 1, 0, 1).has_value());
  CHECK_FALSE(store.mmap_region_bytes(0, 0, 1).has_value());
  CHECK_FALSE(store.mmap_full_bytes(*id + 1).has_value());
  CHECK(store.mmap_full_bytes(*id)->size() == 4096);

  WeightRef broken = slice;
  broken.external.reset();  // external storage without a location never resolves
  CHECK_FALSE(store.bytes(broken).has_value());
}

TEST_CASE("referenced bytes: overlapping and aliased ranges count once, clipped to the file") {
  ScratchDir dir("store-ref");
  auto a = dir.write_pattern("a.bin", 1000);
  auto b = dir.write_pattern("b.bin", 500);
  auto unused = dir.write_pattern("unused.bin", 64);
  WeightStore store;
  REQUIRE(store.map_external(a).ok());
  REQUIRE(store.map_external(b).ok());
  REQUIRE(store.map_external(unused).ok());
  REQUIRE(store.add(ValueId{0}, external_ref(a, 0, 100)).ok());
  REQUIRE(store.add(ValueId{1}, external_ref(a, 50, 100)).ok());  // overlaps [0,100)
  REQUIRE(store.add(ValueId{2}, external_ref(a, 0, 100)).ok());   // aliases weight 0
  REQUIRE(store.add(ValueId{3}, external_ref(a, 600, 100)).ok());
  // add() refuses these two; the loader's way in stores them, to show the
  // accounting clips what it cannot trust.
  CHECK(store.add(ValueId{4}, external_ref(b, 400, 200)).code() == ErrorCode::out_of_bounds);
  CHECK(store.add(ValueId{5}, external_ref(dir / "not-mapped.bin", 0, 10)).code() == ErrorCode::not_found);
  store::StoreAccess::weights(store)[ValueId{4}] = external_ref(b, 400, 200);  // runs past EOF: clipped
  store::StoreAccess::weights(store)[ValueId{5}] = external_ref(dir / "not-mapped.bin", 0, 10);

  auto ref = store.referenced_weight_bytes();
  REQUIRE(ref.files.size() == 3);
  CHECK(ref.files[0].path == a);
  CHECK(ref.files[0].mapped_bytes == 1000);
  CHECK(ref.files[0].referenced_bytes == 250);
  CHECK(ref.files[0].ranges == std::vector<ByteRange>{{0, 150}, {600, 100}});
  CHECK(ref.files[1].referenced_bytes == 100);
  CHECK(ref.files[2].referenced_bytes == 0);
  CHECK(ref.total == 350);

  CHECK(store.mapped_external_bytes() == 1564);
  CHECK(store.unreferenced_external_bytes(ref) == 1564 - 350);
  auto dead = store.dead_ranges(ref);
  REQUIRE(dead.size() == 3);
  CHECK(dead[0].ranges == std::vector<ByteRange>{{150, 450}, {700, 300}});
  CHECK(dead[0].total == 750);
  CHECK(dead[1].ranges == std::vector<ByteRange>{{0, 400}});
  CHECK(dead[2].ranges == std::vector<ByteRange>{{0, 64}});
  CHECK(dead[0].total + dead[1].total + dead[2].total == store.unreferenced_external_bytes(ref));
}

TEST_CASE("add(): the checked way in refuses a second weight, an unmapped file and a range outside its mapping") {
  ScratchDir dir("store-add");
  auto a = dir.write_pattern("a.bin", 1000);
  auto elsewhere = dir.write_pattern("elsewhere.bin", 1000);
  WeightStore store;
  REQUIRE(store.map_external(a).ok());

  CHECK(store.add(ValueId{0}, external_ref(a, 0, 1000)).ok());  // the whole file
  CHECK(store.add(ValueId{1}, external_ref(a, 1000, 0)).ok());  // empty, at the end
  const Status twice = store.add(ValueId{0}, external_ref(a, 0, 10));
  CHECK(twice.code() == ErrorCode::invalid_argument);
  CHECK(store.weights().at(ValueId{0}).external->length == 1000);  // the first one stays

  const Status unmapped = store.add(ValueId{2}, external_ref(elsewhere, 0, 10));
  CHECK(unmapped.code() == ErrorCode::not_found);
  CHECK(unmapped.error().file == elsewhere.string());
  CHECK(store.add(ValueId{3}, external_ref(a, 999, 2)).code() == ErrorCode::out_of_bounds);
  CHECK(store.add(ValueId{4}, external_ref(a, 1001, 0)).code() == ErrorCode::out_of_bounds);
  CHECK(store.add(ValueId{5}, external_ref(a, 8, UINT64_MAX)).code() == ErrorCode::out_of_bounds);  // no wrap
  WeightRef no_file = external_ref(a, 0, 1);
  no_file.external->file.reset();
  CHECK(store.add(ValueId{6}, no_file).code() == ErrorCode::invalid_argument);

  WeightRef in;
  in.dtype = DataType::uint8;
  in.dims = {4};
  in.storage = WeightRef::Storage::inline_owned;
  in.owned = std::make_shared<const std::vector<std::byte>>(4);
  in.inline_bytes = Bytes(in.owned->data(), in.owned->size());
  CHECK(store.add(ValueId{7}, in).ok());
  CHECK(store.weights().size() == 3);  // 0, 1 and 7; nothing of what was refused

  WeightStore empty;  // maps nothing: every external weight is refused
  CHECK(empty.add(ValueId{0}, external_ref(a, 0, 1)).code() == ErrorCode::not_found);
}

TEST_CASE("an orphaned prefix is dead weight with exact byte counts") {
  // A re-export that appended fresh tensors after the old ones without
  // truncating: the first half of the blob is referenced by nothing.
  ScratchDir dir("store-orphan");
  const std::uint64_t half = 3 * 4096 + 17;
  auto blob = dir.write_pattern("model.onnx.data", 2 * half);
  WeightStore store;
  REQUIRE(store.map_external(blob).ok());
  REQUIRE(store.add(ValueId{0}, external_ref(blob, half, 4096)).ok());
  REQUIRE(store.add(ValueId{1}, external_ref(blob, half + 4096, half - 4096)).ok());

  auto ref = store.referenced_weight_bytes();
  CHECK(ref.total == half);
  CHECK(store.unreferenced_external_bytes(ref) == half);
  auto dead = store.dead_ranges(ref);
  REQUIRE(dead.size() == 1);
  CHECK(dead[0].ranges == std::vector<ByteRange>{{0, half}});
  CHECK(static_cast<double>(store.mapped_external_bytes()) / static_cast<double>(ref.total) == 2.0);
}

TEST_CASE("unreferenced bytes saturate at zero") {
  ScratchDir dir("store-sat");
  auto blob = dir.write_pattern("blob.bin", 100);
  WeightStore store;
  auto id = store.map_external(blob);
  REQUIRE(id.ok());
  ReferencedWeightBytes claimed;
  claimed.total = 1000;  // declared lengths beyond what is mapped
  claimed.files.push_back({*id, blob, 100, 1000, 0, {{0, 1000}}});
  CHECK(store.unreferenced_external_bytes(claimed) == 0);
  auto dead = store.dead_ranges(claimed);
  REQUIRE(dead.size() == 1);
  CHECK(dead[0].ranges.empty());
  CHECK(dead[0].total == 0);
}

TEST_CASE("keep_alive anchors live exactly as long as the store; moves keep everything") {
  ScratchDir dir("store-anchor");
  auto blob = dir.write_pattern("blob.bin", 64);
  auto anchor = std::make_shared<int>(42);
  std::weak_ptr<int> watch = anchor;
  {
    WeightStore store;
    store.keep_alive(std::move(anchor));
    auto id = store.map_external(blob);
    REQUIRE(id.ok());
    REQUIRE(store.add(ValueId{3}, external_ref(blob, 8, 8)).ok());
    auto before = store.bytes(store.weights().at(ValueId{3}));
    REQUIRE(before.has_value());

    WeightStore moved(std::move(store));
    CHECK_FALSE(watch.expired());
    auto after = moved.bytes(moved.weights().at(ValueId{3}));
    REQUIRE(after.has_value());
    CHECK(after->data() == before->data());
    CHECK(moved.mapping_count() == 1);
    CHECK(store.mapping_count() == 0);  // NOLINT(bugprone-use-after-move): moved-from answers as empty
    CHECK_FALSE(store.mmap_full_bytes(*id).has_value());
  }
  CHECK(watch.expired());
}

TEST_CASE("mappings do not hold a file descriptor each: thousands of files map") {
  ScratchDir dir("store-many");
  WeightStore store;
  // A low descriptor limit for the duration: a mapping that kept its
  // descriptor would run out long before the last file.
  rlimit saved{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &saved) == 0);
  rlimit low = saved;
  low.rlim_cur = std::min<rlim_t>(saved.rlim_cur, 256);
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &low) == 0);
  struct Restore {
    rlimit limit;
    ~Restore() { ::setrlimit(RLIMIT_NOFILE, &limit); }
  } restore{saved};
  const int files = 600;
  for (int i = 0; i < files; ++i) {
    auto p = dir.write_pattern("f" + std::to_string(i) + ".bin", 8);
    auto id = store.map_external(p);
    REQUIRE_MESSAGE(id.ok(), id.error().to_string());
  }
  CHECK(store.mapping_count() == files);
  CHECK(store.mapped_external_bytes() == 8u * files);
  auto first = store.mmap_full_bytes(1);
  REQUIRE(first.has_value());
  CHECK(std::to_integer<int>((*first)[7]) == 7);
}

TEST_CASE("the .onnx mapping is recorded on a fresh store and on one that maps files, which keeps its mappings") {
  ScratchDir dir("store-model-file");
  auto model = store::MappedFile::open(dir.write_pattern("model.onnx", 300));
  REQUIRE(model.ok());

  WeightStore fresh;
  CHECK(store::StoreAccess::model_file(fresh) == nullptr);
  store::StoreAccess::set_model_file(fresh, *model);
  CHECK(store::StoreAccess::model_file(fresh) == *model);

  // A store that already maps a data file (the loader records the .onnx
  // mapping after resolving external data) keeps that mapping.
  WeightStore mapped;
  auto blob = dir.write_pattern("blob.bin", 1000);
  auto id = mapped.map_external(blob);
  REQUIRE(id.ok());
  store::StoreAccess::set_model_file(mapped, *model);
  CHECK(store::StoreAccess::model_file(mapped) == *model);
  CHECK(mapped.mapping_count() == 1);
  CHECK(mapped.mapping_for(blob) == *id);
  CHECK(mapped.mapped_external_bytes() == 1000);
}

TEST_CASE("a format's header bytes are counted per mapping, by its id; id 0 and ids past the last are ignored") {
  // A safetensors or GGUF loader records its header's length on the
  // mapping it read it from: counted as accounted-for, never as dead.
  ScratchDir dir("store-header-bytes");
  auto a = dir.write_pattern("a.bin", 1000);
  auto b = dir.write_pattern("b.bin", 500);
  WeightStore store;
  auto ia = store.map_external(a);
  auto ib = store.map_external(b);
  REQUIRE(ia.ok());
  REQUIRE(ib.ok());
  CHECK(store.format_header_bytes() == 0);
  store::StoreAccess::set_header_bytes(store, *ia, 100);
  CHECK(store.format_header_bytes() == 100);
  store::StoreAccess::set_header_bytes(store, *ib, 40);
  CHECK(store.format_header_bytes() == 140);
  store::StoreAccess::set_header_bytes(store, *ia, 10);  // set, not added
  CHECK(store.format_header_bytes() == 50);
  store::StoreAccess::set_header_bytes(store, 0, 1 << 20);              // no mapping has id 0
  store::StoreAccess::set_header_bytes(store, *ib + 1, 1 << 20);        // past the last
  store::StoreAccess::set_header_bytes(store, ~MappingId{0}, 1 << 20);  // far past
  CHECK(store.format_header_bytes() == 50);
}

TEST_CASE("open errors are told apart: a symlink loop, a file as a directory, a long name, and any other errno") {
  ScratchDir dir("store-errno");
  auto blob = dir.write_pattern("blob.bin", 8);
  std::filesystem::create_symlink(dir / "loop_b", dir / "loop_a");
  std::filesystem::create_symlink(dir / "loop_a", dir / "loop_b");
  WeightStore store;

  auto loop = store.map_external(dir / "loop_a");  // open(2) says ELOOP
  REQUIRE_FALSE(loop.ok());
  CHECK(loop.code() == ErrorCode::io);
  CHECK_MESSAGE(loop.error().message == "too many levels of symbolic links", loop.error().to_string());

  auto under_file = store.map_external(blob / "x.bin");  // ENOTDIR
  CHECK(under_file.code() == ErrorCode::not_found);
  CHECK(under_file.error().message == "no such file");

  auto long_name = store.map_external(dir / std::string(300, 'n'));  // ENAMETOOLONG
  CHECK(long_name.code() == ErrorCode::io);
  CHECK(long_name.error().message == "path or file name too long");

  // Any other errno is said with its own text: EMFILE, with no descriptor
  // allowed for the duration.
  rlimit saved{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &saved) == 0);
  Result<MappingId> no_fd = make_error(ErrorCode::internal, "not run");
  {
    struct Restore {
      rlimit limit;
      ~Restore() { ::setrlimit(RLIMIT_NOFILE, &limit); }
    } restore{saved};
    rlimit none = saved;
    none.rlim_cur = 0;
    REQUIRE(::setrlimit(RLIMIT_NOFILE, &none) == 0);
    no_fd = store.map_external(blob);
  }
  REQUIRE_FALSE(no_fd.ok());
  CHECK(no_fd.code() == ErrorCode::io);
  CHECK_MESSAGE(no_fd.error().message == std::string("cannot open: ") + std::strerror(EMFILE),
                no_fd.error().to_string());
  CHECK(store.mapping_count() == 0);
}
