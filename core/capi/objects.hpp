// What each C handle holds. The strings a C struct returns point into these
// objects, so they are built once, when the object is made, and never
// change: that is what lets every read of a model or a plan run on any
// number of threads at once.
#pragma once

#include "capi/gate.hpp"
#include "capi/handles.hpp"
#include "capi/status.hpp"

#include <ballast/ballast.h>
#include <ballast/backend_registry.hpp>
#include <ballast/derive.hpp>
#include <ballast/model.hpp>
#include <ballast/residency.hpp>

#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ballast::capi {

struct WeightRow {
  std::string name, dtype, file;
  std::string gguf_type;           // "" unless the model is GGUF
  const WeightRef* ref = nullptr;  // into the model's store (its map never changes after open)
  std::uint64_t bytes = 0, offset = 0;
};

struct DeadRow {
  std::size_t file = 0;  // index into ModelObject::dead_files
  std::uint64_t offset = 0, length = 0;
};

struct ModelObject {
  Model model;
  std::string format;
  std::vector<WeightRow> weights;  // in the model's weight order
  // Name to index in `weights` (views into the rows' names, made once the
  // rows are final): an engine looks up every weight its plan names, so a
  // scan per lookup would cost weights x lookups.
  std::unordered_map<std::string_view, std::size_t> index_of;
  ballast_accounting accounting{};
  std::vector<std::string> dead_files;
  std::vector<DeadRow> dead;
};

struct BackendObject {
  std::unique_ptr<GpuBackend> backend;
};

struct ValueLayoutRow {  // one half of a planned value (ballast_plan_entry_layout)
  bool present = false;
  std::string dtype;
  std::vector<std::int64_t> dims;
  std::uint64_t bytes = 0;
};

struct PlanRow {
  std::string kind;
  std::uint64_t first_bytes = 0, second_bytes = 0;
  ValueLayoutRow halves[2];
};

struct PlanObject {
  std::shared_ptr<const ModelObject> model;  // plans are per model: checked wherever one is used
  std::vector<PlannedDerivation> entries;
  std::vector<PlanRow> rows;
};

struct ResidencyObject {
  // Declared first, destroyed last: the Residency refers to both.
  std::shared_ptr<BackendObject> backend;
  std::shared_ptr<const ModelObject> model;
  // Shared by every use; release() takes it alone (the C++ object's rule:
  // release must not overlap other use), so in C it simply waits
  // (gate.hpp: who passes a waiting release).
  mutable Gate gate;
  bool released = false;  // under `gate`
  // Residency::load() is one thread's at a time (C++); C callers' loads
  // take turns here (the second finds the first's values resident).
  std::mutex load_mutex;
  std::unique_ptr<Residency> residency;
};

struct PinObject {
  std::shared_ptr<ResidencyObject> owner;  // first: outlives the pins below
  std::vector<Pinned> members;             // a group: its derivations, then its weights
  std::vector<std::string> names;          // per member, what it is: "transpose of 'w' for node 'n'", "weight 'w'"
  // Per member, the weight it reads in place (a zero_copy registration of
  // its file's mapping), else nullptr: a read of that member reads the
  // file's pages, so ballast_pin_read checks the file after it (a page a
  // truncation took reads as zeros under the registration's guard).
  std::vector<const WeightRef*> in_place;
  ~PinObject() {
    PassingLock lock(owner->gate);  // an unpin passes a waiting release (gate.hpp)
    members.clear();
  }
};

// A new plan handle over `entries` of `model` (plan.cpp).
void* make_plan_handle(std::shared_ptr<const ModelObject> model, std::vector<PlannedDerivation> entries);

// "invalid_handle: <what> is NULL / not a live <kind> handle (freed, or another kind)".
ballast_status* bad_handle(Kind kind, const void* handle) noexcept;

// The checks every entry point starts with: a live handle of the kind, or
// a status to return.
template <class T>
std::shared_ptr<T> lookup(const void* handle, Kind kind, ballast_status** error) noexcept {
  auto object = find<T>(handle, kind);
  if (!object) *error = bad_handle(kind, handle);
  return object;
}

template <class T>
ballast_status* null_out(T* out, const char* what) noexcept {
  return out == nullptr ? invalid_argument(std::string("invalid_argument: ") + what + " is NULL") : nullptr;
}

// The buffer rule of every read: dst may be NULL only for length 0, and
// length must fit dst_length.
ballast_status* check_buffer(const void* dst, std::size_t dst_length, std::uint64_t length) noexcept;
// NULL when index < count; otherwise out_of_bounds naming "<what> <index> of <count>".
ballast_status* check_index(std::size_t index, std::size_t count, const char* what) noexcept;

}  // namespace ballast::capi
