// Issue 24 §2: a page the guard zero-filled must not outlive the error. A
// file truncated during a guarded read and then put back exactly (same
// size, same modification time: cp -p, rsync -t, or an attacker) must stay
// refused: the mapping that faulted is poisoned, and the change check reads
// the status change time, which nobody can set back.
#include "store/mapped_file.hpp"
#include "store/sigbus_guard.hpp"

#include "unit/store/file_change_helpers.hpp"

#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <thread>

using namespace ballast;
using namespace ballast::testing;

namespace {

// Puts `bytes` back into `p` in place (same inode) and sets the
// modification time back to `mtime`, as `cp -p` over the file does.
void restore_exactly(const std::filesystem::path& p, const std::vector<std::byte>& bytes, const struct timespec& mtime) {
  const int fd = ::open(p.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  REQUIRE(fd >= 0);
  REQUIRE(::pwrite(fd, bytes.data(), bytes.size(), 0) == static_cast<ssize_t>(bytes.size()));
  struct timespec times[2] = {mtime, mtime};
  REQUIRE(::futimens(fd, times) == 0);
  ::close(fd);
}

struct timespec mtime_of(const std::filesystem::path& p) {
  struct stat st {};
  REQUIRE(::stat(p.c_str(), &st) == 0);
  return st.st_mtim;
}

}  // namespace

TEST_CASE("a guarded copy that faulted poisons the mapping: restoring size and mtime does not bring it back") {
  MappedWeight m;
  const struct timespec mtime = mtime_of(m.file);
  int calls = 0;
  store::set_read_hook_for_testing([&](const store::MappedFile& f) {
    if (calls++ == 0) truncate_file(f.path(), 0);  // between the check and the copy: the copy faults
  });
  std::vector<std::byte> got(8192);
  const Status first = m.store.copy_bytes(m.weight, 0, got);
  store::set_read_hook_for_testing({});
  REQUIRE(first.code() == ErrorCode::io);

  restore_exactly(m.file, m.original, mtime);
  struct stat st {};
  REQUIRE(::stat(m.file.c_str(), &st) == 0);
  REQUIRE(static_cast<std::size_t>(st.st_size) == m.original.size());
  REQUIRE(st.st_mtim.tv_sec == mtime.tv_sec);
  REQUIRE(st.st_mtim.tv_nsec == mtime.tv_nsec);

  for (const Status& s : {m.store.check_unchanged(m.weight), m.store.check_unchanged(m.mapping),
                          m.store.copy_bytes(m.weight, 0, got),
                          m.store.transfer(m.weight, 0, 8192, [](Bytes) { return Status(); })}) {
    CAPTURE(s.to_string());
    CHECK(s.code() == ErrorCode::io);
    CHECK(s.error().file == m.file.string());
    CHECK(contains(s.to_string(), "changed since it was opened"));  // the status change time, then the poison
  }
  // A new store (the model reopened) maps the file afresh: its bytes are back.
  WeightStore reopened;
  REQUIRE(reopened.map_external(m.file).ok());
  const WeightRef again = external_weight(m.file, 4096, 8192);
  REQUIRE(reopened.copy_bytes(again, 0, got).ok());
  CHECK(got == m.slice(4096, 8192));
}

TEST_CASE("put back as a new file renamed over the path (rsync -t): the poison alone refuses the faulted mapping") {
  MappedWeight m;
  const struct timespec mtime = mtime_of(m.file);
  int calls = 0;
  store::set_read_hook_for_testing([&](const store::MappedFile& f) {
    if (calls++ == 0) truncate_file(f.path(), 0);
  });
  std::vector<std::byte> got(8192);
  REQUIRE(m.store.copy_bytes(m.weight, 0, got).code() == ErrorCode::io);
  store::set_read_hook_for_testing({});
  // The old inode stays truncated under the mapping; a new one with the
  // old bytes and the old mtime takes the path: stat sees nothing wrong.
  const std::filesystem::path tmp = m.file.string() + ".tmp";
  write_file(tmp, m.original);
  struct timespec times[2] = {mtime, mtime};
  REQUIRE(::utimensat(AT_FDCWD, tmp.c_str(), times, 0) == 0);
  std::filesystem::rename(tmp, m.file);
  for (const Status& s : {m.store.check_unchanged(m.weight), m.store.copy_bytes(m.weight, 0, got),
                          m.store.transfer(m.weight, 0, 8192, [](Bytes) { return Status(); })}) {
    CAPTURE(s.to_string());
    CHECK(s.code() == ErrorCode::io);
    CHECK(contains(s.to_string(), "a read of its mapping faulted"));
  }
}

TEST_CASE("a transfer that read zero pages poisons the mapping for every later transfer") {
  MappedWeight m;
  const struct timespec mtime = mtime_of(m.file);
  const Status first = m.store.transfer(m.weight, 0, 8192, [&](Bytes bytes) {
    truncate_file(m.file, 0);
    volatile std::byte b = bytes[100];  // faults: answered with a zero page
    static_cast<void>(b);
    return Status();
  });
  REQUIRE(first.code() == ErrorCode::io);
  restore_exactly(m.file, m.original, mtime);
  bool saw_zeros = false;
  const Status later = m.store.transfer(m.weight, 0, 8192, [&](Bytes bytes) {
    saw_zeros = bytes[100] == std::byte{0};  // the zero page is still mapped there
    return Status();
  });
  CHECK(later.code() == ErrorCode::io);
  CHECK_FALSE(saw_zeros);  // refused before the sink ever saw them
  CHECK(contains(later.to_string(), "changed since it was opened"));
}

TEST_CASE("a file rewritten and dated back, with no fault at all: the status change time says it changed") {
  MappedWeight m;
  const struct timespec mtime = mtime_of(m.file);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a coarse clock still moves the ctime
  std::vector<std::byte> other = m.original;
  other[5000] = std::byte{0x77};
  restore_exactly(m.file, other, mtime);  // same size, same mtime, other bytes
  const Status s = m.store.check_unchanged(m.weight);
  REQUIRE(s.code() == ErrorCode::io);
  CHECK_MESSAGE(contains(s.to_string(), "(status changed "), s.to_string());
  std::vector<std::byte> got(8192);
  CHECK(m.store.copy_bytes(m.weight, 0, got).code() == ErrorCode::io);
}

TEST_CASE("a registration arm answers a truncation with zeros and poisons the mapping; a full table refuses") {
  MappedWeight m;
  auto file = store::MappedFile::open(m.file);
  REQUIRE(file.ok());
  const Bytes whole = (*file)->bytes();
  {
    store::RegistrationArm arm(whole.data(), whole.size(), (*file)->poison_flag());
    REQUIRE(arm.armed());
    CHECK(store::registration_slots_in_use() >= 1);
    truncate_file(m.file, 0);
    // A read nobody runs through ballast (a backend kernel): zeros, no signal.
    volatile std::byte b = whole[20000];
    CHECK(b == std::byte{0});
    CHECK(arm.faulted());
    CHECK((*file)->poisoned());
    CHECK((*file)->check_unchanged().code() == ErrorCode::io);
  }
  // Every slot taken: the next arm says so instead of leaving a range unguarded.
  std::vector<std::unique_ptr<store::RegistrationArm>> arms;
  const std::size_t before = store::registration_slots_in_use();
  for (std::size_t i = before; i < store::RegistrationArm::kSlots; ++i) {
    arms.push_back(std::make_unique<store::RegistrationArm>(m.original.data() + (i % 100), 1, nullptr));
    REQUIRE(arms.back()->armed());
  }
  store::RegistrationArm refused(m.original.data(), 1, nullptr);
  CHECK_FALSE(refused.armed());
  arms.clear();
  CHECK(store::registration_slots_in_use() == before);
}
