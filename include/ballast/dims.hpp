// Dims: a tensor's shape. Nearly every tensor has rank <= 6, so those dims
// live inside the object; a loader filling tens of thousands of WeightRefs
// then allocates nothing for shapes. Higher ranks spill to the heap.
#pragma once

#include <ballast/export.hpp>
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <vector>

BALLAST_API_BEGIN

namespace ballast {

class Dims {
 public:
  static constexpr std::size_t kInline = 6;

  Dims() noexcept = default;
  Dims(std::initializer_list<std::int64_t> dims) { assign(std::span<const std::int64_t>(dims.begin(), dims.size())); }
  explicit Dims(std::span<const std::int64_t> dims) { assign(dims); }
  Dims(const Dims& other) { assign(other); }
  Dims(Dims&& other) noexcept { take(other); }
  Dims& operator=(const Dims& other) {
    if (this != &other) assign(other);
    return *this;
  }
  Dims& operator=(Dims&& other) noexcept {
    if (this != &other) take(other);
    return *this;
  }
  Dims& operator=(std::initializer_list<std::int64_t> dims) {
    assign(std::span<const std::int64_t>(dims.begin(), dims.size()));
    return *this;
  }

  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  const std::int64_t* data() const noexcept { return heap_ ? heap_.get() : inline_; }
  std::int64_t* data() noexcept { return heap_ ? heap_.get() : inline_; }
  const std::int64_t* begin() const noexcept { return data(); }
  const std::int64_t* end() const noexcept { return data() + size_; }
  std::int64_t operator[](std::size_t i) const noexcept { return data()[i]; }
  std::int64_t& operator[](std::size_t i) noexcept { return data()[i]; }
  operator std::span<const std::int64_t>() const noexcept { return {data(), size_}; }
  std::vector<std::int64_t> to_vector() const { return {begin(), end()}; }

  void clear() noexcept { size_ = 0; }
  void push_back(std::int64_t d) {
    if (size_ == capacity_) grow(capacity_ * 2);
    data()[size_++] = d;
  }
  void reserve(std::size_t n) {
    if (n > capacity_) grow(n);
  }

  friend bool operator==(const Dims& a, std::span<const std::int64_t> b) noexcept {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }
  friend bool operator==(const Dims& a, const Dims& b) noexcept {
    return a == std::span<const std::int64_t>(b);
  }

 private:
  void assign(std::span<const std::int64_t> dims) {
    size_ = 0;
    reserve(dims.size());
    std::copy(dims.begin(), dims.end(), data());
    size_ = dims.size();
  }
  void take(Dims& other) noexcept {
    heap_ = std::move(other.heap_);
    if (!heap_) std::copy(other.inline_, other.inline_ + other.size_, inline_);
    size_ = other.size_;
    capacity_ = other.capacity_;
    other.size_ = 0;
    other.capacity_ = kInline;
  }
  void grow(std::size_t n) {
    auto bigger = std::make_unique<std::int64_t[]>(n);
    std::copy(begin(), end(), bigger.get());
    heap_ = std::move(bigger);
    capacity_ = n;
  }

  std::int64_t inline_[kInline];  // only [0, size_) is ever read: no zeroing on the hot path
  std::unique_ptr<std::int64_t[]> heap_;
  std::size_t size_ = 0;
  std::size_t capacity_ = kInline;
};

}  // namespace ballast

BALLAST_API_END
