// Models: open (every format open_model reads), the weight list and the
// accounting, computed once at open so that reads are lock-free and the
// strings they return stay put.
#include "capi/objects.hpp"

#include <ballast/dtype.hpp>

#include <span>

using namespace ballast;
using namespace ballast::capi;

namespace {

// The store's error about a weight's bytes knows their file, not the
// weight's name: the status says which weight too.
ballast_status* naming(Error error, const WeightRow& weight) {
  if (error.tensor.empty()) error.tensor = weight.name;
  return from_error(error);
}

void describe(ModelObject& m) {
  const WeightStore& store = m.model.store();
  m.format = std::string(model_format_name(m.model.format()));
  for (ValueId id : m.model.weight_order()) {
    auto it = store.weights().find(id);
    if (it == store.weights().end()) continue;
    WeightRow row;
    row.name = std::string(m.model.value_name(id));
    row.ref = &it->second;
    row.dtype = std::string(dtype_name(it->second.dtype));
    if (m.model.format() == ModelFormat::gguf) row.gguf_type = std::string(dtype_gguf_name(it->second.dtype));
    row.bytes = it->second.byte_length();
    if (it->second.is_external()) {
      const ExternalLocation& ext = *it->second.external;
      row.file = ext.resolved().empty() ? ext.location() : ext.resolved().string();
      row.offset = ext.offset;
    }
    m.weights.push_back(std::move(row));
  }
  // After the last push_back: a view into a string the vector moved would
  // dangle. The first row of a name wins, as a scan in order would find.
  m.index_of.reserve(m.weights.size());
  for (std::size_t i = 0; i < m.weights.size(); ++i) m.index_of.emplace(m.weights[i].name, i);
  const ReferencedWeightBytes referenced = store.referenced_weight_bytes();
  m.accounting.size = sizeof(ballast_accounting);
  m.accounting.mapped_bytes = store.mapped_external_bytes();
  m.accounting.referenced_bytes = referenced.total;
  m.accounting.header_bytes = store.format_header_bytes();
  m.accounting.dead_bytes = store.unreferenced_external_bytes(referenced);
  m.accounting.files = referenced.files.size();
  for (const DeadRanges& file : store.dead_ranges(referenced)) {
    m.dead_files.push_back(file.path.string());
    for (const ByteRange& r : file.ranges) m.dead.push_back({m.dead_files.size() - 1, r.offset, r.length});
  }
  m.accounting.dead_ranges = m.dead.size();
}

}  // namespace

extern "C" {

ballast_status* ballast_model_open(const char* path, ballast_model** out) {
  return guarded([&]() -> ballast_status* {
    if (auto* e = null_out(out, "the output handle")) return e;
    if (path == nullptr) return invalid_argument("invalid_argument: the model path is NULL");
    auto opened = open_model(path);
    if (!opened.ok()) return from_error(opened.error());
    auto object = std::make_shared<ModelObject>();
    object->model = std::move(*opened);
    describe(*object);
    *out = static_cast<ballast_model*>(insert_handle(Kind::model, std::move(object)));
    return nullptr;
  });
}

ballast_status* ballast_model_free(ballast_model* model) {
  if (model == nullptr) return nullptr;
  return guarded([&]() -> ballast_status* {
    auto object = remove_handle(model, Kind::model);
    return object ? nullptr : bad_handle(Kind::model, model);
  });
}

ballast_status* ballast_model_retain(const ballast_model* model, ballast_model** out) {
  return guarded([&]() -> ballast_status* {
    ballast_status* e = null_out(out, "the output handle");
    if (e) return e;
    auto m = find_handle(model, Kind::model);
    if (!m) return bad_handle(Kind::model, model);
    *out = static_cast<ballast_model*>(insert_handle(Kind::model, std::move(m)));
    return nullptr;
  });
}

ballast_status* ballast_model_weight_data(const ballast_model* model, size_t index, const void** out) {
  return guarded([&]() -> ballast_status* {
    ballast_status* e = null_out(out, "the output");
    if (e) return e;
    auto m = lookup<ModelObject>(model, Kind::model, &e);
    if (!m) return e;
    if (auto* bad = check_index(index, m->weights.size(), "weight")) return bad;
    // The caller reads the mapping itself: a file truncated since it was
    // opened would be SIGBUS on its first touch, so it is an io error here.
    if (Status s = m->model.store().check_unchanged(*m->weights[index].ref); !s.ok())
      return naming(s.error(), m->weights[index]);
    const auto bytes = m->model.store().bytes(*m->weights[index].ref);
    if (!bytes)
      return make_status(BALLAST_E_OUT_OF_BOUNDS, "out_of_bounds: weight " + m->weights[index].name +
                                                      " lies outside its mapping");
    *out = bytes->data();
    return nullptr;
  });
}

ballast_status* ballast_model_format(const ballast_model* model, const char** out) {
  return guarded([&]() -> ballast_status* {
    ballast_status* e = null_out(out, "the output");
    if (e) return e;
    auto m = lookup<ModelObject>(model, Kind::model, &e);
    if (!m) return e;
    *out = m->format.c_str();
    return nullptr;
  });
}

ballast_status* ballast_model_weight_count(const ballast_model* model, size_t* out) {
  return guarded([&]() -> ballast_status* {
    ballast_status* e = null_out(out, "the output");
    if (e) return e;
    auto m = lookup<ModelObject>(model, Kind::model, &e);
    if (!m) return e;
    *out = m->weights.size();
    return nullptr;
  });
}

ballast_status* ballast_model_weight(const ballast_model* model, size_t index, ballast_weight_info* out) {
  return guarded([&]() -> ballast_status* {
    ballast_status* e = nullptr;
    auto m = lookup<ModelObject>(model, Kind::model, &e);
    if (!m) return e;
    if (auto* bad = check_index(index, m->weights.size(), "weight")) return bad;
    const WeightRow& w = m->weights[index];
    ballast_weight_info info{};
    info.name = w.name.c_str();
    info.dtype = w.dtype.c_str();
    info.ndims = w.ref->dims.size();
    info.dims = w.ref->dims.data();
    info.bytes = w.bytes;
    info.file = w.file.c_str();
    info.offset = w.offset;
    info.gguf_type = w.gguf_type.c_str();
    return write_out(info, out);
  });
}

ballast_status* ballast_model_find_weight(const ballast_model* model, const char* name, size_t* index) {
  return guarded([&]() -> ballast_status* {
    ballast_status* e = null_out(index, "the output index");
    if (e) return e;
    auto m = lookup<ModelObject>(model, Kind::model, &e);
    if (!m) return e;
    if (name == nullptr) return invalid_argument("invalid_argument: the weight name is NULL");
    if (auto it = m->index_of.find(name); it != m->index_of.end()) {
      *index = it->second;
      return nullptr;
    }
    return make_status(BALLAST_E_NOT_FOUND, "not_found: the model has no weight '" + std::string(name) + "'");
  });
}

ballast_status* ballast_model_accounting(const ballast_model* model, ballast_accounting* out) {
  return guarded([&]() -> ballast_status* {
    ballast_status* e = nullptr;
    auto m = lookup<ModelObject>(model, Kind::model, &e);
    if (!m) return e;
    return write_out(m->accounting, out);
  });
}

ballast_status* ballast_model_dead_range(const ballast_model* model, size_t index, ballast_byte_range* out) {
  return guarded([&]() -> ballast_status* {
    ballast_status* e = nullptr;
    auto m = lookup<ModelObject>(model, Kind::model, &e);
    if (!m) return e;
    if (auto* bad = check_index(index, m->dead.size(), "dead range")) return bad;
    const DeadRow& d = m->dead[index];
    ballast_byte_range r{};
    r.file = m->dead_files[d.file].c_str();
    r.offset = d.offset;
    r.length = d.length;
    return write_out(r, out);
  });
}

ballast_status* ballast_model_read_weight(const ballast_model* model, size_t index, uint64_t offset, void* dst,
                                          size_t dst_length, uint64_t length) {
  return guarded([&]() -> ballast_status* {
    ballast_status* e = nullptr;
    auto m = lookup<ModelObject>(model, Kind::model, &e);
    if (!m) return e;
    if (auto* bad = check_index(index, m->weights.size(), "weight")) return bad;
    if ((e = check_buffer(dst, dst_length, length))) return e;
    // copy_bytes checks the range against the weight (overflow-safe) and
    // guards the copy against a file truncated under the mapping.
    Status copied = m->model.store().copy_bytes(*m->weights[index].ref, offset,
                                                std::span<std::byte>(static_cast<std::byte*>(dst), length));
    return copied.ok() ? nullptr : naming(copied.error(), m->weights[index]);
  });
}

ballast_status* ballast_model_note_count(const ballast_model* model, size_t* out) {
  return guarded([&]() -> ballast_status* {
    ballast_status* e = null_out(out, "the output");
    if (e) return e;
    auto m = lookup<ModelObject>(model, Kind::model, &e);
    if (!m) return e;
    *out = m->model.notes().size();
    return nullptr;
  });
}

ballast_status* ballast_model_note(const ballast_model* model, size_t index, const char** tensor,
                                   const char** message) {
  return guarded([&]() -> ballast_status* {
    ballast_status* e = nullptr;
    auto m = lookup<ModelObject>(model, Kind::model, &e);
    if (!m) return e;
    const auto& notes = m->model.notes();
    if (auto* bad = check_index(index, notes.size(), "note")) return bad;
    if (tensor) *tensor = notes[index].tensor.c_str();
    if (message) *message = notes[index].message.c_str();
    return nullptr;
  });
}

}  // extern "C"
