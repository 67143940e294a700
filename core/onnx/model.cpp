#include "onnx/model_impl.hpp"

namespace ballast {

ValueId Model::Impl::intern(std::string_view name) {
  // Store first, then look up once with a view of the stored copy: one hash
  // probe per name (this runs for every value of every node).
  const auto index = static_cast<std::uint32_t>(names.size());
  const std::string& stored = names.emplace_back(name);
  auto [it, inserted] = ids.try_emplace(std::string_view(stored), index);
  if (!inserted) names.pop_back();
  return ValueId{it->second};
}

Model::Model() : impl_(std::make_unique<Impl>()) {}
Model::~Model() = default;
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;

const std::filesystem::path& Model::path() const noexcept { return impl_->path; }
std::uint64_t Model::file_size() const noexcept { return impl_->file_size; }
WeightStore& Model::store() noexcept { return impl_->store; }
const WeightStore& Model::store() const noexcept { return impl_->store; }

std::optional<ValueId> Model::value_id(std::string_view name) const {
  if (auto it = impl_->ids.find(name); it != impl_->ids.end()) return ValueId{it->second};
  return std::nullopt;
}

std::string_view Model::value_name(ValueId id) const {
  return id.index < impl_->names.size() ? std::string_view(impl_->names[id.index]) : std::string_view();
}

ValueId Model::intern(std::string_view name) { return impl_->intern(name); }

const std::vector<ValueId>& Model::weight_order() const noexcept { return impl_->weight_order; }
const std::vector<NodeInfo>& Model::nodes() const noexcept { return impl_->nodes; }
const std::vector<StringTensorInfo>& Model::string_tensors() const noexcept { return impl_->string_tensors; }
const std::vector<LoadNote>& Model::notes() const noexcept { return impl_->notes; }
std::int64_t Model::ir_version() const noexcept { return impl_->ir_version; }
const std::vector<std::pair<std::string, std::int64_t>>& Model::opsets() const noexcept { return impl_->opsets; }

}  // namespace ballast
