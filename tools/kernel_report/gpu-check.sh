# Sourced by tools/gpu-check (or run by hand on the GPU machine): the kernel
# report's device-side half.
#
#   source tools/kernel_report/gpu-check.sh
#   kernel_report_gpu_check OUT_DIR [BENCH_OUTPUT]
#
# Writes OUT_DIR/kernel-report.txt (CUDA figures; SASS instruction counts
# when the toolkit there has cuobjdump, which the build machine lacks) and,
# given bench_derive's output (bench-cuda.txt), OUT_DIR/kernel-prediction.txt:
# each measured ratio next to docs/gpu-performance.md's prediction. Needs
# python3 and nvcc; never fails the caller (returns 0, notes problems in the
# files).
kernel_report_gpu_check() {
  local out="$1" bench="${2:-}"
  local root
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
  mkdir -p "$out"
  if command -v python3 >/dev/null; then
    timeout 300 python3 "$root/tools/kernel-report" --only cuda --check >"$out/kernel-report.txt" 2>&1 ||
      echo "kernel-report: exit $? (see above)" >>"$out/kernel-report.txt"
    if [[ -n "$bench" && -f "$bench" ]]; then
      python3 "$root/tools/kernel-report" --compare "$bench" >"$out/kernel-prediction.txt" 2>&1 || true
    fi
  else
    echo "kernel-report: no python3 on this machine" >"$out/kernel-report.txt"
  fi
  return 0
}
