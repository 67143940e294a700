#include <ballast/status.hpp>
#include <doctest/doctest.h>
#include <memory>
#include <string>

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

namespace {

Status fails_if(bool fail) { return fail ? Status(make_error(ErrorCode::io, "read failed")) : Status(); }

Result<int> number(bool fail) {
  if (fail) return make_error(ErrorCode::not_found, "no number");
  return 42;
}

int context_builds = 0;
std::string counted(const char* what) {
  ++context_builds;
  return what;
}

Status forwards(bool fail) {
  BALLAST_RETURN_IF_ERROR(fails_if(fail));
  return Status();
}

Status forwards_with_context(bool fail, const std::string& file) {
  BALLAST_RETURN_IF_ERROR(fails_if(fail), "reading ", file);
  return Status();
}

Status forwards_counted(bool fail) {
  BALLAST_RETURN_IF_ERROR(fails_if(fail), counted("reading"));
  return Status();
}

Result<int> doubled(bool fail) {
  BALLAST_ASSIGN_OR_RETURN(const int n, number(fail), "doubling");
  BALLAST_RETURN_IF_ERROR(number(false));  // a Result works too
  return 2 * n;
}

Status assigns_existing(bool fail, int& out) {
  BALLAST_ASSIGN_OR_RETURN(out, number(fail));
  BALLAST_ASSIGN_OR_RETURN(auto again, number(false), std::string("never built"));
  out += again;
  return Status();
}

Result<std::unique_ptr<int>> boxed(bool fail) {
  if (fail) return make_error(ErrorCode::out_of_memory, "no box");
  return std::make_unique<int>(5);
}

Result<int> unboxed(bool fail) {
  BALLAST_ASSIGN_OR_RETURN(auto box, boxed(fail), std::string_view("unboxing"));  // move-only values move
  return *box;
}

}  // namespace

TEST_CASE("BALLAST_RETURN_IF_ERROR returns the error, with the context joined in front") {
  CHECK(forwards(false).ok());
  CHECK(forwards(true).to_string() == "io: read failed");
  CHECK(forwards_with_context(false, "w.bin").ok());
  CHECK(forwards_with_context(true, "w.bin").to_string() == "io: reading w.bin: read failed");
  context_builds = 0;
  CHECK(forwards_counted(false).ok());
  CHECK(context_builds == 0);  // the context is built only on failure
  CHECK(forwards_counted(true).to_string() == "io: reading: read failed");
  CHECK(context_builds == 1);
}

TEST_CASE("BALLAST_ASSIGN_OR_RETURN assigns the value or returns the error") {
  REQUIRE(doubled(false).ok());
  CHECK(*doubled(false) == 84);
  CHECK(doubled(true).code() == ErrorCode::not_found);
  CHECK(doubled(true).status().to_string() == "not_found: doubling: no number");
  int out = 0;
  CHECK(assigns_existing(false, out).ok());
  CHECK(out == 84);
  out = 0;
  CHECK(assigns_existing(true, out).to_string() == "not_found: no number");
  CHECK(out == 0);
  CHECK(*unboxed(false) == 5);
  CHECK(unboxed(true).status().to_string() == "out_of_memory: unboxing: no box");
}
