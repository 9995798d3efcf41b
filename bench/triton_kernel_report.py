"""Compile the Triton attention kernels for an H100 (sm_90) without a GPU and report resources.

Triton ships ptxas and cuobjdump, so the full compile (Triton IR -> PTX -> cubin) runs on any
machine. This catches what the interpreter cannot (constructs the compiler rejects, shared
memory over the limit, register spills) and shows what the code generator made of the kernels:
registers, local memory (spills), shared memory, vectorized global loads and tensor-core (mma)
instructions. The specialization hints mirror a real launch on SmolLM2-135M: every pointer and
every stride is a multiple of 16 (head_dim 64, 3 kv heads, 9 query heads).

    python bench/triton_kernel_report.py [--check]

Must run WITHOUT TRITON_INTERPRET=1 (the kernels must be JIT functions, not interpreted ones).
--check exits 1 if a kernel fails to compile, uses local memory, or a bf16 kernel has no mma.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sglc_runtime.model.attention.triton_decode import _decode_reduce_kernel, _decode_split_kernel  # noqa: E402
from sglc_runtime.model.attention.triton_extend import _extend_kernel  # noqa: E402

TARGET = GPUTarget("cuda", 90, 32)
# NOTE: integer arguments that stay runtime values (not multiples of 16 in general).
_RUNTIME_INTS = {"num_splits"}


def _variants():
    """(kernel, arg types, constexprs) of every variant the backend launches for SmolLM2."""
    for dt, ieee in (("bf16", False), ("fp32", True)):
        decode = {"Q": dt, "K": dt, "V": dt, "Out": dt, "PartOut": "fp32", "PartLse": "fp32",
                  "kv_indices": "i64", "kv_starts": "i64", "seq_lens": "i64", "q_rows": "i64"}
        for direct in (True, False):
            yield _decode_split_kernel, decode, {"GROUP": 3, "BLOCK_G": 16, "HEAD_DIM": 64, "BLOCK_N": 64,
                                                 "DIRECT": direct, "IEEE": ieee}
        yield _decode_reduce_kernel, {"Out": dt, "PartOut": "fp32", "PartLse": "fp32", "q_rows": "i64"}, \
            {"HEAD_DIM": 64, "BLOCK_S": 16}
        extend = {"Q": dt, "K_new": dt, "V_new": dt, "K": dt, "V": dt, "Out": dt, "kv_indices": "i64",
                  "kv_start_ptr": "i64", "prefix_len_ptr": "i64", "q_start_ptr": "i64", "extend_len_ptr": "i64"}
        yield _extend_kernel, extend, {"GROUP": 3, "HEAD_DIM": 64, "BLOCK_M": 64, "BLOCK_N": 64, "IEEE": ieee}


def compile_variant(fn, pointers: dict[str, str], constexprs: dict):
    """Compile one variant for sm_90; returns triton's CompiledKernel."""
    signature, attrs = {}, {}
    for i, name in enumerate(fn.arg_names):
        if name in constexprs:
            signature[name] = "constexpr"
        elif name in pointers:
            signature[name] = "*" + pointers[name]
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif name == "qk_scale":
            signature[name] = "fp32"
        else:  # strides: multiples of 16 for the model's shapes
            signature[name] = "i32"
            if name not in _RUNTIME_INTS:
                attrs[(i,)] = [["tt.divisibility", 16]]
    return triton.compile(ASTSource(fn, signature, constexprs=constexprs, attrs=attrs), target=TARGET)


def resources(kernel) -> dict:
    """Registers, local memory, shared memory (cuobjdump) and instruction counts (PTX)."""
    ptx = kernel.asm["ptx"]
    info = {"shared_bytes": kernel.metadata.shared, "num_warps": kernel.metadata.num_warps,
            "mma": len(re.findall(r"\b(?:mma\.sync|wgmma\.mma_async)", ptx)),
            "vector_loads": len(re.findall(r"ld\.global(?:\.[a-z0-9]+)*\.v[248]", ptx)),
            "scalar_loads": len(re.findall(r"ld\.global(?:\.[a-z0-9]+)*\.(?:b|u|s|f)(?:16|32|64)\b", ptx))}
    cuobjdump = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(kernel.asm["cubin"])
        f.flush()
        out = subprocess.run([str(cuobjdump), "--dump-resource-usage", f.name], capture_output=True, text=True)
    for key, name in (("REG", "registers"), ("LOCAL", "local_bytes"), ("STACK", "stack_bytes")):
        m = re.search(rf"\b{key}:(\d+)", out.stdout)
        info[name] = int(m.group(1)) if m else None
    return info


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    if os.environ.get("TRITON_INTERPRET") == "1":
        print("unset TRITON_INTERPRET: the interpreter replaces the compiler", file=sys.stderr)
        return 2
    problems = []
    print("kernel | variant | regs | local B | shared B | mma | vector loads | scalar loads")
    for fn, ptrs, consts in _variants():
        label = f"{ptrs['Out']} " + " ".join(f"{k}={v}" for k, v in consts.items()
                                              if k in ("DIRECT", "BLOCK_N", "BLOCK_M", "BLOCK_S"))
        try:
            r = resources(compile_variant(fn, ptrs, consts))
        except Exception as err:  # noqa: BLE001 - reported, and --check fails
            problems.append(f"{fn.__name__} {label}: {err}")
            print(f"{fn.__name__} | {label} | COMPILE FAILED: {str(err).splitlines()[0]}")
            continue
        print(f"{fn.__name__} | {label} | {r['registers']} | {r['local_bytes']} | {r['shared_bytes']} | "
              f"{r['mma']} | {r['vector_loads']} | {r['scalar_loads']}")
        if r["local_bytes"]:
            problems.append(f"{fn.__name__} {label}: {r['local_bytes']} bytes of local memory (spills)")
        if ptrs["Out"] == "bf16" and fn is not _decode_reduce_kernel and not r["mma"]:
            problems.append(f"{fn.__name__} {label}: no tensor-core mma in the bf16 kernel")
    for p in problems:
        print("PROBLEM:", p)
    return 1 if args.check and problems else 0


if __name__ == "__main__":
    sys.exit(main())
