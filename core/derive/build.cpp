// start / finish / build_one: the sequence every derived value is made by
// (build.hpp).
#include "derive/build.hpp"

namespace ballast::derive {

namespace {

// `step` with the blocks of `l` held: they go back when it fails, and when
// it throws (std::bad_alloc: host memory ran out building an error's text
// or a range's description), before the exception goes on, so no block is
// left allocated with no one to free it.
template <class Step>
Status holding(DerivationLaunch& l, const DerivationSizes& sizes, OutputBlocks& blocks, Step step) {
  Status s;
  try {
    s = step();
  } catch (...) {
    try {
      static_cast<void>(blocks.give_back(l, sizes, Status()));
    } catch (...) {  // no memory for the give-back's own words either: the first exception is the one to tell
    }
    throw;
  }
  return s.ok() ? s : blocks.give_back(l, sizes, std::move(s));
}

}  // namespace

Status start(GpuBackend& gpu, DerivationLaunch& l, const DerivationSizes& sizes, OutputBlocks& blocks) {
  l.dst = l.dst2 = 0;
  BALLAST_RETURN_IF_ERROR(blocks.obtain(l, sizes));
  return holding(l, sizes, blocks, [&] { return gpu.launch(l); });
}

Status finish(DerivationLaunch& l, const DerivationSizes& sizes, OutputBlocks& blocks, const RecheckOperands& recheck) {
  if (!recheck) return Status();
  return holding(l, sizes, blocks, [&] { return recheck(); });
}

Status build_one(GpuBackend& gpu, DerivationLaunch& l, const DerivationSizes& sizes, OutputBlocks& blocks,
                 const RecheckOperands& recheck) {
  BALLAST_RETURN_IF_ERROR(start(gpu, l, sizes, blocks));
  // Wait: an asynchronous kernel failure must never become a value.
  BALLAST_RETURN_IF_ERROR(holding(l, sizes, blocks, [&] { return gpu.synchronize(); }));
  return finish(l, sizes, blocks, recheck);
}

}  // namespace ballast::derive
