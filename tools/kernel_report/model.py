#!/usr/bin/env python3
"""The H200 performance model of docs/gpu-performance.md: predicted fraction of a
device-to-device copy for each bench_derive case, from tools/kernel-report figures
(registers, shared memory, bytes in flight, instructions per 16 bytes).
Writes tools/kernel_report/predicted.txt, which `tools/kernel-report --compare` reads."""
import math
SMS, CLK, COPY_TB = 132, 1.75e9, 4.2e12   # SMs, sustained clock, D2D copy traffic (read+write) B/s
LAT = 800e-9                               # loaded HBM latency
B_CLK = COPY_TB / SMS / CLK               # traffic bytes per clock per SM at copy speed
ISSUE = 128                                # thread-instructions per clock per SM
def resident(threads, regs, smem):
    """Resident threads per SM (sm_90: 64K registers allocated per warp in 256s, 228 KB of shared memory
    with 1 KB reserved per block, 2048 threads, 32 blocks)."""
    warps = threads // 32
    regs_block = warps * math.ceil(regs * 32 / 256) * 256
    by_regs = 65536 // regs_block
    by_smem = (233472 // (smem + 1024)) if smem else 32
    by_threads = 2048 // threads
    return min(by_regs, by_smem, by_threads, 32) * threads


def main():
    rows = [
     # case, threads, regs, smem, bytes loaded/thread in flight, read share, phase, traffic per 16B written, instr/16B, access eff
     ("transpose/f32/4096x4096", 64, 46, 4096, 64, 0.5, 0.5, 32, 26.0, 1.0),
     ("transpose/f16/8192x4096", 64, 80, 8192, 128, 0.5, 0.5, 32, 26.0, 1.0),
     ("transpose/u8/8192x8192", 64, 128, 16384, 256, 0.5, 0.5, 32, 31.3, 1.0),
     ("to_f16/f32/4096x4096", 256, 24, 0, 32, 2/3, 1.0, 48, 24.0, 1.0),
     ("to_f16/bf16/8192x4096", 256, 20, 0, 16, 0.5, 1.0, 32, 29.0, 1.0),
     ("dequant_int4/f32_scales/packed_zp/8192x8192/bs32", 256, 31, 0, 9, 0.25, 1.0, 21.2, 87.0, 1.0),
     ("dequant_int4/f16_scales/no_zp/8192x8192/bs128", 256, 31, 0, 6, 0.22, 1.0, 20.5, 70.0, 1.0),
     ("repack_int4/f32_scales/packed_zp/8192x16384/bs32", 256, 40, 0, 20.5, 0.51, 1.0, 32.4, 134.4, 1.0),
     ("repack_int4/f16_scales/no_zp/8192x16384/bs128", 256, 40, 0, 16.5, 0.49, 1.0, 31.5, 110.0, 1.0),
     ("quant_int8/f32/4096x4096", 256, 64, 64, 64, 0.8, 0.5, 80, 275.0, 1.0),
     ("quant_int8/f16/8192x4096", 256, 48, 64, 32, 0.67, 0.5, 48, 279.0, 1.0),
     # dequant_gguf (not bench_derive cases yet): one group of eight outputs per thread; the bytes in
     # flight are the group's share of its block (byte loads, issued before the first use; plain
     # float sources: one or two 16-byte loads).
     ("dequant_gguf/f32/8192x8192", 256, 30, 0, 32, 0.67, 1.0, 48, 32.0, 1.0),
     ("dequant_gguf/f16/8192x8192", 256, 28, 0, 16, 0.50, 1.0, 32, 46.0, 1.0),
     ("dequant_gguf/bf16/8192x8192", 256, 28, 0, 16, 0.50, 1.0, 32, 38.0, 1.0),
     ("dequant_gguf/q4_0/8192x8192", 256, 32, 0, 4.5, 0.22, 1.0, 20.5, 97.0, 1.0),
     ("dequant_gguf/q4_1/8192x8192", 256, 32, 0, 5, 0.24, 1.0, 21, 96.0, 1.0),
     ("dequant_gguf/q5_0/8192x8192", 256, 32, 0, 5.5, 0.26, 1.0, 21.5, 148.0, 1.0),
     ("dequant_gguf/q5_1/8192x8192", 256, 32, 0, 6, 0.27, 1.0, 22, 156.0, 1.0),
     ("dequant_gguf/q8_0/8192x8192", 256, 32, 0, 8.5, 0.35, 1.0, 24.5, 81.0, 1.0),
     ("dequant_gguf/q2_k/8192x8192", 256, 39, 0, 2.625, 0.14, 1.0, 18.625, 115.0, 1.0),
     ("dequant_gguf/q3_k/8192x8192", 256, 32, 0, 3.4375, 0.18, 1.0, 19.4375, 166.0, 1.0),
     ("dequant_gguf/q4_k/8192x8192", 256, 32, 0, 4.5, 0.22, 1.0, 20.5, 120.0, 1.0),
     ("dequant_gguf/q5_k/8192x8192", 256, 32, 0, 5.5, 0.26, 1.0, 21.5, 154.0, 1.0),
     ("dequant_gguf/q6_k/8192x8192", 256, 40, 0, 6.5625, 0.29, 1.0, 22.5625, 147.0, 1.0),
     ("dequant_gguf/q8_k/8192x8192", 256, 32, 0, 9.125, 0.36, 1.0, 25.125, 88.0, 1.0),
     ("dequant_gguf_f32/q4_0/8192x8192", 256, 31, 0, 4.5, 0.12, 1.0, 18.25, 49.0, 1.0),
     ("dequant_gguf_f32/q4_k/8192x8192", 256, 32, 0, 4.5, 0.12, 1.0, 18.25, 60.5, 1.0),
     ("dequant_gguf_f32/q6_k/8192x8192", 256, 40, 0, 6.5625, 0.17, 1.0, 19.2812, 74.0, 1.0),
    ]
    print("B_CLK=%.1f B/clk/SM, read in flight for copy speed=%.1f KB/SM" % (B_CLK, COPY_TB/2*LAT/SMS/1024))
    for case, th, regs, smem, fl, rho, phase, T, i16, eff in rows:
        res = resident(th, regs, smem)
        inflight = res * fl * phase
        need = 2 * rho * (COPY_TB / 2) * LAT / SMS
        mlp = min(1.0, inflight / need)
        t_mem = T / B_CLK
        t_iss = i16 / ISSUE
        u = t_iss / t_mem
        iss = min(1.0, 0.7 / u)
        pred = mlp * iss * eff
        print("%-50s res=%4d inflight=%6.1fKB need=%5.1fKB mlp=%.2f u=%.2f pred=%.2f" % (case, res, inflight/1024, need/1024, mlp, u, pred))
    print()
    blocks = {  # work blocks of the bench case, blocks resident per SM
     "transpose/f32/4096x4096": (16384, 1344//64), "transpose/f16/8192x4096": (8192, 768//64), "transpose/u8/8192x8192": (4096, 512//64),
     "to_f16/f32/4096x4096": (8192, 8), "to_f16/bf16/8192x4096": (16384, 8),
     "dequant_int4/f32_scales/packed_zp/8192x8192/bs32": (32768, 8), "dequant_int4/f16_scales/no_zp/8192x8192/bs128": (32768, 8),
     "repack_int4/f32_scales/packed_zp/8192x16384/bs32": (16384, 6), "repack_int4/f16_scales/no_zp/8192x16384/bs128": (16384, 6),
     "quant_int8/f32/4096x4096": (4096, 4), "quant_int8/f16/8192x4096": (8192, 5),
     "dequant_gguf/f32/8192x8192": (32768, 8),
     "dequant_gguf/f16/8192x8192": (32768, 8),
     "dequant_gguf/bf16/8192x8192": (32768, 8),
     "dequant_gguf/q4_0/8192x8192": (32768, 8),
     "dequant_gguf/q4_1/8192x8192": (32768, 8),
     "dequant_gguf/q5_0/8192x8192": (32768, 8),
     "dequant_gguf/q5_1/8192x8192": (32768, 8),
     "dequant_gguf/q8_0/8192x8192": (32768, 8),
     "dequant_gguf/q2_k/8192x8192": (32768, 6),
     "dequant_gguf/q3_k/8192x8192": (32768, 8),
     "dequant_gguf/q4_k/8192x8192": (32768, 8),
     "dequant_gguf/q5_k/8192x8192": (32768, 8),
     "dequant_gguf/q6_k/8192x8192": (32768, 6),
     "dequant_gguf/q8_k/8192x8192": (32768, 8),
     "dequant_gguf_f32/q4_0/8192x8192": (32768, 8),
     "dequant_gguf_f32/q4_k/8192x8192": (32768, 8),
     "dequant_gguf_f32/q6_k/8192x8192": (32768, 6)}
    out = []
    for case, th, regs, smem, fl, rho, phase, T, i16, eff in rows:
        res = resident(th, regs, smem)
        mlp = min(1.0, res * fl * phase / (2 * rho * (COPY_TB / 2) * LAT / SMS))
        u = (i16 / ISSUE) / (T / B_CLK)
        iss = min(1.0, 0.7 / u)
        nb, per = blocks[case]
        waves = nb / (per * SMS)
        tail = waves / (waves + 0.5)
        smem_rt = 0.9 if case.startswith("transpose") else 1.0
        pred = min(0.95, mlp * iss * eff) * tail * smem_rt
        out.append((case, res, res*fl*phase/1024, mlp, u, iss, waves, tail, pred))
        print("| %s | %d | %.0f | %.2f | %.1f | %.2f | %.2f | %.1f | %.2f | **%.2f** |" % (case, res, res*fl*phase/1024, mlp, i16, u, iss, waves, tail, pred))
    with open(__import__("os").path.join(__import__("os").path.dirname(__file__), "predicted.txt"), "w") as f:
        for o in out: f.write("%s\t%.2f\n" % (o[0], o[8]))


if __name__ == "__main__":
    main()
