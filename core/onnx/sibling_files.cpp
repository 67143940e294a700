#include "onnx/sibling_files.hpp"

#include "onnx/external_data.hpp"  // check_location_text, shown

#include <sys/mman.h>

namespace ballast::onnx {

std::filesystem::path absolute_of(const std::filesystem::path& path) {
  std::error_code ec;
  std::filesystem::path absolute = std::filesystem::absolute(path, ec);
  return ec ? path : absolute;
}

Error in_file(Error e, const std::string& file) {
  if (e.file.empty()) e.file = file;
  return e;
}

std::shared_ptr<const ExternalFile> external_file(std::string location, std::filesystem::path resolved,
                                                  const struct stat& st) {
  const store::FileIdentity identity = store::identity_of(st);
  return std::make_shared<const ExternalFile>(
      ExternalFile{std::move(location), std::move(resolved), identity.device, identity.inode});
}

NoReadahead::NoReadahead(Bytes mapping) : mapping_(mapping) {
  if (!mapping_.empty()) ::madvise(const_cast<std::byte*>(mapping_.data()), mapping_.size(), MADV_RANDOM);
}

NoReadahead::~NoReadahead() {
  if (!mapping_.empty()) ::madvise(const_cast<std::byte*>(mapping_.data()), mapping_.size(), MADV_NORMAL);
}

SiblingOpener::SiblingOpener(const std::filesystem::path& first, const LoadOptions& options, WeightStore& store,
                             std::string what, std::string namer)
    : dir_(first.parent_path()),
      first_(first.string()),
      options_(options),
      store_(store),
      what_(std::move(what)),
      namer_(std::move(namer)) {}

Status SiblingOpener::open_roots(int first_fd, const struct stat& first_st) {
  auto root = store::open_root(dir_);
  if (!root) return in_file(std::move(root.error()), dir_.string());
  root_ = std::move(*root);
  if (options_.allow_model_real_dir) {
    real_root_ = store::open_parent_of(first_fd, first_st);
    if (real_root_ && real_root_->id == root_->id) real_root_.reset();
  }
  return {};
}

Result<Sibling> SiblingOpener::open(const std::string& location) {
  auto refuse = [&](Error e) {
    e.message = what_ + " " + shown(location) + " named by " + namer_ + ": " + e.message;
    if (e.file.empty()) e.file = first_;
    return e;
  };
  if (!root_) return refuse(make_error(ErrorCode::internal, "open_roots() was not called"));
  if (location.size() > options_.max_location_bytes)
    return refuse(make_error(ErrorCode::overflow, "the name is longer than LoadOptions::max_location_bytes (" +
                                                      std::to_string(options_.max_location_bytes) + ")"));
  if (Status s = check_location_text(location); !s.ok()) return refuse(std::move(s.error()));
  const store::Root* roots[2] = {&*root_, nullptr};
  std::size_t count = 1;
  if (real_root_) roots[count++] = &*real_root_;
  const std::filesystem::path joined = (dir_ / location).lexically_normal();
  auto opened = store::open_beneath(std::span<const store::Root* const>(roots, count), location);
  if (!opened) {
    Error e = refuse(std::move(opened.error()));
    // As ONNX external data says it: a Hugging Face cache snapshot's
    // shards are symlinks into ../../blobs/.
    if (e.code == ErrorCode::path_escapes) e.message += real_dir_hint(options_.allow_model_real_dir, namer_);
    e.file = joined.string();
    return e;
  }
  if (!options_.allow_hard_links && opened->st.st_nlink > 1) {
    Error e = refuse(make_error(ErrorCode::path_escapes, "the file has " + hard_link_refusal(opened->st.st_nlink)));
    e.file = joined.string();
    return e;
  }
  const std::filesystem::path target = store::path_of(opened->fd.get(), joined);
  auto id = store_.map_external_fd(opened->fd.get(), target);
  if (!id) return refuse(std::move(id.error()));
  auto [it, fresh] = names_.try_emplace(*id, location);
  if (!fresh) {
    Error e = refuse(make_error(ErrorCode::malformed, "it is the same file as " + what_ + " " + shown(it->second) +
                                                          " (one file listed twice under two names)"));
    e.file = target.string();
    return e;
  }
  Sibling s;
  s.id = *id;
  s.file = external_file(location, target, opened->st);
  s.target = target;
  return s;
}

}  // namespace ballast::onnx
