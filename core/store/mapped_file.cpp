#include "store/mapped_file.hpp"

#include <boost/interprocess/exceptions.hpp>
#include <boost/interprocess/file_mapping.hpp>
#include <boost/interprocess/mapped_region.hpp>

#include <limits>
#include <system_error>

namespace ballast::store {

namespace bip = boost::interprocess;

// Only the region is kept: the mapping outlives the file descriptor, and a
// model saved with one file per tensor may map thousands of files.
struct MappedFile::Region {
  bip::mapped_region region;
};

MappedFile::~MappedFile() = default;

namespace {

const char* file_kind_name(std::filesystem::file_type t) {
  using std::filesystem::file_type;
  switch (t) {
    case file_type::directory: return "a directory";
    case file_type::fifo: return "a FIFO";
    case file_type::block: return "a block device";
    case file_type::character: return "a character device";
    case file_type::socket: return "a socket";
    case file_type::symlink: return "a dangling symlink";
    default: return "not a regular file";
  }
}

Error path_error(ErrorCode code, std::string message, const std::filesystem::path& path) {
  Error e = make_error(code, std::move(message));
  e.file = path.string();
  return e;
}

}  // namespace

Status require_regular_file(const std::filesystem::path& path) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (ec || st.type() == std::filesystem::file_type::not_found) {
    if (st.type() == std::filesystem::file_type::not_found || ec == std::errc::no_such_file_or_directory)
      return path_error(ErrorCode::not_found, "no such file", path);
    return path_error(ErrorCode::io, "cannot stat: " + ec.message(), path);
  }
  if (st.type() != std::filesystem::file_type::regular)
    return path_error(ErrorCode::io, std::string("refusing to map ") + file_kind_name(st.type()) +
                                         " (only regular files hold weights)",
                      path);
  return {};
}

Result<std::shared_ptr<const MappedFile>> MappedFile::open(const std::filesystem::path& path) {
  if (Status s = require_regular_file(path); !s.ok()) return s;
  std::error_code ec;
  const std::uint64_t size = std::filesystem::file_size(path, ec);
  if (ec) return path_error(ErrorCode::io, "cannot read file size: " + ec.message(), path);
  if (size > std::numeric_limits<std::size_t>::max())
    return path_error(ErrorCode::overflow, "file larger than the address space", path);

  std::shared_ptr<MappedFile> mapped(new MappedFile());
  mapped->path_ = path;
  mapped->size_ = size;
  if (size == 0) return std::shared_ptr<const MappedFile>(std::move(mapped));  // nothing to map
  try {
    auto region = std::make_unique<Region>();
    {
      const bip::file_mapping file(path.c_str(), bip::read_only);
      region->region = bip::mapped_region(file, bip::read_only, 0, static_cast<std::size_t>(size));
    }
    mapped->data_ = static_cast<const std::byte*>(region->region.get_address());
    mapped->region_ = std::move(region);
  } catch (const bip::interprocess_exception& ex) {
    return path_error(ErrorCode::io, std::string("cannot memory-map: ") + ex.what(), path);
  } catch (const std::bad_alloc&) {
    return path_error(ErrorCode::out_of_memory, "out of memory while mapping", path);
  }
  return std::shared_ptr<const MappedFile>(std::move(mapped));
}

}  // namespace ballast::store
