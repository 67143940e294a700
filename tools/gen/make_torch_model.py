#!/usr/bin/python3
"""make_torch_model.py OUTDIR --variant V: a small decoder exported by torch.onnx.export.

Every other ONNX test model is written by onnx.helper; engines meet models
written by PyTorch's exporter. This builds a small but real decoder in
torch (token embedding; layers of q/k/v/o nn.Linear, with and without bias;
a gate/up/down MLP; LayerNorm and RMSNorm; a final LayerNorm; an lm_head
whose weight IS the embedding's parameter) and exports it with
torch.onnx.export, as it comes: no graph surgery afterwards.

Writes OUTDIR/torch_<V>.onnx (and torch_<V>.data for the external variant)
and OUTDIR/torch_<V>.npz: every parameter of the module tree as torch holds
it (its state_dict, which lists the tied lm_head.weight beside
embed_tokens.weight), the reference the tests compare with.

Variants (what torch 1.13 emits for each, as observed):
  matmul    the default export (input ids [1, T], constant folding on):
            each Linear is MatMul(x, B) with B a folded initializer
            "onnx::MatMul_<n>" holding W.T ([in, out]), and Add for a bias.
            The tied lm_head gets its own folded copy embed.weight.T, so
            the tie is lost in the file. Identical initializers (LayerNorm
            weights of ones) are deduplicated into one.
  gemm      input ids [T] (2-D activations): a Linear with a bias is
            Gemm(transB=1) reading the parameter itself ([out, in]); one
            without is MatMul on a folded W.T. The lm_head has a bias here,
            so the tied head is a Gemm reading embed.weight, the initializer
            the embedding's Gather reads: one source, two consumers.
  fp16      the matmul model in half precision (model.half()), exported
            from torch.jit.script (tracing would run it, and CPU torch 1.13
            has no half matmul). Weights float16.
  external  the matmul model, loaded and saved again with
            onnx.save_model(save_as_external_data=True): every tensor in
            one data file torch_external.data beside the model.
  bf16      the matmul model in bfloat16 (traced: CPU torch has bf16 ops).
  nofold    the matmul model exported with do_constant_folding=False:
            each Linear is MatMul(x, Transpose(W)) on the parameter itself.
  functions the matmul model exported with export_modules_as_functions
            (opset 15): each Attention and MLP is an ONNX model-local
            function, its MatMuls inside the FunctionProto, the folded
            weights passed to the call as inputs.

In every variant the second use of a shared module's bias-free Linear reads
its folded weight through an Identity node: torch's initializer
deduplication replaces the second folded copy by Identity(first).

Only Debian's python3-torch (1.13), python3-onnx and numpy are used; nothing
downloads. Weights come from a fixed seed, so a run is reproducible.
"""

import argparse
import os
import sys

import numpy as np
import onnx
import torch
from torch import nn

VARIANTS = ("matmul", "gemm", "fp16", "external", "bf16", "nofold", "functions")
VOCAB, HIDDEN, FFN, LAYERS, TOKENS = 256, 64, 128, 4, 8


class RMSNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d) + 0.1 * torch.randn(d))
        self.eps = 1e-6

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Attention(nn.Module):
    def __init__(self, h, bias):
        super().__init__()
        self.q_proj = nn.Linear(h, h, bias=bias)
        self.k_proj = nn.Linear(h, h, bias=bias)
        self.v_proj = nn.Linear(h, h, bias=bias)
        self.o_proj = nn.Linear(h, h, bias=False)
        self.scale = 1.0 / float(h) ** 0.5

    def forward(self, x):
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        a = torch.softmax(torch.matmul(q, k.transpose(-1, -2)) * self.scale, dim=-1)
        return self.o_proj(torch.matmul(a, v))


class MLP(nn.Module):
    def __init__(self, h, f, bias):
        super().__init__()
        self.gate_proj = nn.Linear(h, f, bias=bias)
        self.up_proj = nn.Linear(h, f, bias=False)
        self.down_proj = nn.Linear(f, h, bias=bias)

    def forward(self, x):
        return self.down_proj(torch.nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, h, f, i):
        super().__init__()
        # Even layers: LayerNorm and biased q/k/v, gate and down; odd: RMSNorm, no biases.
        norm = nn.LayerNorm if i % 2 == 0 else RMSNorm
        self.input_layernorm = norm(h)
        self.self_attn = Attention(h, bias=i % 2 == 0)
        self.post_attention_layernorm = norm(h)
        self.mlp = MLP(h, f, bias=i % 2 == 0)

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class Decoder(nn.Module):
    def __init__(self, head_bias):
        super().__init__()
        self.embed_tokens = nn.Embedding(VOCAB, HIDDEN)
        self.layers = nn.ModuleList([Layer(HIDDEN, FFN, i) for i in range(LAYERS)])
        self.norm = nn.LayerNorm(HIDDEN)
        self.lm_head = nn.Linear(HIDDEN, VOCAB, bias=head_bias)
        self.lm_head.weight = self.embed_tokens.weight  # tied: one Parameter
        # Modules shared across layers (as ALBERT-style models share them):
        # a biased Linear (Gemm on the parameter in the gemm variant) and a
        # bias-free one (MatMul on a folded copy).
        self.layers[2].self_attn.q_proj = self.layers[0].self_attn.q_proj
        self.layers[3].mlp.up_proj = self.layers[1].mlp.up_proj

    def forward(self, ids):
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(self.norm(x))


def build(variant):
    torch.manual_seed(1234)
    model = Decoder(head_bias=variant == "gemm").eval()
    with torch.no_grad():
        for p in model.parameters():  # norms away from their 1/0 defaults, so every weight is distinct
            if p.dim() == 1:
                p.add_(0.05 * torch.randn_like(p))
    if variant == "fp16":
        model = model.half()
    elif variant == "bf16":
        model = model.to(torch.bfloat16)
    return model


def export(variant, outdir):
    model = build(variant)
    stem = os.path.join(outdir, "torch_" + variant)
    ids = torch.arange(TOKENS, dtype=torch.int64) * 7 % VOCAB
    if variant != "gemm":
        ids = ids.unsqueeze(0)
    kwargs = dict(input_names=["input_ids"], output_names=["logits"], opset_version=14,
                  do_constant_folding=variant != "nofold")
    if variant == "functions":
        kwargs.update(opset_version=15, export_modules_as_functions={Attention, MLP})
    onnx_path = stem + ".onnx"
    with torch.no_grad():
        if variant == "fp16":
            # A scripted module is exported from its graph, not by running it;
            # torch runs it only for the outputs' shape and type, which CPU
            # torch 1.13 cannot do in half (no half matmul or LayerNorm on
            # CPU), so that one step is given its answer.
            from torch.onnx import utils as onnx_utils
            logits = torch.zeros(1, TOKENS, VOCAB, dtype=torch.float16)
            saved = onnx_utils._get_example_outputs
            onnx_utils._get_example_outputs = lambda m, a: (logits,)
            try:
                torch.onnx.export(torch.jit.script(model), (ids,), onnx_path, **kwargs)
            finally:
                onnx_utils._get_example_outputs = saved
        else:
            torch.onnx.export(model, (ids,), onnx_path, **kwargs)
    if variant == "external":
        proto = onnx.load(onnx_path)
        data = stem + ".data"
        if os.path.exists(data):
            os.remove(data)  # onnx appends to a data file that is already there
        onnx.save_model(proto, onnx_path, save_as_external_data=True, all_tensors_to_one_file=True,
                        location=os.path.basename(data), size_threshold=0)
    params = {}
    for name, t in model.state_dict().items():  # tied names both listed
        # bfloat16 has no numpy type: keep its bits.
        params[name] = t.view(torch.int16).numpy().view(np.uint16) if t.dtype == torch.bfloat16 else t.numpy()
    np.savez(stem + ".npz", **params)
    return onnx_path


def main(argv):
    ap = argparse.ArgumentParser(prog=os.path.basename(argv[0]), description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir", help="the folder to write into (made if missing)")
    ap.add_argument("--variant", choices=VARIANTS, action="append",
                    help="which export (repeatable; default: all)")
    args = ap.parse_args(argv[1:])
    os.makedirs(args.outdir, exist_ok=True)
    for v in args.variant or VARIANTS:
        print(export(v, os.path.abspath(args.outdir)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
