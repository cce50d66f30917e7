"""GPU kernel micro-probes, each in its own process (a device fault poisons the CUDA context).

Every probe checks the numbers against a float64 CPU reference, not only that the call returned:
operands are drawn from values each format holds exactly, and scales are powers of two, so the
only expected error is the bf16 rounding of the output. Wrong output without an error is a
failure of class `silent_miscompute`.

`python -m autotune.probe.programs.kernels <name>` prints one ProbeResult (JSON) as its last stdout line;
`python -m autotune.probe.programs.kernels --list` prints the names (JSON).
torch and triton are imported inside the probe functions only.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autotune.models import ProbeResult
from autotune.engines.signatures import GOLDEN_MISMATCH_MARKER, UNCLASSIFIED, classify
from autotune.probe.programs import emit

# bf16 keeps 8 significant bits: an exactly accumulated sum is off by at most 2^-8 relative.
_BF16_RTOL = 2.0**-7
_SEED = 1234


class _Unsupported(Exception):
    """The probe cannot run here (no GPU, no dtype in this torch, no triton)."""


def _feature(name: str) -> str:
    return f"kernel:{name}"


# ---------------------------------------------------------------- helpers (run inside the probe process)


def _cuda_torch() -> Any:
    try:
        import torch
    except ImportError as exc:
        raise _Unsupported(f"no CUDA GPU (torch not importable: {exc})") from exc
    if not torch.cuda.is_available():
        raise _Unsupported(f"no CUDA GPU (torch {torch.__version__}, CUDA {torch.version.cuda})")
    return torch


def _where(torch: Any) -> str:
    major, minor = torch.cuda.get_device_capability(0)
    return f"{torch.cuda.get_device_name(0)} sm_{major}{minor}, torch {torch.__version__}"


def _exact_grid(torch: Any, gen: Any, shape: tuple[int, ...], steps: int = 8) -> Any:
    """Values k/4 for |k| <= steps: exact in float8_e4m3fn, bf16 and fp32."""
    return torch.randint(-steps, steps + 1, shape, generator=gen).double() / 4


def _pow2(torch: Any, gen: Any, shape: tuple[int, ...]) -> Any:
    """Scales from {0.5, 1, 2, 4}: exact in every scale dtype."""
    return 2.0 ** torch.randint(-1, 3, shape, generator=gen).double()


def _compare(torch: Any, got: Any, ref: Any, what: str) -> str:
    """Raise a golden mismatch when `got` (GPU) is off the float64 reference beyond bf16 rounding."""
    got64 = got.double().cpu()
    if not torch.isfinite(got64).all():
        raise _Mismatch(f"{what}: output has NaN/Inf")
    err = (got64 - ref).abs()
    allowed = _BF16_RTOL * ref.abs() + 1e-6 * ref.abs().max().clamp(min=1.0)
    bad = int((err > allowed).sum())
    rel = float(err.max() / ref.abs().max().clamp(min=1e-12))
    if bad:
        raise _Mismatch(f"{what}: {bad} of {ref.numel()} outputs off the float64 reference (max rel err {rel:.3g})")
    return f"max rel err {rel:.2e} vs float64 CPU reference"


class _Mismatch(Exception):
    """The kernel ran and returned wrong numbers."""


def to_blocked(torch: Any, scales: Any) -> Any:
    """cuBLAS block-scaling layout: 128x4 tiles of the (rows, k-blocks) scale matrix, each tile
    stored as 32 rows x 16 (4 groups of 32 rows side by side), flattened. Works on the raw bytes,
    so any one-byte scale dtype (e4m3, e8m0) keeps its bits; padding is zero bytes."""
    raw = scales.view(torch.uint8)
    rows, cols = raw.shape
    pr, pc = -(-rows // 128) * 128, -(-cols // 4) * 4
    padded = torch.zeros((pr, pc), dtype=torch.uint8, device=raw.device)
    padded[:rows, :cols] = raw
    tiles = padded.view(pr // 128, 128, pc // 4, 4).permute(0, 2, 1, 3)
    blocked = tiles.reshape(-1, 4, 32, 4).transpose(1, 2).reshape(-1, 32, 16).flatten()
    return blocked.view(scales.dtype)


_E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def _fp4_operand(torch: Any, gen: Any, rows: int, k: int) -> tuple[Any, Any]:
    """Random e2m1 codes -> (packed uint8 rows x k/2, float64 values). Element 2i is the low nibble."""
    codes = torch.randint(0, 16, (rows, k), generator=gen, dtype=torch.uint8)
    table = torch.tensor(_E2M1_VALUES, dtype=torch.float64)
    values = table[(codes & 7).long()] * torch.where(codes >= 8, -1.0, 1.0).double()
    packed = codes[:, 0::2] | (codes[:, 1::2] << 4)
    return packed, values


# ---------------------------------------------------------------- the probes


def fp8_scaled_mm_tensorwise() -> ProbeResult:
    """torch._scaled_mm, float8_e4m3fn x float8_e4m3fn, one scale per tensor, bf16 out."""
    torch = _cuda_torch()
    gen = torch.Generator().manual_seed(_SEED)
    m, k, n = 64, 128, 96
    a, b = _exact_grid(torch, gen, (m, k)), _exact_grid(torch, gen, (n, k))
    sa, sb = 2.0, 0.5
    a8 = a.float().to(torch.float8_e4m3fn).cuda()
    b8 = b.float().to(torch.float8_e4m3fn).cuda()  # (n, k) row-major; .t() is the column-major operand
    scale_a = torch.tensor(sa, dtype=torch.float32).cuda()
    scale_b = torch.tensor(sb, dtype=torch.float32).cuda()
    out = torch._scaled_mm(a8, b8.t(), scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16)
    torch.cuda.synchronize()
    detail = _compare(torch, out, (a * sa) @ (b * sb).t(), "fp8 tensor-wise")
    return _works("fp8_scaled_mm_tensorwise", f"{m}x{k}x{n}, {detail}; {_where(torch)}")


def fp8_scaled_mm_rowwise() -> ProbeResult:
    """torch._scaled_mm with one scale per row of A (m,1) and per column of B (1,n), bf16 out."""
    torch = _cuda_torch()
    gen = torch.Generator().manual_seed(_SEED)
    m, k, n = 64, 128, 96
    a, b = _exact_grid(torch, gen, (m, k)), _exact_grid(torch, gen, (n, k))
    sa, sb = _pow2(torch, gen, (m, 1)), _pow2(torch, gen, (1, n))
    out = torch._scaled_mm(
        a.float().to(torch.float8_e4m3fn).cuda(),
        b.float().to(torch.float8_e4m3fn).cuda().t(),
        scale_a=sa.float().cuda(),
        scale_b=sb.float().cuda(),
        out_dtype=torch.bfloat16,
    )
    torch.cuda.synchronize()
    detail = _compare(torch, out, (a @ b.t()) * sa * sb, "fp8 row-wise")
    return _works("fp8_scaled_mm_rowwise", f"{m}x{k}x{n}, {detail}; {_where(torch)}")


def fp4_scaled_mm() -> ProbeResult:
    """NVFP4: float4_e2m1fn_x2 operands, float8_e4m3fn scales per 16 elements (swizzled), bf16 out."""
    torch = _cuda_torch()
    if not hasattr(torch, "float4_e2m1fn_x2"):
        raise _Unsupported(f"torch {torch.__version__} has no float4_e2m1fn_x2")
    gen = torch.Generator().manual_seed(_SEED)
    m, k, n, block = 128, 128, 128, 16
    a_packed, a = _fp4_operand(torch, gen, m, k)
    b_packed, b = _fp4_operand(torch, gen, n, k)
    sa, sb = _pow2(torch, gen, (m, k // block)), _pow2(torch, gen, (n, k // block))
    ref = (a * sa.repeat_interleave(block, dim=1)) @ (b * sb.repeat_interleave(block, dim=1)).t()
    a4 = a_packed.cuda().view(torch.float4_e2m1fn_x2)
    b4 = b_packed.cuda().view(torch.float4_e2m1fn_x2)
    scale_a = to_blocked(torch, sa.float().to(torch.float8_e4m3fn).cuda())
    scale_b = to_blocked(torch, sb.float().to(torch.float8_e4m3fn).cuda())
    out, api = _block_scaled_mm(torch, a4, b4, scale_a, scale_b, "BlockWise1x16")
    detail = _compare(torch, out, ref, "nvfp4")
    return _works("fp4_scaled_mm", f"{m}x{k}x{n} via {api}, {detail}; {_where(torch)}")


def mxfp8_scaled_mm() -> ProbeResult:
    """MXFP8: float8_e4m3fn operands, float8_e8m0fnu scales per 32 elements (swizzled), bf16 out."""
    torch = _cuda_torch()
    if not hasattr(torch, "float8_e8m0fnu"):
        raise _Unsupported(f"torch {torch.__version__} has no float8_e8m0fnu")
    gen = torch.Generator().manual_seed(_SEED)
    m, k, n, block = 128, 128, 128, 32
    a, b = _exact_grid(torch, gen, (m, k)), _exact_grid(torch, gen, (n, k))
    sa, sb = _pow2(torch, gen, (m, k // block)), _pow2(torch, gen, (n, k // block))
    ref = (a * sa.repeat_interleave(block, dim=1)) @ (b * sb.repeat_interleave(block, dim=1)).t()

    def e8m0(scales: Any) -> Any:  # biased exponent bytes, viewed as the scale dtype
        return (scales.log2().round() + 127).to(torch.uint8).cuda().view(torch.float8_e8m0fnu)

    out, api = _block_scaled_mm(
        torch,
        a.float().to(torch.float8_e4m3fn).cuda(),
        b.float().to(torch.float8_e4m3fn).cuda(),
        to_blocked(torch, e8m0(sa)),
        to_blocked(torch, e8m0(sb)),
        "BlockWise1x32",
    )
    detail = _compare(torch, out, ref, "mxfp8")
    return _works("mxfp8_scaled_mm", f"{m}x{k}x{n} via {api}, {detail}; {_where(torch)}")


def _block_scaled_mm(torch: Any, a: Any, b: Any, scale_a: Any, scale_b: Any, recipe: str) -> tuple[Any, str]:
    """torch._scaled_mm first; if it refuses, the explicit v2 API (torch.nn.functional.scaled_mm)."""
    try:
        out = torch._scaled_mm(a, b.t(), scale_a, scale_b, out_dtype=torch.bfloat16)
        torch.cuda.synchronize()
        return out, "torch._scaled_mm"
    except (RuntimeError, ValueError, TypeError) as first:
        functional = torch.nn.functional
        if not hasattr(functional, "scaled_mm"):
            raise
        try:
            out = functional.scaled_mm(
                a, b.t(),
                scale_a, getattr(functional.ScalingType, recipe),
                scale_b, getattr(functional.ScalingType, recipe),
                swizzle_a=functional.SwizzleType.SWIZZLE_32_4_4,
                swizzle_b=functional.SwizzleType.SWIZZLE_32_4_4,
                output_dtype=torch.bfloat16,
            )
            torch.cuda.synchronize()
        except Exception as second:
            raise RuntimeError(f"torch._scaled_mm: {_first_line(first)} / F.scaled_mm: {_first_line(second)}") from second
        return out, f"torch.nn.functional.scaled_mm (torch._scaled_mm refused: {_first_line(first)})"


_TRITON_KERNEL = '''
import triton
import triton.language as tl


@triton.jit
def axpy(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, alpha * x + y, mask=mask)
'''


def triton_compile_run() -> ProbeResult:
    """JIT-compile and run a trivial Triton kernel (catches ptxas that does not know the GPU)."""
    torch = _cuda_torch()
    if importlib.util.find_spec("triton") is None:
        raise _Unsupported("triton not installed")
    import triton

    # Triton reads a kernel's source from its file, so the kernel lives in a real module file.
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "autotune_triton_probe.py"
        path.write_text(_TRITON_KERNEL)
        spec = importlib.util.spec_from_file_location("autotune_triton_probe", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        n = 1000
        gen = torch.Generator().manual_seed(_SEED)
        x = torch.randint(-100, 100, (n,), generator=gen).float()
        y = torch.randint(-100, 100, (n,), generator=gen).float()
        out = torch.empty(n, device="cuda")
        module.axpy[(triton.cdiv(n, 256),)](x.cuda(), y.cuda(), out, n, 3.0, BLOCK=256)
        torch.cuda.synchronize()
    if not torch.equal(out.cpu(), 3.0 * x + y):
        raise _Mismatch("triton axpy: output differs from the exact CPU result")
    return _works("triton_compile_run", f"axpy over {n} floats exact; triton {triton.__version__}; {_where(torch)}")


def bf16_golden() -> ProbeResult:
    """A plain bf16 matmul on the GPU against a float64 CPU reference."""
    torch = _cuda_torch()
    gen = torch.Generator().manual_seed(_SEED)
    m, k, n = 256, 1024, 256
    a = torch.randn((m, k), generator=gen).bfloat16()
    b = torch.randn((k, n), generator=gen).bfloat16()
    out = (a.cuda() @ b.cuda()).double().cpu()
    torch.cuda.synchronize()
    ref = a.double() @ b.double()
    # random signs: the sum is ~sqrt(k) in size, so judge the error against the row scale
    scale = (a.double().abs() @ b.double().abs()).clamp(min=1e-12)
    rel = float(((out - ref).abs() / scale).max())
    if not torch.isfinite(out).all() or rel > 2.0**-6:
        raise _Mismatch(f"bf16 matmul {m}x{k}x{n}: max error {rel:.3g} of |A|@|B| (allowed {2.0**-6:.3g})")
    return _works("bf16_golden", f"{m}x{k}x{n}, max error {rel:.2e} of |A|@|B| vs float64 CPU; {_where(torch)}")


KERNEL_PROBES: dict[str, Callable[[], ProbeResult]] = {
    "fp8_scaled_mm_tensorwise": fp8_scaled_mm_tensorwise,
    "fp8_scaled_mm_rowwise": fp8_scaled_mm_rowwise,
    "fp4_scaled_mm": fp4_scaled_mm,
    "mxfp8_scaled_mm": mxfp8_scaled_mm,
    "triton_compile_run": triton_compile_run,
    "bf16_golden": bf16_golden,
}


def _works(name: str, evidence: str) -> ProbeResult:
    return ProbeResult(feature=_feature(name), status="works", evidence=evidence)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def run_one(name: str) -> ProbeResult:
    """Run one probe in THIS process, turning every outcome into a ProbeResult."""
    try:
        return KERNEL_PROBES[name]()
    except _Unsupported as exc:
        return ProbeResult(feature=_feature(name), status="unsupported", evidence=str(exc))
    except _Mismatch as exc:
        return ProbeResult(
            feature=_feature(name),
            status="fails",
            evidence=f"{GOLDEN_MISMATCH_MARKER}: {exc}",
            signature="silent_miscompute",
        )
    except Exception as exc:  # any failure of the kernel is data
        text = traceback.format_exc()
        info = classify(text)
        signature = info.failure_class if info else UNCLASSIFIED
        if signature == UNCLASSIFIED:
            evidence = _first_line(exc)
        else:
            evidence = "\n".join([info.message, *info.evidence])
        return ProbeResult(feature=_feature(name), status="fails", evidence=evidence, signature=signature)


def main(argv: list[str]) -> int:
    if argv == ["--list"]:  # the parent asks which probes exist: their names live here
        print(json.dumps(list(KERNEL_PROBES)))
        return 0
    if len(argv) != 1 or argv[0] not in KERNEL_PROBES:
        print(f"usage: python -m autotune.probe.programs.kernels {{{','.join(KERNEL_PROBES)}}}", file=sys.stderr)
        return 2
    emit(run_one(argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
