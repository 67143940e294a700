#include <ballast/status.hpp>
#include <doctest/doctest.h>

using namespace ballast;

TEST_CASE("errors render code, context chain and where in one line") {
  Error e = make_error(ErrorCode::out_of_bounds, "range past end of file");
  e.file = "w.bin";
  e.tensor = "layer0.weight";
  e.offset = 4096;
  e.with_context("loading external data").with_context("opening model m.onnx");
  CHECK(e.to_string() ==
        "out_of_bounds: opening model m.onnx: loading external data: range past end of file "
        "[file=w.bin, tensor=layer0.weight, offset=4096]");
  CHECK(e.to_string().find('\n') == std::string::npos);
}

TEST_CASE("Result holds either a value or an error") {
  Result<int> good = 7;
  REQUIRE(good.ok());
  CHECK(*good == 7);
  Result<int> badr = make_error(ErrorCode::not_found, "nope");
  CHECK_FALSE(badr.ok());
  CHECK(badr.code() == ErrorCode::not_found);
  CHECK(badr.status().to_string() == "not_found: nope");
  Status s;
  CHECK(s.ok());
  Status failed = make_error(ErrorCode::io, "read failed");
  CHECK(std::move(failed).with_context("reading x").to_string() == "io: reading x: read failed");
}

TEST_CASE("Status is one pointer: ok is null, errors copy deeply and move cheaply") {
  static_assert(sizeof(Status) == sizeof(void*));
  Status ok;
  Status copy_of_ok = ok;
  CHECK(copy_of_ok.ok());
  Status failed = make_error(ErrorCode::malformed, "bad tag");
  Status copied = failed;
  copied.error().message = "changed";
  CHECK(failed.error().message == "bad tag");  // a deep copy
  Status moved = std::move(copied);
  CHECK(moved.code() == ErrorCode::malformed);
  copied = failed;  // assigning to a moved-from Status works
  CHECK(copied.error().message == "bad tag");
  failed = ok;
  CHECK(failed.ok());
}
