#include "onnx/model_impl.hpp"
#include "store/store_access.hpp"

#include "onnx/graph_decoder.hpp"

namespace ballast {

void Model::Impl::build_nodes() const {
  // The table is derived state: building it does not change what the Model
  // is, hence const, and call_once makes concurrent first calls safe.
  std::call_once(nodes_built, [this] { onnx::build_node_table(const_cast<Impl&>(*this)); });
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
  impl_->intern_node_values();
  if (auto id = impl_->names.find(name)) return ValueId{*id};
  return std::nullopt;
}

std::string_view Model::value_name(ValueId id) const {
  impl_->intern_node_values();
  return impl_->names.name(id.index);
}

ValueId Model::intern(std::string_view name) {
  impl_->intern_node_values();
  return impl_->intern(name);
}

const WeightRef* Model::weight(std::string_view name) const {
  const auto id = value_id(name);
  if (!id) return nullptr;
  const auto it = impl_->store.weights().find(*id);
  return it == impl_->store.weights().end() ? nullptr : &it->second;
}

ModelFormat Model::format() const noexcept { return impl_->format; }
const std::vector<ModelMetadata>& Model::metadata() const noexcept { return impl_->metadata; }

std::string_view model_format_name(ModelFormat format) noexcept {
  switch (format) {
    case ModelFormat::onnx: return "onnx";
    case ModelFormat::safetensors: return "safetensors";
    case ModelFormat::safetensors_index: return "safetensors-index";
    case ModelFormat::gguf: return "gguf";
  }
  return "unknown";
}

const std::vector<ValueId>& Model::weight_order() const noexcept { return impl_->weight_order; }
const std::vector<NodeInfo>& Model::nodes() const {
  impl_->build_nodes();
  return impl_->nodes;
}
const NodeInfo* Model::producer(std::string_view value) const {
  if (value.empty()) return nullptr;
  const std::vector<NodeInfo>& all = nodes();
  std::call_once(impl_->producers_built, [&] {
    for (const NodeInfo& n : all)
      for (std::string_view out : n.outputs)
        if (!out.empty()) impl_->producers.try_emplace(out, &n);
  });
  const auto it = impl_->producers.find(value);
  return it == impl_->producers.end() ? nullptr : it->second;
}
Status Model::check_unchanged() const {
  const auto file = store::StoreAccess::model_file(impl_->store);
  return file ? file->check_unchanged() : Status();
}
const std::vector<StringTensorInfo>& Model::string_tensors() const noexcept { return impl_->string_tensors; }
const std::vector<LoadNote>& Model::notes() const noexcept { return impl_->notes; }
const std::vector<ModelFunction>& Model::functions() const noexcept { return impl_->functions; }
std::int64_t Model::ir_version() const noexcept { return impl_->ir_version; }
const std::vector<std::pair<std::string, std::int64_t>>& Model::opsets() const noexcept { return impl_->opsets; }

}  // namespace ballast
