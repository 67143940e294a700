// read_mapped_header's body (sibling_files.hpp): a template, so each
// format's parser is called directly.
#pragma once

#include "store/mapped_file.hpp"
#include "store/sigbus_guard.hpp"
#include "store/store_access.hpp"

#include <optional>
#include <utility>

namespace ballast::onnx {

template <class Parse>
auto read_mapped_header(WeightStore& store, MappingId id, const std::string& display, const char* context,
                        Parse&& parse)
    -> decltype(parse(Bytes{})) {
  const auto mapping = store::StoreAccess::mapping(store, id);
  if (!mapping) return make_error(ErrorCode::internal, "mapping vanished right after it was made");
  const Bytes bytes = mapping->bytes();
  std::optional<store::RegistrationArm> arm;
  if (!bytes.empty()) arm.emplace(bytes.data(), bytes.size(), mapping->poison_flag());
  NoReadahead quiet(bytes);
  auto parsed = parse(bytes);
  if (Status s = mapping->check_unchanged(); !s.ok())
    return in_file(std::move(s.error()), display).with_context(context);
  if (!parsed) return in_file(std::move(parsed.error()), display);
  return parsed;
}

}  // namespace ballast::onnx
