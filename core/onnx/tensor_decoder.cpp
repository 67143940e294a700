#include "onnx/tensor_decoder.hpp"

#include "onnx/inline_data.hpp"

#include <array>

namespace ballast::onnx {

namespace {

// TensorProto field numbers (onnx.proto).
enum TensorField : std::uint32_t {
  kDims = 1,
  kDataType = 2,
  kSegment = 3,
  kFloatData = 4,
  kInt32Data = 5,
  kStringData = 6,
  kInt64Data = 7,
  kName = 8,
  kRawData = 9,
  kDoubleData = 10,
  kUint64Data = 11,
  kExternalData = 13,
  kDataLocation = 14,
};

constexpr std::array<std::uint32_t, 5> kTypedFields = {kFloatData, kInt32Data, kInt64Data, kDoubleData, kUint64Data};

std::string_view typed_field_name(std::uint32_t number) {
  switch (number) {
    case kFloatData: return "float_data";
    case kInt32Data: return "int32_data";
    case kInt64Data: return "int64_data";
    case kDoubleData: return "double_data";
    case kUint64Data: return "uint64_data";
  }
  return "?";
}

// Which typed field the ONNX spec stores each dtype in (onnx.proto comments
// on TensorProto): float_data for float and complex64; int32_data for every
// type of 16 bits or fewer (bit patterns for the float ones, two 4-bit
// values per element for the 4-bit ones) and int32; int64_data for int64;
// double_data for double and complex128; uint64_data for uint32 and uint64.
std::uint32_t typed_field_for(DataType t) {
  switch (t) {
    case DataType::float32:
    case DataType::complex64: return kFloatData;
    case DataType::int64: return kInt64Data;
    case DataType::float64:
    case DataType::complex128: return kDoubleData;
    case DataType::uint32:
    case DataType::uint64: return kUint64Data;
    default: return kInt32Data;
  }
}

// How many values of the typed field a tensor of `elements` elements needs;
// nullopt when that overflows (max_tensor_elements may be raised to 2^64).
std::optional<std::uint64_t> typed_value_count(DataType t, std::uint64_t elements) {
  if (t == DataType::complex64 || t == DataType::complex128) {
    std::uint64_t values = 0;
    if (__builtin_mul_overflow(elements, std::uint64_t{2}, &values)) return std::nullopt;
    return values;
  }
  if (dtype_bits(t) == 4) return elements / 2 + (elements & 1);
  return elements;
}

// Bytes each int32_data / uint64_data value turns into.
std::size_t varint_out_width(DataType t) {
  const unsigned bits = dtype_bits(t);
  return bits <= 8 ? 1 : bits / 8;
}

// The types whose int32_data values are a float's bits (the spec: "bit
// representation ... stored as uint16" and its float8/float4 kin).
bool float_bits(DataType t) {
  switch (t) {
    case DataType::float16:
    case DataType::bfloat16:
    case DataType::float8e4m3fn:
    case DataType::float8e4m3fnuz:
    case DataType::float8e5m2:
    case DataType::float8e5m2fnuz:
    case DataType::float4e2m1: return true;
    default: return false;
  }
}

struct Scan {
  std::string_view name;
  Dims dims;
  std::optional<std::uint64_t> data_type;
  std::optional<WireField> raw_data;
  std::optional<std::uint64_t> segment_at;
  std::uint32_t typed_seen = 0;  // bit n: typed field number n holds data
  std::uint64_t string_count = 0;
  std::vector<ExternalEntry>* external = nullptr;  // the decoder's reused buffer
  std::uint64_t max_external = 0;                  // LoadOptions::max_external_entries
  std::uint64_t data_location = 0;
};

// Every external tensor has three or four of these entries, so they are a
// third of the fields of a large model. Protobuf writers emit them as
// exactly `0x0A len key 0x12 len value` with short strings: recognise that
// byte pattern directly and leave anything else to the general reader.
bool scan_entry_fast(const WireField& field, ExternalEntry& entry) noexcept {
  const Bytes p = field.payload;
  const std::size_t n = p.size();
  auto byte = [&p](std::size_t i) { return std::to_integer<std::uint8_t>(p[i]); };
  if (n < 4 || byte(0) != 0x0A || byte(1) >= 0x80) return false;
  const std::size_t key_length = byte(1);
  const std::size_t value_tag_at = 2 + key_length;
  if (value_tag_at + 2 > n || byte(value_tag_at) != 0x12 || byte(value_tag_at + 1) >= 0x80) return false;
  const std::size_t value_length = byte(value_tag_at + 1);
  if (value_tag_at + 2 + value_length != n) return false;
  const auto* text = reinterpret_cast<const char*>(p.data());
  entry.offset = field.offset;
  entry.key = std::string_view(text + 2, key_length);
  entry.value = std::string_view(text + value_tag_at + 2, value_length);
  return true;
}

Status scan_entry(const WireField& field, ExternalEntry& entry) {
  if (scan_entry_fast(field, entry)) return {};
  WireReader reader(field.payload, field.payload_offset);
  entry.offset = field.offset;
  WireField f;
  while (!reader.at_end()) {
    if (!reader.next(f)) return reader.error();
    if (f.number == 1 || f.number == 2) {
      if (f.type != WireType::len)
        return wire_type_error(f, WireType::len, f.number == 1 ? "StringStringEntryProto.key" : "StringStringEntryProto.value");
      (f.number == 1 ? entry.key : entry.value) = f.text();
    }
  }
  return {};
}

Status scan_tensor(const WireField& message, Scan& scan) {
  WireReader reader(message.payload, message.payload_offset);
  while (!reader.at_end()) {
    WireField f;
    if (!reader.next(f)) return reader.error();
    switch (f.number) {
      case kDims:
        if (f.type == WireType::varint) {
          scan.dims.push_back(static_cast<std::int64_t>(f.value));
        } else {
          BALLAST_RETURN_IF_ERROR(expect_wire_type(f, WireType::len, "TensorProto.dims"));
          BALLAST_ASSIGN_OR_RETURN(auto n, count_packed_varints(f, "TensorProto.dims"));
          scan.dims.reserve(scan.dims.size() + static_cast<std::size_t>(n));
          std::size_t pos = 0;
          std::uint64_t v = 0;
          while (read_varint(f.payload, pos, v)) scan.dims.push_back(static_cast<std::int64_t>(v));
        }
        break;
      case kDataType:
        BALLAST_RETURN_IF_ERROR(expect_wire_type(f, WireType::varint, "TensorProto.data_type"));
        scan.data_type = f.value;
        break;
      case kSegment:
        scan.segment_at = f.offset;
        break;
      case kFloatData:
      case kDoubleData:
        if (f.type != WireType::len) {
          BALLAST_RETURN_IF_ERROR(
              expect_wire_type(f, f.number == kFloatData ? WireType::fixed32 : WireType::fixed64,
                               f.number == kFloatData ? "TensorProto.float_data" : "TensorProto.double_data"));
        }
        scan.typed_seen |= 1u << f.number;
        break;
      case kInt32Data:
      case kInt64Data:
      case kUint64Data:
        if (f.type != WireType::len) {
          BALLAST_RETURN_IF_ERROR(
              expect_wire_type(f, WireType::varint, "TensorProto." + std::string(typed_field_name(f.number))));
        }
        scan.typed_seen |= 1u << f.number;
        break;
      case kStringData:
        BALLAST_RETURN_IF_ERROR(expect_wire_type(f, WireType::len, "TensorProto.string_data"));
        ++scan.string_count;
        break;
      case kName:
        BALLAST_RETURN_IF_ERROR(expect_wire_type(f, WireType::len, "TensorProto.name"));
        scan.name = f.text();
        break;
      case kRawData:
        BALLAST_RETURN_IF_ERROR(expect_wire_type(f, WireType::len, "TensorProto.raw_data"));
        scan.raw_data = f;
        break;
      case kExternalData: {
        BALLAST_RETURN_IF_ERROR(expect_wire_type(f, WireType::len, "TensorProto.external_data"));
        if (scan.external->size() >= scan.max_external) {
          Error e = make_error(ErrorCode::overflow, "more than " + std::to_string(scan.max_external) +
                                                        " external_data entries (LoadOptions::max_external_entries)");
          e.offset = f.offset;
          return e;
        }
        ExternalEntry entry;
        BALLAST_RETURN_IF_ERROR(scan_entry(f, entry));
        scan.external->push_back(entry);
        break;
      }
      case kDataLocation:
        BALLAST_RETURN_IF_ERROR(expect_wire_type(f, WireType::varint, "TensorProto.data_location"));
        scan.data_location = f.value;
        break;
      default: break;  // doc_string, metadata and fields of later schema versions
    }
  }
  return {};
}

}  // namespace

std::string_view TensorDecoder::name_of(const WireField& field) {
  WireReader reader(field.payload, field.payload_offset);
  std::string_view name;
  while (!reader.at_end()) {
    auto f = reader.next();
    if (!f) break;
    if (f->number == kName && f->type == WireType::len) name = f->text();
  }
  return name;
}

Status TensorDecoder::decode(const WireField& field, WeightSource source, std::string_view name_override,
                             DecodedTensor& out) {
  Scan scan;
  entries_.clear();
  scan.external = &entries_;
  scan.max_external = options_.max_external_entries;
  out.reset();
  auto fail = [&](ErrorCode code, std::string message, std::uint64_t offset) {
    Error e = make_error(code, std::move(message));
    e.file = model_file_;
    e.tensor = std::string(out.name);
    e.offset = offset;
    return e;
  };
  auto located = [&](Error e) {
    if (e.file.empty()) e.file = model_file_;
    if (e.tensor.empty()) e.tensor = std::string(out.name);
    return e;
  };

  Status scanned = scan_tensor(field, scan);
  out.name = name_override.empty() ? scan.name : name_override;
  if (!scanned.ok()) return located(std::move(scanned.error()));

  if (scan.segment_at) return fail(ErrorCode::unsupported, "segmented tensors are not supported", *scan.segment_at);
  if (!scan.data_type || *scan.data_type == 0 || *scan.data_type > static_cast<std::uint64_t>(kMaxKnownDataType))
    return fail(ErrorCode::unsupported,
                scan.data_type ? "unknown data_type " + std::to_string(static_cast<std::int64_t>(*scan.data_type))
                               : std::string("data_type is missing (undefined)"),
                field.offset);
  const auto dtype = static_cast<DataType>(*scan.data_type);

  for (std::int64_t d : scan.dims)
    if (d < 0) return fail(ErrorCode::malformed, "negative dimension " + std::to_string(d), field.offset);
  const auto elements = element_count(scan.dims);
  if (!elements) return fail(ErrorCode::overflow, "the product of the dims overflows 64 bits", field.offset);
  if (*elements > options_.max_tensor_elements)
    return fail(ErrorCode::overflow,
                std::to_string(*elements) + " elements exceed LoadOptions::max_tensor_elements (" +
                    std::to_string(options_.max_tensor_elements) + ")",
                field.offset);
  // A 0 dim leaves the others unbounded by the count: [2^62, 0] holds
  // nothing, yet every size computed from its rows overflows. Each dim is
  // held to the same cap (with elements > 0 each already is).
  if (*elements == 0)
    for (std::int64_t d : scan.dims)
      if (static_cast<std::uint64_t>(d) > options_.max_tensor_elements)
        return fail(ErrorCode::overflow,
                    "dim " + std::to_string(d) + " exceeds LoadOptions::max_tensor_elements (" +
                        std::to_string(options_.max_tensor_elements) + "), though another dim is 0",
                    field.offset);

  WeightRef& w = out.weight;
  w.dtype = dtype;
  w.dims = std::move(scan.dims);
  w.source = source;
  if (dtype == DataType::string) {
    // Strings live in string_data only: the external-data format stores
    // fixed-size elements, so an EXTERNAL string tensor is a broken file,
    // and listing it while its reference goes unchecked hid that.
    if (scan.data_location != 0 || !entries_.empty())
      return fail(ErrorCode::malformed, "a string tensor cannot be stored as external data", field.offset);
    // The same goes for raw_data and the numeric fields: values there would
    // be listed nowhere and checked by nobody.
    if (scan.raw_data || scan.typed_seen != 0)
      return fail(ErrorCode::malformed,
                  "a string tensor holds its values in string_data only, but " +
                      std::string(scan.raw_data ? "raw_data" : "a numeric data field") + " is set",
                  field.offset);
    if (scan.string_count != *elements)
      return fail(ErrorCode::size_mismatch,
                  "string_data has " + std::to_string(scan.string_count) + " values but dims need " +
                      std::to_string(*elements),
                  field.offset);
    out.is_string = true;
    return {};
  }
  if (scan.string_count != 0)
    return fail(ErrorCode::malformed,
                "string_data holds " + std::to_string(scan.string_count) + " values but data_type is " +
                    std::string(dtype_name(dtype)),
                field.offset);

  std::uint32_t typed = 0;
  for (std::uint32_t number : kTypedFields) {
    if ((scan.typed_seen & (1u << number)) == 0) continue;
    if (typed != 0)
      return fail(ErrorCode::malformed,
                  "both " + std::string(typed_field_name(typed)) + " and " + std::string(typed_field_name(number)) +
                      " hold data",
                  field.offset);
    typed = number;
  }
  const bool has_inline = scan.raw_data.has_value() || typed != 0;

  if (scan.data_location > 1)
    return fail(ErrorCode::unsupported, "unknown data_location " + std::to_string(scan.data_location), field.offset);
  if (scan.data_location == 1) {
    if (has_inline) return fail(ErrorCode::malformed, "external tensor also carries inline data", field.offset);
    w.storage = WeightRef::Storage::external;
    Status resolved = external_.resolve(entries_, out.name, dtype, *elements, field.offset, notes_, w.external.emplace());
    if (!resolved.ok()) return located(std::move(resolved.error()));
    return {};
  }
  if (!entries_.empty())
    notes_.push_back({std::string(out.name), "external_data entries ignored: data_location is not EXTERNAL"});

  const auto storage = dtype_storage_bytes(dtype, *elements);
  if (!storage)
    return fail(ErrorCode::overflow,
                "byte size of " + std::to_string(*elements) + " elements of " + std::string(dtype_name(dtype)) +
                    " overflows 64 bits",
                field.offset);
  const std::uint64_t needed = *storage;
  if (scan.raw_data) {
    if (typed != 0)
      return fail(ErrorCode::malformed, "both raw_data and " + std::string(typed_field_name(typed)) + " hold data",
                  field.offset);
    if (scan.raw_data->payload.size() != needed)
      return fail(ErrorCode::size_mismatch,
                  "raw_data is " + std::to_string(scan.raw_data->payload.size()) + " bytes but " +
                      std::string(dtype_name(dtype)) + " x dims need " + std::to_string(needed),
                  scan.raw_data->payload_offset);
    w.storage = WeightRef::Storage::inline_borrowed;
    w.inline_bytes = scan.raw_data->payload;
    return {};
  }
  if (typed == 0) {
    if (needed != 0)
      return fail(ErrorCode::size_mismatch, "no data for " + std::to_string(*elements) + " elements", field.offset);
    w.storage = WeightRef::Storage::inline_borrowed;
    return {};
  }

  if (typed != typed_field_for(dtype))
    return fail(ErrorCode::malformed,
                std::string(typed_field_name(typed)) + " cannot hold " + std::string(dtype_name(dtype)) +
                    " values (the spec puts them in " + std::string(typed_field_name(typed_field_for(dtype))) + ")",
                field.offset);
  const auto value_count = typed_value_count(dtype, *elements);
  if (!value_count)
    return fail(ErrorCode::overflow,
                "value count of " + std::to_string(*elements) + " elements of " + std::string(dtype_name(dtype)) +
                    " overflows 64 bits",
                field.offset);
  const std::uint64_t values = *value_count;
  const std::string what = "TensorProto." + std::string(typed_field_name(typed));
  auto mismatch = [&](std::uint64_t got) {
    return fail(ErrorCode::size_mismatch,
                std::string(typed_field_name(typed)) + " has " + std::to_string(got) + " values but " +
                    std::string(dtype_name(dtype)) + " x dims need " + std::to_string(values),
                field.offset);
  };

  Result<InlineData> data = InlineData{};
  if (typed == kFloatData || typed == kDoubleData) {
    data = gather_fixed(field, typed, typed == kFloatData ? 4 : 8, what);
    if (!data) return located(std::move(data.error()));
    if (data->count != values) return mismatch(data->count);
  } else {
    auto count = count_varints(field, typed, what);
    if (!count) return located(std::move(count.error()));
    if (*count != values) return mismatch(*count);
    const VarintField range = typed == kUint64Data ? VarintField::unsigned_values
                              : float_bits(dtype)  ? VarintField::bit_patterns
                                                   : VarintField::signed_values;
    data = gather_varints(field, typed, values, varint_out_width(dtype), dtype == DataType::bool_, what, range);
    if (!data) return located(std::move(data.error()));
  }
  w.inline_bytes = data->bytes;
  w.owned = data->owned;
  w.storage = data->owned ? WeightRef::Storage::inline_owned : WeightRef::Storage::inline_borrowed;
  return {};
}

}  // namespace ballast::onnx
