// The CLI's shared helpers: human sizes, tables, digests, the dead-weight map,
// the per-file accounting that inspect prints and compact's wire rewriter.
#include "support/budget.hpp"
#include "support/derived_dump.hpp"
#include "support/format.hpp"
#include "support/hash.hpp"
#include "support/model.hpp"
#include "support/onnx_rewrite.hpp"
#include "support/replay_walk.hpp"
#include "support/svg.hpp"
#include "support/verify.hpp"

#include "unit/onnx/external_fixture.hpp"

#include <ballast/dtype.hpp>
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace cli = ballast::cli;

namespace {

ballast::Bytes as_bytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

std::size_t count(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("npy_descr: every whole-byte type's NumPy item size is its element size") {
  // A .npy whose type string is narrower than its elements holds a fraction
  // of the value (complex64 was "|u1": a transposed C64 weight's dump read
  // back as 1/8 of it). Block types are dumped as bytes of their own shape.
  int checked = 0;
  for (std::int32_t raw = 0; raw < 4096; ++raw) {
    if (!ballast::is_known_dtype(raw)) continue;
    const auto t = static_cast<ballast::DataType>(raw);
    const unsigned bits = ballast::dtype_bits(t);
    if (bits == 0 || bits % 8 != 0 || ballast::dtype_block(t)) continue;
    const std::string descr = cli::npy_descr(t);
    CAPTURE(ballast::dtype_name(t));
    CHECK(std::stoul(descr.substr(2)) == bits / 8);
    ++checked;
  }
  CHECK(checked >= 20);
  CHECK(cli::npy_descr(ballast::DataType::complex64) == "<c8");
}

TEST_CASE("human_bytes uses powers of 1024 with two decimals and exact bytes below 1 KiB") {
  CHECK(cli::human_bytes(0) == "0 B");
  CHECK(cli::human_bytes(1023) == "1023 B");
  CHECK(cli::human_bytes(1024) == "1.00 KiB");
  CHECK(cli::human_bytes(1536) == "1.50 KiB");
  CHECK(cli::human_bytes(std::uint64_t{3} << 20) == "3.00 MiB");
  CHECK(cli::human_bytes(std::uint64_t{4} << 30) == "4.00 GiB");
  CHECK(cli::human_bytes(std::numeric_limits<std::uint64_t>::max()) == "16.00 EiB");
}

TEST_CASE("shape_string and percent") {
  CHECK(cli::shape_string(std::vector<std::int64_t>{}) == "[]");
  CHECK(cli::shape_string(std::vector<std::int64_t>{256, 512}) == "[256, 512]");
  CHECK(cli::percent(1, 0) == "-");
  CHECK(cli::percent(1, 2) == "50.00%");
  CHECK(cli::percent(8'320'000'000ULL, 16'633'000'000ULL) == "50.02%");
}

TEST_CASE("Table pads columns to the widest cell and right-aligns numbers") {
  cli::Table t({"NAME", "BYTES"}, {false, true});
  t.add({"a", "1 B"});
  t.add({"longer_name", "10.00 KiB"});
  t.add({"short"});  // missing cells are empty, not a crash
  std::ostringstream out;
  t.print(out, "  ");
  CHECK(out.str() ==
        "  NAME             BYTES\n"
        "  a                  1 B\n"
        "  longer_name  10.00 KiB\n"
        "  short\n");

  // Widths in code points: "веса.w" (6 code points, 10 bytes) pads as 6
  // columns, and the column after it lines up.
  cli::Table u({"NAME", "BYTES"}, {false, true});
  u.add({"\xd0\xb2\xd0\xb5\xd1\x81\xd0\xb0.w", "1 B"});  // "веса.w"
  u.add({"abcdefgh", "22 B"});
  std::ostringstream uout;
  u.print(uout);
  CHECK(uout.str() ==
        "NAME      BYTES\n"
        "\xd0\xb2\xd0\xb5\xd1\x81\xd0\xb0.w      1 B\n"
        "abcdefgh   22 B\n");

  // Wide and zero-width characters: "模型.w" takes 6 columns (two CJK
  // characters of two each, then two of one), "e\u0301" (e and a combining acute) one.
  cli::Table v({"NAME", "BYTES"}, {false, true});
  v.add({"\xe6\xa8\xa1\xe5\x9e\x8b.w", "1 B"});  // "模型.w"
  v.add({"e\xcc\x81", "2 B"});                   // "é" as e + U+0301
  v.add({"abcdefg", "33 B"});
  std::ostringstream vout;
  v.print(vout);
  CHECK(vout.str() ==
        "NAME     BYTES\n"
        "\xe6\xa8\xa1\xe5\x9e\x8b.w     1 B\n"
        "e\xcc\x81          2 B\n"
        "abcdefg   33 B\n");
}

TEST_CASE("hex_digest matches the FIPS test vectors and reports every chunk") {
  CHECK(cli::hex_digest(cli::Digest::sha1, as_bytes("abc")) == "a9993e364706816aba3e25717850c26c9cd0d89d");
  CHECK(cli::hex_digest(cli::Digest::sha256, as_bytes("abc")) ==
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(cli::hex_digest(cli::Digest::sha256, {}) ==
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");

  const std::string big((std::size_t{20} << 20) + 3, '\0');
  std::uint64_t seen = 0;
  int calls = 0;
  const std::string chunked = cli::hex_digest(cli::Digest::sha1, as_bytes(big), [&](std::uint64_t n) {
    seen += n;
    ++calls;
  });
  CHECK(seen == big.size());
  CHECK(calls == 3);  // 8 MiB chunks
  CHECK(chunked == cli::hex_digest(cli::Digest::sha1, as_bytes(big)));
}

TEST_CASE("the dead-weight map escapes names and clips hostile ranges") {
  cli::FileAccounting f;
  f.path = "dir/<evil & \"name\">\x01.bin";
  f.mapped_bytes = 1000;
  f.referenced_bytes = 600;
  f.unreferenced_bytes = 400;
  f.referenced_ranges = {{400, 600}};
  f.dead_ranges = {{0, 400},
                   {5000, 10},                                             // past the end: not drawn
                   {std::numeric_limits<std::uint64_t>::max() - 5, 100}};  // would overflow: not drawn
  const std::string svg = cli::dead_weight_map_svg("m.onnx", {f});
  CHECK(svg.find("&lt;evil &amp; &quot;name&quot;&gt;.bin") != std::string::npos);
  CHECK(svg.find('\x01') == std::string::npos);
  CHECK(svg.find("<evil") == std::string::npos);
  CHECK(count(svg, "fill=\"#e0452b\"") == 2);  // one dead range drawn + the legend swatch
  CHECK(count(svg, "fill=\"#2f6fd0\"") == 2);  // one referenced range drawn + the legend swatch
  CHECK(svg.find("dead 400 B (40.00%) in 3 ranges") != std::string::npos);
  CHECK(svg.rfind("</svg>\n") == svg.size() - 7);

  const std::string empty = cli::dead_weight_map_svg("m.onnx", {});
  CHECK(empty.find("no external data files") != std::string::npos);
}

TEST_CASE("write_dead_weight_map names the file it cannot write") {
  const ballast::Status s = cli::write_dead_weight_map("/nonexistent-dir/x.svg", "m", {});
  REQUIRE_FALSE(s.ok());
  CHECK(s.code() == ballast::ErrorCode::io);
  CHECK(s.error().file == "/nonexistent-dir/x.svg");
}

TEST_CASE("account_external_files: referenced union and dead ranges of a hand-built store") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(BALLAST_BINARY_DIR) / "tests" / "cli" / "cli_support_store";
  fs::create_directories(dir);
  const fs::path blob = dir / "blob.bin";
  {
    std::ofstream out(blob, std::ios::binary | std::ios::trunc);
    const std::string bytes(4096, 'x');
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  ballast::WeightStore store;
  auto id = store.map_external(blob);
  REQUIRE(id.ok());
  auto add = [&](std::uint32_t value, std::uint64_t offset, std::uint64_t length) {
    ballast::WeightRef w;
    w.dtype = ballast::DataType::uint8;
    w.dims = {static_cast<std::int64_t>(length)};
    w.storage = ballast::WeightRef::Storage::external;
    ballast::ExternalLocation loc;
    loc.file = std::make_shared<const ballast::ExternalFile>(ballast::ExternalFile{"blob.bin", fs::canonical(blob)});
    loc.offset = offset;
    loc.length = length;
    w.external = loc;
    REQUIRE(store.add(ballast::ValueId{value}, std::move(w)).ok());
  };
  add(0, 2048, 1024);
  add(1, 2048, 1024);  // aliased: counts once
  add(2, 2560, 1024);  // overlaps: union is [2048, 3584)

  const auto files = cli::account_external_files(store);
  REQUIRE(files.size() == 1);
  CHECK(files[0].mapped_bytes == 4096);
  CHECK(files[0].referenced_bytes == 1536);
  CHECK(files[0].unreferenced_bytes == 2560);
  CHECK(files[0].dead_ranges == std::vector<ballast::ByteRange>{{0, 2048}, {3584, 512}});
}

namespace {

// model.onnx with two float32 tensors of 64 elements in data.bin, both
// carrying their SHA-1 checksum; returns the data file's bytes.
std::string write_checksummed_model(const ballast::testing::ScratchDir& dir) {
  using namespace ballast::testing;
  std::string data(512, '\0');
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>((i * 7 + 3) & 0xff);
  dir.write("data.bin", data);
  auto t = [&](std::string_view name, std::size_t offset) {
    Entries e = at("data.bin", offset, 256);
    e.emplace_back("checksum", cli::hex_digest(cli::Digest::sha1, as_bytes(data.substr(offset, 256))));
    return external_tensor(name, 64, e);
  };
  dir.write("model.onnx", model_with({t("a", 0), t("b", 256)}).data);
  return data;
}

}  // namespace

TEST_CASE("verify_weights: an intact model passes; a data file truncated after load is a finding, not SIGBUS") {
  ballast::testing::ScratchDir dir("verify-changes");
  write_checksummed_model(dir);
  auto model = ballast::load_onnx(dir / "model.onnx");
  REQUIRE_MESSAGE(model.ok(), model.error().to_string());
  {
    std::ostringstream out;
    const cli::VerifyCounts n = cli::verify_weights(*model, out);
    CHECK_MESSAGE(n.ok(), out.str());
    CHECK(n.checksums == 2);
    CHECK(out.str().empty());
  }
  REQUIRE(::truncate((dir / "data.bin").c_str(), 100) == 0);
  std::ostringstream out;
  const cli::VerifyCounts n = cli::verify_weights(*model, out);
  CHECK_FALSE(n.ok());
  CHECK(n.files_changed == 1);
  CHECK(n.checksums_bad == 2);
  CHECK_MESSAGE(count(out.str(), "FAIL io: ") == 1, out.str());  // one line per file, not per tensor
  CHECK_MESSAGE(out.str().find("data.bin changed since it was opened (size 512, now 100)") != std::string::npos, out.str());
  CHECK_MESSAGE(out.str().find("tensor=a") != std::string::npos, out.str());
}

TEST_CASE("verify_weights: a data file renamed over after load is reported; the bytes verified are the opened file's") {
  ballast::testing::ScratchDir dir("verify-replaced");
  const std::string data = write_checksummed_model(dir);
  auto model = ballast::load_onnx(dir / "model.onnx");
  REQUIRE_MESSAGE(model.ok(), model.error().to_string());
  {
    std::string other = data;
    other[0] = static_cast<char>(other[0] ^ 0xff);
    dir.write("data.bin.new", other);
    std::filesystem::rename(dir / "data.bin.new", dir / "data.bin");
  }
  std::ostringstream out;
  const cli::VerifyCounts n = cli::verify_weights(*model, out);
  CHECK_FALSE(n.ok());
  CHECK(n.checksums_bad == 0);  // the mapping still holds the old, intact bytes
  CHECK(n.files_changed == 1);
  CHECK_MESSAGE(out.str().find("FAIL io: " + (dir / "data.bin").string() + " now names a different file (inode ") !=
                    std::string::npos,
                out.str());
}

namespace {
std::optional<std::uint64_t> budget_of(const std::string& text) {
  std::optional<std::uint64_t> bytes = 12345;  // left alone on failure
  const std::string why = cli::parse_budget(text, bytes);
  REQUIRE_MESSAGE(why.empty(), (text + ": " + why));
  return bytes;
}
std::string budget_error(const std::string& text) {
  std::optional<std::uint64_t> bytes = 12345;
  std::string why = cli::parse_budget(text, bytes);
  CHECK_MESSAGE(bytes == std::optional<std::uint64_t>(12345), text);
  return why;
}
}  // namespace

TEST_CASE("parse_budget: byte counts with binary suffixes, fractions with a suffix, auto") {
  CHECK(budget_of("4194304") == 4194304u);
  CHECK(budget_of("1") == 1u);
  CHECK(budget_of("1B") == 1u);
  CHECK(budget_of("1K") == 1024u);
  CHECK(budget_of("1k") == 1024u);
  CHECK(budget_of("3KiB") == 3072u);
  CHECK(budget_of("512M") == 512ull << 20);
  CHECK(budget_of("512MiB") == 512ull << 20);
  CHECK(budget_of("2G") == 2ull << 30);
  CHECK(budget_of("2GiB") == 2ull << 30);
  CHECK(budget_of("1T") == 1ull << 40);
  CHECK(budget_of("1.5G") == 3ull << 29);
  CHECK(budget_of("0.5K") == 512u);
  CHECK(budget_of("1.0009765625K") == 1025u);
  CHECK(budget_of("1.0001K") == 1024u);  // rounded down to whole bytes
  CHECK(budget_of("18446744073709551615") == ~std::uint64_t{0});
  CHECK(budget_of("auto") == std::nullopt);
  CHECK(budget_of("AUTO") == std::nullopt);
}

TEST_CASE("parse_budget: garbage, zero, overflow and SI suffixes are refused with a reason") {
  for (const char* bad : {"", "lots", "12Q", "-5", "+5", " 5", "5 ", "1.5", "1.", ".", "K", "1KK", "1Ki", "1KIBB", "0",
                          "0K", "0.0001K", "18446744073709551616", "16777216T", "99999999999999999999999", "1e9"}) {
    const std::string why = budget_error(bad);
    CHECK_MESSAGE(!why.empty(), bad);
    CHECK_MESSAGE(why.find("budget") != std::string::npos, why);
  }
  CHECK(budget_error("4MB").find("ambiguous") != std::string::npos);
  CHECK(budget_error("0").find("zero") != std::string::npos);
  CHECK(budget_error("18446744073709551616").find("64 bits") != std::string::npos);
  // Another option's count names that count, not a budget.
  std::optional<std::uint64_t> bytes;
  const std::string round = cli::parse_budget("0", bytes, "round size");
  CHECK_MESSAGE(round.rfind("round size '0' is zero", 0) == 0, round);
  CHECK_MESSAGE(round.find("budget") == std::string::npos, round);
  // A count with no automatic value (--round-bytes): auto is refused, and
  // no reason suggests it (a bad count said "... or auto").
  for (const char* bad : {"auto", "-1", "12Q", "1.5"}) {
    std::optional<std::uint64_t> left = 7;
    const std::string why = cli::parse_budget(bad, left, "round size", /*allow_auto=*/false);
    CHECK_MESSAGE(why.rfind(std::string("round size '") + bad + "'", 0) == 0, why);
    CHECK_MESSAGE(why.find("or auto") == std::string::npos, why);
    CHECK(left == std::optional<std::uint64_t>(7));
  }
  CHECK(cli::parse_budget("4K", bytes, "round size", /*allow_auto=*/false).empty());
  CHECK(bytes == std::optional<std::uint64_t>(4096));
}

TEST_CASE("prefetch_window_end: the next steps within max(one step, the window), at most one token, never past the run") {
  cli::Walk walk;
  for (std::uint64_t b : {100, 300, 50, 50, 400}) {
    cli::WalkStep s;
    s.first_bytes = b;
    walk.steps.push_back(s);
  }
  const std::size_t run = 3 * walk.steps.size();
  CHECK(cli::prefetch_window_end(walk, 0, run, 400) == 2);    // 100 + 300
  CHECK(cli::prefetch_window_end(walk, 1, run, 400) == 4);    // 300 + 50 + 50
  CHECK(cli::prefetch_window_end(walk, 4, run, 100) == 5);    // one step even past the window
  CHECK(cli::prefetch_window_end(walk, 4, run, 500) == 6);    // wraps into the next token: 400 + 100
  CHECK(cli::prefetch_window_end(walk, 0, run, 1u << 30) == 5);  // at most one token of steps
  CHECK(cli::prefetch_window_end(walk, 13, run, 1u << 30) == 15);  // never past the run
  CHECK(cli::prefetch_window_end(walk, 15, run, 400) == 15);
  CHECK(cli::prefetch_window_end(cli::Walk{}, 0, 0, 400) == 0);
}

// ---- compact's external_data rewriter (support/onnx_rewrite), on hand-built wire bytes.
namespace {

std::string varint(std::uint64_t v) {
  std::string out;
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
  return out;
}
std::string len_field(std::uint64_t number, const std::string& payload) {
  return varint((number << 3) | 2) + varint(payload.size()) + payload;
}
std::string varint_field(std::uint64_t number, std::uint64_t v) { return varint(number << 3) + varint(v); }
std::string entry(const std::string& key, const std::string& value) {
  return len_field(13, len_field(1, key) + len_field(2, value));
}
// TensorProto: dims, data_type, name, doc_string, entries, data_location.
std::string external_tensor(const std::string& name, const std::string& offset) {
  return varint_field(1, 4) + varint_field(2, 1) + len_field(8, name) + len_field(12, "kept doc") +
         entry("location", "w.bin") + entry("offset", offset) + entry("x-hint", "kept") + varint_field(14, 1);
}

}  // namespace

TEST_CASE("rewrite_external_data: new entries in place, every enclosing length redone, the rest byte for byte") {
  // ModelProto{ir_version, graph{node{attribute{t}}, initializer, initializer(inline)}, doc_string}
  const std::string init = external_tensor("w", "1000");
  const std::string inline_init = varint_field(1, 1) + varint_field(2, 1) + len_field(8, "b") + len_field(9, "abcd");
  const std::string attr = len_field(1, "value") + len_field(5, external_tensor("", "2000")) + varint_field(20, 4);
  const std::string node = len_field(2, "K") + len_field(4, "Constant") + len_field(5, attr);
  const std::string graph = len_field(1, node) + len_field(5, init) + len_field(5, inline_init) + len_field(2, "g");
  const std::string model = varint_field(1, 8) + len_field(7, graph) + len_field(6, "model doc");

  std::vector<std::string> seen;
  const auto rewrite = [&](const cli::ExternalTensor& t) -> ballast::Result<std::vector<std::pair<std::string, std::string>>> {
    seen.push_back(std::string(t.name) + "@" + t.entries.at(1).second);
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& [k, v] : t.entries) out.emplace_back(k, k == "offset" ? std::string(v == "1000" ? "0" : "123456789") : v);
    out.emplace_back("length", "16");
    return out;
  };
  auto rewritten = cli::rewrite_external_data(as_bytes(model), rewrite);
  REQUIRE(rewritten.ok());
  CHECK(seen == std::vector<std::string>{"@2000", "w@1000"});

  const auto expected_tensor = [](const std::string& name, const std::string& offset) {
    return varint_field(1, 4) + varint_field(2, 1) + len_field(8, name) + len_field(12, "kept doc") +
           entry("location", "w.bin") + entry("offset", offset) + entry("x-hint", "kept") + entry("length", "16") +
           varint_field(14, 1);
  };
  const std::string attr2 = len_field(1, "value") + len_field(5, expected_tensor("", "123456789")) + varint_field(20, 4);
  const std::string node2 = len_field(2, "K") + len_field(4, "Constant") + len_field(5, attr2);
  const std::string graph2 =
      len_field(1, node2) + len_field(5, expected_tensor("w", "0")) + len_field(5, inline_init) + len_field(2, "g");
  const std::string model2 = varint_field(1, 8) + len_field(7, graph2) + len_field(6, "model doc");
  CHECK(*rewritten == model2);
}

TEST_CASE("rewrite_external_data: nothing external is a copy; malformed bytes and the callback's error are returned") {
  const std::string graph = len_field(5, varint_field(2, 1) + len_field(8, "b") + len_field(9, "abcd"));
  const std::string model = varint_field(1, 8) + len_field(7, graph);
  const auto never = [](const cli::ExternalTensor&) -> ballast::Result<std::vector<std::pair<std::string, std::string>>> {
    return ballast::make_error(ballast::ErrorCode::internal, "called");
  };
  auto same = cli::rewrite_external_data(as_bytes(model), never);
  REQUIRE(same.ok());
  CHECK(*same == model);

  // A length past its message, a group, a truncated varint.
  for (const std::string& bad : {varint_field(1, 8) + varint((7 << 3) | 2) + varint(50) + "short",
                                 varint_field(1, 8) + varint((7 << 3) | 3), std::string("\x08\xff")}) {
    auto r = cli::rewrite_external_data(as_bytes(bad), never);
    REQUIRE_FALSE(r.ok());
    CHECK(r.code() == ballast::ErrorCode::malformed);
  }
  const std::string ext = varint_field(1, 8) + len_field(7, len_field(5, external_tensor("w", "0")));
  auto refused = cli::rewrite_external_data(as_bytes(ext), never);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message == "called");
}
