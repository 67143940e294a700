#include "onnx/model_impl.hpp"

#include <cstring>

namespace ballast {



std::string_view Model::Impl::NameArena::copy(std::string_view name) {
  if (name.empty()) return {};
  if (name.size() > kChunk / 4) {  // a huge name gets a chunk of its own, before the current one
    auto own = std::make_unique<char[]>(name.size());
    std::memcpy(own.get(), name.data(), name.size());
    const char* data = own.get();
    chunks_.insert(chunks_.empty() ? chunks_.end() : chunks_.end() - 1, std::move(own));
    return {data, name.size()};
  }
  if (kChunk - used_ < name.size()) {
    chunks_.push_back(std::make_unique<char[]>(kChunk));
    used_ = 0;
  }
  char* at = chunks_.back().get() + used_;
  std::memcpy(at, name.data(), name.size());
  used_ += name.size();
  return {at, name.size()};
}

// Runs for every value of every node: no allocation unless the name is new.
ValueId Model::Impl::intern(std::string_view name) {
  if (auto it = ids.find(name); it != ids.end()) return ValueId{it->second};
  const auto index = static_cast<std::uint32_t>(names.size());
  const std::string_view stored = arena.copy(name);
  names.push_back(stored);
  ids.emplace(stored, index);
  return ValueId{index};
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
  return id.index < impl_->names.size() ? impl_->names[id.index] : std::string_view();
}

ValueId Model::intern(std::string_view name) { return impl_->intern(name); }

const std::vector<ValueId>& Model::weight_order() const noexcept { return impl_->weight_order; }
const std::vector<NodeInfo>& Model::nodes() const noexcept { return impl_->nodes; }
const std::vector<StringTensorInfo>& Model::string_tensors() const noexcept { return impl_->string_tensors; }
const std::vector<LoadNote>& Model::notes() const noexcept { return impl_->notes; }
std::int64_t Model::ir_version() const noexcept { return impl_->ir_version; }
const std::vector<std::pair<std::string, std::int64_t>>& Model::opsets() const noexcept { return impl_->opsets; }

}  // namespace ballast
