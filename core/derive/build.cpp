// start / finish / build_one: the sequence every derived value is made by
// (build.hpp).
#include "derive/build.hpp"

namespace ballast::derive {

Status start(GpuBackend& gpu, DerivationLaunch& l, const DerivationSizes& sizes, OutputBlocks& blocks) {
  l.dst = l.dst2 = 0;
  BALLAST_RETURN_IF_ERROR(blocks.obtain(l, sizes));
  if (Status s = gpu.launch(l); !s.ok()) return blocks.give_back(l, sizes, std::move(s));
  return Status();
}

Status finish(DerivationLaunch& l, const DerivationSizes& sizes, OutputBlocks& blocks, const RecheckOperands& recheck) {
  if (!recheck) return Status();
  if (Status s = recheck(); !s.ok()) return blocks.give_back(l, sizes, std::move(s));
  return Status();
}

Status build_one(GpuBackend& gpu, DerivationLaunch& l, const DerivationSizes& sizes, OutputBlocks& blocks,
                 const RecheckOperands& recheck) {
  BALLAST_RETURN_IF_ERROR(start(gpu, l, sizes, blocks));
  // Wait: an asynchronous kernel failure must never become a value.
  if (Status s = gpu.synchronize(); !s.ok()) return blocks.give_back(l, sizes, std::move(s));
  return finish(l, sizes, blocks, recheck);
}

}  // namespace ballast::derive
