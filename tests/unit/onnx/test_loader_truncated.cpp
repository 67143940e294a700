// Issue 24 §3: the .onnx mapping is read lazily after the load (node
// records, names, attributes: Model::nodes(), planning). A truncation of
// the .onnx after it was opened makes those reads return zeros (the mapping
// is armed for the model's life), never SIGBUS; Model::check_unchanged()
// and plan_derivations() say so with an io error naming the file.
#include <ballast/derive.hpp>
#include <ballast/onnx_loader.hpp>
#include <doctest/doctest.h>

#include "unit/onnx/proto_builder.hpp"
#include "unit/store/scratch_dir.hpp"

#include <unistd.h>

#include <string>

using namespace ballast;
using namespace ballast::testing;

TEST_CASE("an .onnx truncated after load: nodes read zeros, the model and the planner report io") {
  using namespace onnx_proto;
  ScratchDir dir("onnx_truncated");
  // Many nodes, so that their records span several pages past the header.
  Proto g;
  for (int i = 0; i < 2000; ++i) {
    Proto n;
    n.str(1, "x" + std::to_string(i)).str(1, "W").str(2, "x" + std::to_string(i + 1));
    n.str(3, "a_node_with_a_long_name_number_" + std::to_string(i)).str(4, "MatMul");
    g.msg(1, n);
  }
  Proto w = tensor("W", 1, {4, 4});
  raw_data(w, std::vector<std::uint8_t>(64, 0x3f));
  g.msg(5, w);
  g.str(2, "g");
  const auto path = dir.write("m.onnx", model(g).data);
  auto m = load_onnx(path);
  REQUIRE_MESSAGE(m.ok(), m.error().to_string());
  CHECK(m->check_unchanged().ok());

  REQUIRE(::truncate(path.c_str(), 0) == 0);
  // Built on first use, from pages that are gone: zeros, not a signal.
  const auto& nodes = m->nodes();
  CHECK(nodes.size() == 2000);
  const Status changed = m->check_unchanged();
  REQUIRE(changed.code() == ErrorCode::io);
  CHECK(changed.error().file == path.string());
  auto plan = plan_derivations(*m);
  REQUIRE_FALSE(plan.ok());
  CHECK(plan.code() == ErrorCode::io);
  CHECK_MESSAGE(plan.error().to_string().find("changed since it was opened") != std::string::npos,
                plan.error().to_string());
}
