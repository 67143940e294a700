// What every model loader does with an allocation failure: it becomes an
// out_of_memory error naming the file, never an abort. The partly built
// Model is freed by the unwinding before the error is made.
#pragma once

#include <ballast/model.hpp>

#include <filesystem>
#include <new>
#include <stdexcept>

namespace ballast::onnx {

template <class Fn>
Result<Model> out_of_memory_is_an_error(const std::filesystem::path& path, Fn&& fn) {
  try {
    return fn();
  } catch (const std::bad_alloc&) {
  } catch (const std::length_error&) {
  }
  Error e = make_error(ErrorCode::out_of_memory, "out of memory while loading the model");
  e.file = path.string();
  return e;
}

}  // namespace ballast::onnx
