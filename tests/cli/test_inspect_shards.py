#!/usr/bin/python3
"""`ballast inspect MODEL --world N [--shard-rules FILE] [--json]` (issue 29):
the shard plan of every rank on generated models: a Hugging Face-named
safetensors file and a GGUF file written here with the standard library
only, and the llm test model (tools/gen/make_llm_model.py, ONNX MatMul and
MatMulNBits) where python3-onnx is installed. Per-rank totals add up, every
weight's shards cover it exactly once (replicated ones once per rank), and
the refusals are one-line typed errors.

Exit 0 pass, 1 fail.
"""

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys

from cli_check import FAILURES, expect, run


def pattern(n, seed=7):
    return bytes((i * seed + 1) & 0xFF for i in range(n))


def write_safetensors(path, tensors):
    """tensors: (name, dtype, shape, element bytes); laid out back to back."""
    header, buf = {}, b""
    for name, dtype, shape, size in tensors:
        n = size
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(buf), len(buf) + n]}
        buf += pattern(n)
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + buf)


def gstr(s):
    return struct.pack("<Q", len(s)) + s.encode()


def write_gguf(path, tensors):
    """tensors: (name, ne innermost first, ggml type, bytes)."""
    kv = gstr("general.architecture") + struct.pack("<I", 8) + gstr("llama")
    infos, at = b"", 0
    for name, ne, ggml, size in tensors:
        infos += gstr(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        infos += struct.pack("<IQ", ggml, at)
        at = (at + size + 31) // 32 * 32
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), 1) + kv + infos
    out += b"\0" * (-len(out) % 32)
    with open(path, "wb") as f:
        f.write(out + pattern(at))


HF = [("model.embed_tokens.weight", "F32", [64, 16], 4)] + [
    ("model.layers.%d.%s" % (i, n), t, s, e) for i in range(2) for n, t, s, e in (
        ("self_attn.q_proj.weight", "F16", [16, 16], 2),
        ("self_attn.k_proj.weight", "F16", [8, 16], 2),
        ("self_attn.v_proj.weight", "F16", [8, 16], 2),
        ("self_attn.o_proj.weight", "F16", [16, 16], 2),
        ("self_attn.qkv_proj.weight", "F16", [32, 16], 2),
        ("mlp.gate_proj.weight", "F16", [32, 16], 2),
        ("mlp.up_proj.weight", "F16", [32, 16], 2),
        ("mlp.down_proj.weight", "F16", [16, 32], 2),
        ("input_layernorm.weight", "F32", [16], 4))
] + [("model.norm.weight", "F32", [16], 4), ("lm_head.weight", "F16", [64, 16], 2)]

GGUF = [("token_embd.weight", [32, 8], 8, 8 * 34),             # q8_0: vocab 8 x hidden 32
        ("blk.0.attn_q.weight", [32, 32], 0, 32 * 32 * 4),
        ("blk.0.attn_output.weight", [32, 32], 1, 32 * 32 * 2),
        ("blk.0.ffn_down.weight", [64, 32], 2, 32 * 2 * 18),  # q4_0: 2 blocks a row
        ("blk.0.attn_norm.weight", [32], 0, 128),
        ("output.weight", [32, 8], 1, 8 * 32 * 2)]


def check_plan(cli, model, world, label, extra=()):
    rc, out, err = run(cli, "inspect", model, "--world", world, "--json", *extra)
    if not expect(rc == 0, "%s: inspect --world %d --json exits 0 (got %d: %s)" % (label, world, rc, err.strip()[-300:])):
        return None
    doc = json.loads(out)
    shards = doc.get("shards", {})
    ranks = shards.get("ranks", [])
    expect(shards.get("world") == world and len(ranks) == world, "%s: %d ranks under \"shards\"" % (label, world))
    union = shards["union_bytes"]
    referenced = doc["totals"]["referenced_bytes"] + doc["totals"]["inline_bytes"]
    expect(union == referenced, "%s: bytes any rank needs (%d) = the referenced bytes (%d)" % (label, union, referenced))
    expect(all(r["read_bytes"] + r["not_needed_bytes"] == union for r in ranks),
           "%s: every rank's read + not needed = the model's bytes" % label)
    expect(sum(r["read_bytes"] for r in ranks) == shards["read_bytes_sum"], "%s: the ranks' reads add up" % label)
    # The cooperative load: the union read once between the ranks (inline
    # weights are copied from each rank's own model, not read), each rank's
    # shards exactly what it keeps, receives and copies, every byte sent
    # received.
    coop = shards.get("cooperative", {})
    expect(sum(r["cooperative"]["read_bytes"] for r in ranks) == coop.get("union_bytes")
           == doc["totals"]["referenced_bytes"], "%s: the ranks' cooperative reads are the referenced bytes, once" % label)
    expect(all(r["cooperative"]["kept_bytes"] + r["cooperative"]["received_bytes"] + r["cooperative"]["inline_bytes"]
               == r["device_bytes"] for r in ranks), "%s: kept + received + inline = each rank's device bytes" % label)
    expect(sum(r["cooperative"]["sent_bytes"] for r in ranks) == sum(r["cooperative"]["received_bytes"] for r in ranks),
           "%s: every byte sent is received" % label)
    expect(coop.get("read_per_rank_bytes") == shards["read_bytes_sum"] and coop.get("read_everything_bytes") == union * world,
           "%s: the two baselines beside it" % label)
    weights = {w["name"]: w for w in doc["weights"]}
    want_device = sum(weights[w["name"]]["bytes"] * (world if w["split"] == "replicated" else 1) for w in shards["weights"])
    expect(sum(r["device_bytes"] for r in ranks) == want_device,
           "%s: the ranks' device bytes add up to each split weight once and each replicated one per rank" % label)
    exact = True
    for w in shards["weights"]:
        listed = weights[w["name"]]
        start = listed["offset"] if w["file_offsets"] else 0
        counts = [0] * listed["bytes"]
        for r in w["ranks"]:
            pieces = [(o, n) for o, n in r["ranges"]]
            pieces += [(v["offset"] + i * v["row_stride"], v["row_bytes"]) for v in r["strided"] for i in range(v["rows"])]
            for o, n in pieces:
                for b in range(o - start, o - start + n):
                    counts[b] += 1
        want = world if w["split"] == "replicated" else 1
        if any(c != want for c in counts):
            exact = False
            print("  %s: not covered exactly %d time(s)" % (w["name"], want))
    expect(exact, "%s: every weight's shards cover its bytes exactly (once, or once per rank when replicated)" % label)
    return shards


def one_line(err, *words):
    lines = [l for l in err.splitlines() if l.strip()]
    return len(lines) == 1 and all(w in lines[0] for w in words)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ballast", required=True)
    p.add_argument("--gen", required=True)
    p.add_argument("--work", required=True)
    a = p.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    cli = a.ballast

    st = os.path.join(a.work, "hf.safetensors")
    write_safetensors(st, HF)
    for world in (1, 2, 4):
        check_plan(cli, st, world, "safetensors")
    shards = check_plan(cli, st, 2, "safetensors")
    if shards:
        by = {w["name"]: w for w in shards["weights"]}
        expect(by["model.layers.0.self_attn.o_proj.weight"]["split"] == "row"
               and not by["model.layers.0.self_attn.o_proj.weight"]["contiguous"]
               and by["lm_head.weight"]["split"] == "vocab" and by["lm_head.weight"]["contiguous"]
               and by["model.norm.weight"]["split"] == "replicated",
               "safetensors: o_proj row (strided), lm_head vocab (ranges), norm replicated")
    rc, out, err = run(cli, "inspect", st, "--world", 2)
    expect(rc == 0 and "shard plan: world 2" in out and "NOT NEEDED" in out and "strided" in out,
           "inspect --world 2: the table lists the ranks and each weight's split (got %d)" % rc)

    rules = os.path.join(a.work, "rules.json")
    with open(rules, "w") as f:
        json.dump({"rules": [{"name": "qkv", "pattern": "*.qkv_proj.weight", "split": "column", "parts": [16, 8, 8]}]}, f)
    shards = check_plan(cli, st, 2, "safetensors --shard-rules", ("--shard-rules", rules))
    if shards:
        qkv = [w for w in shards["weights"] if w["name"].endswith("qkv_proj.weight")]
        expect(shards["rules"] == rules and all(w["rule"] == "qkv" and w["parts"] == 3 for w in qkv),
               "--shard-rules: the file's rule splits the fused QKV in 3 parts")

    # A rule of the file that matches nothing is said (once, on stderr);
    # the file's matching rule and the built-in ones are not.
    typo = os.path.join(a.work, "typo.json")
    with open(typo, "w") as f:
        json.dump({"rules": [{"name": "qkv", "pattern": "*.qkv_proj.weight", "split": "column", "parts": [16, 8, 8]},
                             {"name": "typo", "pattern": "*.q_prj.weight", "split": "column"}]}, f)
    rc, _, err = run(cli, "inspect", st, "--world", 2, "--shard-rules", typo)
    notes = [l for l in err.splitlines() if "note:" in l]
    expect(rc == 0 and len(notes) == 1 and "shard rule 'typo' decides no weight" in notes[0],
           "--shard-rules: the one rule that matches nothing is noted (got %d: %s)" % (rc, err.strip()[-300:]))
    rc, _, err = run(cli, "inspect", st, "--world", 2, "--shard-rules", rules)
    expect(rc == 0 and "note:" not in err, "--shard-rules: no note when every file rule matches (got: %s)" % err.strip())

    for args, words, what in ((["--world", 0], ("invalid_argument", "world size 0"), "world 0"),
                              (["--world", 3], ("unsupported", "not a multiple of the world size 3",
                                                "that split every weight under these rules: 2, 4"), "world 3"),
                              (["--world", 128], ("unsupported", "fewer than the ranks"), "world 128"),
                              (["--world", 2, "--shard-rules", os.path.join(a.work, "missing.json")], ("not_found",),
                               "a missing rules file")):
        rc, out, err = run(cli, "inspect", st, *args)
        expect(rc == 2 and one_line(err, *words), "inspect %s: exit 2, one line naming %s (got %d: %s)"
               % (what, words, rc, err.strip()[-300:]))
    rc, _, _ = run(cli, "inspect", st, "--shard-rules", rules)
    expect(rc == 2, "--shard-rules without --world: a usage error (got %d)" % rc)
    zero = os.path.join(a.work, "equal_parts_0.json")
    with open(zero, "w") as f:
        json.dump({"rules": [{"pattern": "*.q_proj.weight", "split": "column", "equal_parts": 0}]}, f)
    rc, _, err = run(cli, "inspect", st, "--world", 2, "--shard-rules", zero)
    expect(rc == 2 and one_line(err, "invalid_argument", "\"equal_parts\" is 0"),
           "--shard-rules: equal_parts 0 is refused, not read as one part (got %d: %s)" % (rc, err.strip()[-300:]))

    gg = os.path.join(a.work, "llama.gguf")
    write_gguf(gg, GGUF)
    check_plan(cli, gg, 2, "gguf")
    rc, _, err = run(cli, "inspect", gg, "--world", 4)
    expect(rc == 2 and one_line(err, "unsupported", "blk.0.ffn_down.weight", "16 of 64 elements"),
           "gguf world 4: a row split inside a q4_0 block is refused with the sizes (got %d: %s)" % (rc, err.strip()))

    llm = os.path.join(a.work, "llm")
    gen = subprocess.run([sys.executable, os.path.join(a.gen, "make_llm_model.py"), llm, "--layers", "2", "--hidden",
                          "128", "--ffn", "256", "--vocab", "512"], capture_output=True, text=True)
    if gen.returncode != 0:
        print("note: the llm model was not generated (python3-onnx and numpy needed): %s" % gen.stderr.strip()[-200:])
    else:
        shards = check_plan(cli, os.path.join(llm, "llm.onnx"), 2, "llm onnx")
        if shards:
            by = {w["name"]: w for w in shards["weights"]}
            expect(by["layers.0.mlp.gate_proj.scales"]["split"] == "column"
                   and by["layers.0.mlp.down_proj.qweight"]["split"] == "row"
                   and by["lm_head.weight"]["split"] == "vocab" and not by["lm_head.weight"]["contiguous"],
                   "llm onnx: MatMulNBits scales follow B, down is row, the MatMul lm_head is strided")
    print("%d check(s) failed" % len(FAILURES) if FAILURES else "all shard CLI checks passed")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
