"""Which arithmetic a run computes in: bfloat16 autocast where the hardware runs it natively,
float32 everywhere else (the ``auto`` precision, the default of run configs and of the demo).

A run's ``teacher_train.bf16`` / ``student_train.bf16`` take ``true``, ``false`` or ``"auto"``.
``auto`` is resolved once, in the process that reads the config (the driver of a sweep), by
`native_bf16`; the config each worker receives, and every run key and run id, hold the resolved
``true`` / ``false``. So a config written ``bf16: false`` and an ``auto`` that resolves to
float32 give the same runs.

What ``auto`` decides, by device:

- CPU, x86: bfloat16 when the CPU has ``avx512_bf16`` or AMX tiles (Intel Cooper Lake, Sapphire
  Rapids and later; AMD Zen 4 and later) AND PyTorch / oneDNN are allowed to use them (see the
  overrides below); float32 otherwise (AVX2-only CPUs: most laptops, Zen 2/3, Intel client CPUs
  since 2021). Without native support, PyTorch emulates bfloat16 through float32 conversions:
  a demo teacher measured more than 4.5x slower than in float32 on an AVX2 Zen 3.
- CPU, ARM (aarch64: Graviton, Ampere, Apple silicon under Linux or macOS): float32. Some of
  these CPUs have bfloat16 dot-product instructions, but whether PyTorch's CPU autocast reaches
  them depends on the build (oneDNN with the Arm Compute Library); it was not measured here, so
  ``auto`` does not bet on it (force ``bf16: true`` / ``--bf16`` to try).
- Apple GPU (``device: mps``): float32 (bfloat16 on MPS needs macOS 14 and an M2 or later, and
  autocast support there is partial).
- CUDA: bfloat16 when ``torch.cuda.is_bf16_supported()`` (Ampere and later), else float32.

Overrides, for tests and benchmarks on any machine:

- ``ANCHORVIZ_PRECISION=fp32|bf16|auto``: what ``auto`` resolves to (``auto``, the default, asks
  the hardware). An explicit ``true`` / ``false`` in a config is never overridden.
- ``ATEN_CPU_CAPABILITY`` below ``avx512`` (e.g. ``avx2``) or ``ONEDNN_MAX_CPU_ISA`` below
  ``AVX512_CORE_BF16`` (e.g. ``AVX2``): PyTorch / oneDNN will not use the bfloat16 instructions,
  so the CPU counts as having none. These two reproduce the AVX2 class of CPU on a newer one
  (bench/bench_precision.py checks that they really make bfloat16 matmuls slow).
"""

from __future__ import annotations

# a leaf, as the run config that uses it (no anchorviz import: tests/test_import_plan.py); its
# errors are ValueErrors that the config turns into ConfigErrors naming the setting
import functools
import logging
import os
import platform

logger = logging.getLogger(__name__)

__all__ = ["ENV", "PRECISIONS", "EMULATED_COST", "describe", "native_bf16", "resolve_bf16"]

ENV = "ANCHORVIZ_PRECISION"
PRECISIONS = ("auto", "fp32", "bf16")
#: how much slower a demo teacher ran in emulated bfloat16 than in float32 (an AVX2 Zen 3)
EMULATED_COST = 4.5

# oneDNN ISA names at or above which bfloat16 dot products are used
_ONEDNN_BF16 = ("AVX512_CORE_BF16", "AVX512_CORE_FP16", "AVX512_CORE_AMX", "AVX512_CORE_AMX_FP16",
                "AVX10_1_512", "AVX10_1_512_AMX", "AVX10_1_512_AMX_FP16", "ALL")


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _cpu_native() -> tuple[bool, str]:
    machine = platform.machine().lower()
    if machine in ("arm64", "aarch64"):
        return False, f"this CPU is ARM ({machine}), where auto takes float32"
    hw = None
    try:
        import torch

        cpu = torch._C._cpu
        hw = bool(cpu._is_avx512_bf16_supported() or cpu._is_amx_tile_supported())
    except (ImportError, AttributeError):
        pass
    if hw is None:  # an older torch: the kernel's flags
        flags = _cpu_flags()
        hw = bool({"avx512_bf16", "amx_tile"} & flags)
    if not hw:
        return False, "this CPU has no native bfloat16 (neither avx512_bf16 nor AMX)"
    aten = os.environ.get("ATEN_CPU_CAPABILITY", "").strip().lower()
    if aten and aten not in ("avx512", "default_max"):
        return False, (f"this CPU has no native bfloat16 as PyTorch is told to use it "
                       f"(ATEN_CPU_CAPABILITY={aten})")
    isa = os.environ.get("ONEDNN_MAX_CPU_ISA", os.environ.get("DNNL_MAX_CPU_ISA", "")).strip()
    if isa and isa.upper() not in _ONEDNN_BF16:
        return False, (f"this CPU has no native bfloat16 as oneDNN is told to use it "
                       f"(ONEDNN_MAX_CPU_ISA={isa})")
    return True, "this CPU runs bfloat16 natively (avx512_bf16 / AMX)"


@functools.cache
def native_bf16(device: str = "cpu") -> tuple[bool, str]:
    """``(native, reason)``: whether ``device`` runs bfloat16 autocast natively, and why, in
    words. Asked once per process and device (cached)."""
    kind = str(device).split(":", 1)[0]
    if kind == "cuda":
        import torch

        ok = bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
        return ok, ("this GPU supports bfloat16" if ok else
                    "this GPU has no bfloat16 support (or CUDA is not available)")
    if kind == "mps":
        return False, "on Apple GPUs (mps) auto takes float32"
    return _cpu_native()


def _forced() -> str:
    value = os.environ.get(ENV, "auto").strip().lower() or "auto"
    if value not in PRECISIONS:
        raise ValueError(f"{ENV} must be one of {PRECISIONS}, got {value!r}")
    return value


def resolve_bf16(value: bool | str, device: str = "cpu") -> bool:
    """A config's ``bf16`` as a bool: ``true`` / ``false`` as given, ``"auto"`` by
    ``$ANCHORVIZ_PRECISION``, else by `native_bf16`."""
    if isinstance(value, bool):
        return value
    if str(value).strip().lower() != "auto":
        raise ValueError(f"bf16 must be true, false or 'auto', got {value!r}")
    forced = _forced()
    if forced != "auto":
        return forced == "bf16"
    return native_bf16(device)[0]


def describe(bf16: bool, device: str = "cpu") -> str:
    """One line for a console: the arithmetic chosen, and why; with what forcing bfloat16 costs
    on a device without native support."""
    native, why = native_bf16(device)
    forced = _forced()
    how = f" ({ENV}={forced})" if forced != "auto" else ""
    if bf16 and not native:
        return (f"arithmetic: bfloat16{how}, but {why}: it is emulated, about "
                f"{EMULATED_COST:g}x slower than float32 or more (measured on a demo teacher); "
                "--fp32 or bf16: false computes in float32")
    if bf16:
        return f"arithmetic: bfloat16 autocast{how}, {why}"
    if native and not how:
        return f"arithmetic: float32 (asked for), although {why}"
    return f"arithmetic: float32{how}, {why}"


_SAID: set[str] = set()


def warn_emulated(configs) -> list[str]:
    """In the driver, before any work: a WARNING (once per process and device) for each device
    that ``configs`` (``RunConfig``) run in bfloat16 without native support, saying what it
    costs. Returns the lines logged."""
    said = []
    for cfg in configs:
        for train in (cfg.teacher_train, cfg.student_train):
            if train.bf16 and not native_bf16(train.device)[0] and train.device not in _SAID:
                _SAID.add(train.device)
                line = describe(True, train.device)
                logger.warning("%s", line)
                said.append(line)
    return said
