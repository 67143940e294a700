// The io_uring engine: one ring per read_plan() call, one SQE per request
// in flight, no thread of ours. A short read is resubmitted for the rest
// before the request counts as done, so the reader sees the same whole
// requests as from the threads engine.
#include "read/issuer.hpp"

#if defined(BALLAST_HAVE_IO_URING)
#include <liburing.h>
#endif

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

namespace ballast::read {

#if defined(BALLAST_HAVE_IO_URING)

namespace {

class UringIssuer final : public Issuer {
 public:
  UringIssuer(std::uint32_t tags, std::uint64_t max_single) : max_single_(max_single), pending_(tags) {}
  // The ring is set up in place (liburing's struct is not documented as
  // movable once live).
  int init(std::uint32_t depth) {
    const int rc = io_uring_queue_init(depth, &ring_, 0);
    live_ = rc >= 0;
    return rc;
  }

  // The kernel writes into the reader's buffers until each CQE is reaped:
  // wait for every one before the ring (and then the buffers) go away.
  ~UringIssuer() override {
    if (!live_) return;
    while (in_flight_ > 0) {
      io_uring_cqe* cqe = nullptr;
      const int rc = io_uring_wait_cqe(&ring_, &cqe);
      if (rc == -EINTR) continue;
      if (rc < 0) break;  // only on a broken ring (EFAULT, EBADF): nothing left to wait on
      io_uring_cqe_seen(&ring_, cqe);
      --in_flight_;
    }
    io_uring_queue_exit(&ring_);
  }

  Status start(const ReadRequest& request) override {
    Pending& p = pending_.at(request.tag);
    p.request = request;
    p.got = 0;
    return submit(p);
  }

  ReadDone wait() override {
    for (;;) {
      io_uring_cqe* cqe = nullptr;
      const int rc = io_uring_wait_cqe(&ring_, &cqe);
      if (rc == -EINTR) continue;
      if (rc < 0) return ReadDone{0, 0, -rc};  // cannot happen with a live ring; report it on tag 0 as is
      const auto tag = static_cast<std::uint32_t>(io_uring_cqe_get_data64(cqe));
      const int res = cqe->res;
      io_uring_cqe_seen(&ring_, cqe);
      --in_flight_;
      Pending& p = pending_.at(tag);
      if (res == -EINTR || res == -EAGAIN) {
        if (submit(p).ok()) continue;
        return ReadDone{tag, p.got, EIO};
      }
      if (res < 0) return ReadDone{tag, p.got, -res};
      if (res == 0) return ReadDone{tag, p.got, 0};  // the file ended
      p.got += static_cast<std::uint64_t>(res);
      if (p.got >= p.request.need) return ReadDone{tag, p.got, 0};
      if (!submit(p).ok()) return ReadDone{tag, p.got, EIO};  // a short read: the rest
    }
  }

 private:
  struct Pending {
    ReadRequest request;
    std::uint64_t got = 0;
  };

  Status submit(Pending& p) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    // The reader never has more requests in flight than the ring has
    // entries, so this is a broken invariant, not back pressure.
    if (sqe == nullptr) return make_error(ErrorCode::internal, "io_uring: no free submission entry");
    const std::uint64_t ask = std::min<std::uint64_t>(p.request.dst.size() - p.got, max_single_);
    io_uring_prep_read(sqe, p.request.fd, p.request.dst.data() + p.got, static_cast<unsigned>(ask),
                       p.request.offset + p.got);
    io_uring_sqe_set_data64(sqe, p.request.tag);
    int rc;
    do rc = io_uring_submit(&ring_);
    while (rc == -EINTR || rc == -EAGAIN);
    if (rc < 0) return make_error(ErrorCode::io, std::string("io_uring_submit: ") + std::strerror(-rc));
    ++in_flight_;
    return Status();
  }

  std::uint64_t max_single_;
  io_uring ring_{};
  bool live_ = false;
  std::vector<Pending> pending_;
  std::uint32_t in_flight_ = 0;
};

}  // namespace

Result<std::unique_ptr<Issuer>> make_uring_issuer(std::uint32_t depth, std::uint32_t tags, std::uint64_t max_single) {
  auto issuer = std::make_unique<UringIssuer>(tags, std::clamp<std::uint64_t>(max_single, 1, kMaxSingleRead));
  if (const int rc = issuer->init(depth); rc < 0)
    return make_error(ErrorCode::unsupported, std::string("io_uring: the kernel refused a ring (") +
                                                  std::strerror(-rc) + ")");
  return std::unique_ptr<Issuer>(std::move(issuer));
}

bool uring_probe() noexcept {
  io_uring ring{};
  if (io_uring_queue_init(2, &ring, 0) < 0) return false;
  io_uring_queue_exit(&ring);
  return true;
}

#else

Result<std::unique_ptr<Issuer>> make_uring_issuer(std::uint32_t, std::uint32_t, std::uint64_t) {
  return make_error(ErrorCode::unsupported, "io_uring: this ballast was built without liburing");
}

bool uring_probe() noexcept { return false; }

#endif

}  // namespace ballast::read

namespace ballast {

bool io_uring_available() noexcept {
  // Set up (and torn down) once per process: the answer does not change
  // while it runs, and a refused io_uring_setup is not free.
  static const bool available = read::uring_probe();
  return available;
}

}  // namespace ballast
