// Models written by the reference implementation (Debian's python3-onnx):
// same names, dtypes, dims and bytes as onnx.numpy_helper sees them, inline
// and with save_model(save_as_external_data=True) in one file or many.
#include "unit/onnx/load_helpers.hpp"
#include "unit/store/scratch_dir.hpp"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

using namespace ballast;
using ballast::testing::ScratchDir;

namespace {

struct Expected {
  std::string name;
  int dtype = 0;
  std::vector<std::int64_t> dims;
  std::string hex;
};

std::vector<Expected> read_expect(const std::filesystem::path& path) {
  std::vector<Expected> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::istringstream fields(line);
    Expected e;
    std::string dims;
    fields >> e.name >> e.dtype >> dims >> e.hex;
    dims = dims.substr(1, dims.size() - 2);
    std::istringstream ds(dims);
    for (std::string d; std::getline(ds, d, ',');) e.dims.push_back(std::stoll(d));
    out.push_back(std::move(e));
  }
  return out;
}

std::string hex_of(Bytes bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (std::byte b : bytes) {
    const auto v = std::to_integer<unsigned>(b);
    out += digits[v >> 4];
    out += digits[v & 15];
  }
  return out;
}

// Python with onnx, or exit 77 (ctest skip) saying why.
void generate_or_skip(const std::filesystem::path& dir) {
  const std::string python = BALLAST_TEST_PYTHON;
  if (std::system((python + " -c 'import onnx, numpy' >/dev/null 2>&1").c_str()) != 0) {
    std::cout << "skipped: " << python << " cannot import onnx and numpy (install python3-onnx python3-numpy)\n";
    std::exit(77);
  }
  const std::string cmd = python + " " + BALLAST_SOURCE_DIR + "/tests/unit/onnx/make_python_models.py '" +
                          dir.string() + "'";
  REQUIRE_MESSAGE(std::system(cmd.c_str()) == 0, cmd);
}

void check_model(const std::filesystem::path& model_path, const std::filesystem::path& expect_path,
                 bool expect_external) {
  CAPTURE(model_path.string());
  auto model = load_onnx(model_path);
  REQUIRE_MESSAGE(model.ok(), model.error().to_string());
  const auto expected = read_expect(expect_path);
  REQUIRE(expected.size() == 19);
  CHECK(model->store().weights().size() == expected.size());
  std::size_t external = 0;
  for (const Expected& e : expected) {
    CAPTURE(e.name);
    const WeightRef& w = ballast::testing::weight_named(*model, e.name);
    CHECK(static_cast<int>(w.dtype) == e.dtype);
    CHECK(w.dims == e.dims);
    auto bytes = model->store().bytes(w);
    REQUIRE(bytes.has_value());
    CHECK(hex_of(*bytes) == e.hex);
    if (w.is_external()) ++external;
  }
  CHECK(ballast::testing::weight_named(*model, "body_w").source == WeightSource::subgraph);
  CHECK(ballast::testing::weight_named(*model, "c_value").source == WeightSource::constant);
  CHECK(ballast::testing::weight_named(*model, "e_out").source == WeightSource::constant);
  CHECK(ballast::testing::weight_named(*model, "f32").source == WeightSource::initializer);
  if (expect_external)
    CHECK(external > 0);
  else
    CHECK(external == 0);
}

}  // namespace

TEST_CASE("models written by python3-onnx load with the reference's names, dtypes, dims and bytes") {
  ScratchDir dir("python-models");
  generate_or_skip(dir.path());
  check_model(dir / "inline.onnx", dir / "inline.expect", false);

  check_model(dir / "external_one.onnx", dir / "inline.expect", true);
  auto one = load_onnx(dir / "external_one.onnx");
  REQUIRE(one.ok());
  CHECK(one->store().mapping_count() == 1);
  auto ref = one->store().referenced_weight_bytes();
  CHECK(ref.total == one->store().mapped_external_bytes());  // onnx writes tensors back to back
  CHECK(one->store().unreferenced_external_bytes(ref) == 0);

  check_model(dir / "many/model.onnx", dir / "many/model.expect", true);
  auto many = load_onnx(dir / "many/model.onnx");
  REQUIRE(many.ok());
  CHECK(many->store().mapping_count() >= 6);  // one file per raw_data initializer
}
