#include <ballast/onnx_loader.hpp>

#include "onnx/graph_decoder.hpp"
#include "onnx/model_impl.hpp"
#include "store/mapped_file.hpp"

#include <system_error>

namespace ballast {

namespace {

// Decodes into a fresh Model and hands it out only when everything
// succeeded: a failed load leaves nothing half-filled behind.
Result<Model> decode_into_new_model(Bytes bytes, std::filesystem::path path, std::uint64_t file_size,
                                    const std::filesystem::path& base_dir, const LoadOptions& options,
                                    std::shared_ptr<const void> anchor) {
  Model model;
  Model::Impl& impl = model.impl();
  impl.path = std::move(path);
  impl.file_size = file_size;
  impl.bytes_anchor = anchor;
  if (anchor) impl.store.keep_alive(std::move(anchor));
  const std::string file = impl.path.string();
  onnx::ModelDecoder decoder(impl, file, base_dir, options);
  if (Status s = decoder.decode(bytes); !s.ok()) {
    Error& e = s.error();
    if (e.file.empty()) e.file = file;
    return std::move(e);
  }
  return model;
}

}  // namespace

Result<Model> load_onnx(const std::filesystem::path& path, const LoadOptions& options) {
  std::error_code ec;
  std::filesystem::path absolute = std::filesystem::absolute(path, ec);
  if (ec) absolute = path;
  auto mapped = store::MappedFile::open(absolute);
  if (!mapped) return std::move(mapped.error()).with_context("opening ONNX model");
  const Bytes bytes = (*mapped)->bytes();
  const std::uint64_t size = (*mapped)->size();
  auto base_dir = absolute.parent_path();
  return decode_into_new_model(bytes, std::move(absolute), size, base_dir, options, std::move(*mapped));
}

Result<Model> load_onnx_from_bytes(std::span<const std::byte> bytes, const std::filesystem::path& base_dir,
                                   const LoadOptions& options) {
  return decode_into_new_model(bytes, {}, bytes.size(), base_dir, options, nullptr);
}

}  // namespace ballast
