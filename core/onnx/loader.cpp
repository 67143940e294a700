#include <ballast/onnx_loader.hpp>

#include "onnx/graph_decoder.hpp"
#include "onnx/load_errors.hpp"
#include "onnx/model_impl.hpp"
#include "store/mapped_file.hpp"
#include "store/store_access.hpp"

#include <new>
#include <stdexcept>
#include <system_error>

namespace ballast {

namespace {

// Decodes into a fresh Model and hands it out only when everything
// succeeded: a failed load leaves nothing half-filled behind.
Result<Model> decode_into_new_model(Bytes bytes, std::filesystem::path path, std::uint64_t file_size,
                                    const std::filesystem::path& base_dir, const LoadOptions& options,
                                    std::shared_ptr<const store::MappedFile> mapped,
                                    std::optional<store::Root> real_model_dir) {
  Model model;
  Model::Impl& impl = detail::ModelAccess::impl(model);
  impl.path = std::move(path);
  impl.file_size = file_size;
  impl.bytes_anchor = mapped;
  if (mapped && mapped->size() != 0) {
    impl.file_arm = std::make_unique<store::RegistrationArm>(mapped->bytes().data(), mapped->bytes().size(),
                                                             mapped->poison_flag());
    if (!impl.file_arm->armed()) impl.file_arm.reset();
  }
  const std::shared_ptr<const store::MappedFile> file_mapping = mapped;
  // The store keeps the .onnx mapping alive and checks and reads inline
  // weights through its descriptor (docs/reliability.md).
  if (mapped) store::StoreAccess::set_model_file(impl.store, std::move(mapped));
  const std::string file = impl.path.string();
  onnx::ModelDecoder decoder(impl, file, base_dir, options, std::move(real_model_dir));
  Status decoded = decoder.decode(bytes);
  // Truncated while it was decoded: the decoder read zeros where the pages
  // went, so whatever it made of them (or its error about them) is not the
  // file's. The change is the error.
  if (file_mapping)
    if (Status s = file_mapping->check_unchanged(); !s.ok()) return std::move(s.error()).with_context("decoding ONNX model");
  if (!decoded.ok()) {
    Error& e = decoded.error();
    if (e.file.empty()) e.file = file;
    return std::move(e);
  }
  return model;
}

Result<Model> load_model_file(const std::filesystem::path& path, const LoadOptions& options) {
  std::error_code ec;
  std::filesystem::path absolute = std::filesystem::absolute(path, ec);
  if (ec) absolute = path;
  auto opened = store::open_regular(absolute);
  if (!opened) {
    Error e = std::move(opened.error());
    e.file = absolute.string();
    return std::move(e).with_context("opening ONNX model");
  }
  BALLAST_ASSIGN_OR_RETURN(auto mapped, store::MappedFile::map(opened->fd.get(), opened->st, absolute),
                           "opening ONNX model");
  // The second root: the directory of the file actually opened, found
  // through its descriptor (so a model symlink swapped meanwhile does not
  // choose it).
  std::optional<store::Root> real_dir;
  if (options.allow_model_real_dir) real_dir = store::open_parent_of(opened->fd.get(), opened->st);
  const Bytes bytes = mapped->bytes();
  const std::uint64_t size = mapped->size();
  auto base_dir = absolute.parent_path();
  return decode_into_new_model(bytes, std::move(absolute), size, base_dir, options, std::move(mapped),
                               std::move(real_dir));
}

}  // namespace

Result<Model> load_onnx(const std::filesystem::path& path, const LoadOptions& options) {
  return onnx::out_of_memory_is_an_error(path, [&] { return load_model_file(path, options); });
}

Result<Model> load_onnx_from_bytes(std::span<const std::byte> bytes, const std::filesystem::path& base_dir,
                                   const LoadOptions& options) {
  return onnx::out_of_memory_is_an_error(base_dir, [&] {
    return decode_into_new_model(bytes, {}, bytes.size(), base_dir, options, nullptr, std::nullopt);
  });
}

}  // namespace ballast
