"""The numeric environment of a run: which instruction set each numeric library dispatches to, and the portable mode
that pins them all to one level.

The same seed, config, code and thread count can give other numbers on another CPU, because six libraries pick
their code path from the host's instruction set at run time: ATen's vectorised kernels, MKL's BLAS (the
projections), oneDNN, numpy's SIMD loops, OpenBLAS (numpy's and scipy's BLAS) and numba, which compiles the fused
kernels for the host CPU (with ``fastmath`` reassociation, so a wider vector sums in another order). A deep network
amplifies those last-bit differences into other accuracies.

``numerics=portable`` (the config key; :data:`ENV` ``=portable`` for a process and the workers it starts) pins each
of them to x86-64-v3 (AVX2 + FMA, every x86-64 server and desktop CPU since about 2015) through the variables of
:data:`PORTABLE`. MKL is the exception: on a CPU that is not Intel's it accepts no ISA branch but ``COMPATIBLE``
(an ``AVX2`` request is silently ``AUTO`` there), so the portable mode asks MKL for ``COMPATIBLE``, the one branch
that gives the same results on every x86-64 CPU; it is what the portable mode costs (on the bench's 15-layer GAT-Lip
step the other pins cost nothing measurable). The libraries read these variables once, when they load, so the
mode is chosen at process start: :func:`start` (called by ``train.py`` and ``lipgnn``) sets them and restarts the
process when they were not set yet; the run layer refuses a job whose ``numerics`` is not the mode in effect
(:func:`check`).

Every record carries :func:`environment`: the CPU, each library's level as read back from the library (not as
requested), and the threads actually used; ``lipgnn verify`` compares them.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

from lipgnn.errors import ConfigError

MODES: tuple[str, ...] = ("native", "portable")
#: the environment variable that selects the mode of a process and of the workers it starts
ENV = "LIPGNN_NUMERICS"
#: x86-64-v3 as LLVM names its features: what numba may use in portable mode (the CPU name alone keeps the host's)
X86_64_V3 = ("+64bit,+cmov,+cx8,+cx16,+fxsr,+mmx,+sse,+sse2,+sse3,+ssse3,+sse4.1,+sse4.2,+popcnt,+sahf,+avx,+avx2,"
             "+fma,+f16c,+bmi,+bmi2,+lzcnt,+movbe,+xsave")
#: each library's dispatch pinned to x86-64-v3 (MKL: COMPATIBLE, see the module docstring)
PORTABLE: dict[str, str] = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "MKL_CBWR": "COMPATIBLE",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "NUMBA_CPU_NAME": "haswell",
    "NUMBA_CPU_FEATURES": X86_64_V3,
    "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR",
    "OPENBLAS_CORETYPE": "Haswell",
}
#: MKL's conditional-numerical-reproducibility branches (mkl_cbwr.h), as mkl_cbwr_get returns them
_MKL_BRANCHES = {0: "OFF", 1: "unpinned (CNR off)", 2: "AUTO", 3: "COMPATIBLE", 4: "SSE2", 6: "SSSE3", 7: "SSE4_1",
                 8: "SSE4_2", 9: "AVX", 10: "AVX2", 11: "AVX512_MIC", 12: "AVX512", 13: "AVX512_MIC_E1",
                 14: "AVX512_E1"}
#: the CPU flags that decide a numeric code path
_SIMD_FLAG = re.compile(r"^(sse\d?|ssse3|sse4_\d|sse4a|avx.*|fma\d?|f16c|amx.*|bmi\d|vnni.*)$")

__all__ = ["ENV", "MODES", "PORTABLE", "active_mode", "check", "cpu", "environment", "levels", "start"]


def requested(argv: list[str]) -> str:
    """The mode a command line asks for (``numerics=<mode>``), else :data:`ENV`'s, else ``native``."""
    for arg in argv:
        key, _, value = arg.lstrip("+~").partition("=")
        if key == "numerics" and value:
            return value
    return os.environ.get(ENV) or "native"


def start(argv: list[str]) -> None:
    """At process start: for ``numerics=portable`` (on the command line or in :data:`ENV`), set the pins and
    :data:`ENV` and, if a pin was missing, restart this process with them (the libraries read them when they
    load). Workers started later (joblib, submitit) inherit them."""
    if requested(argv) != "portable":
        return
    os.environ[ENV] = "portable"
    if all(os.environ.get(key) == value for key, value in PORTABLE.items()):
        return
    os.environ.update(PORTABLE)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])


def cpu() -> dict[str, Any]:
    """The CPU's model name and its SIMD flags (``/proc/cpuinfo``; elsewhere :func:`platform.processor`)."""
    import platform

    model, flags = "", []
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            name, _, value = line.partition(":")
            if name.strip() == "model name" and not model:
                model = value.strip()
            elif name.strip() == "flags" and not flags:
                flags = sorted(f for f in value.split() if _SIMD_FLAG.match(f))
            if model and flags:
                break
    except OSError:
        pass
    return {"model": model or platform.processor() or "unknown", "machine": platform.machine(), "simd_flags": flags}


def _mkl_branch() -> str:
    """MKL's branch as MKL reports it (``mkl_cbwr_get``, exported by torch's CPU library), or why it cannot."""
    import ctypes

    import torch

    if not torch.backends.mkl.is_available():
        return "absent"
    library = Path(torch.__file__).parent / "lib" / ("libtorch_cpu.so" if sys.platform.startswith("linux") else "")
    try:
        lib = ctypes.CDLL(str(library))
        branch = int(lib.mkl_serv_cbwr_get(1))  # MKL_CBWR_BRANCH
    except (OSError, AttributeError):
        return "not readable (requested: " + os.environ.get("MKL_CBWR", "AUTO") + ")"
    return _MKL_BRANCHES.get(branch, str(branch))


def _numpy_level() -> str:
    """numpy's highest dispatch target enabled on this CPU (``NPY_DISABLE_CPU_FEATURES`` applied)."""
    try:
        from numpy._core._multiarray_umath import __cpu_baseline__, __cpu_dispatch__, __cpu_features__
    except ImportError:  # numpy < 2
        from numpy.core._multiarray_umath import __cpu_baseline__, __cpu_dispatch__, __cpu_features__
    enabled = [name for name in __cpu_dispatch__ if __cpu_features__.get(name)]
    return (enabled or list(__cpu_baseline__) or ["none"])[-1]


def _numba_target() -> str:
    """The CPU numba compiles for: its config where numba is loaded, else what it will read from the environment."""
    if "numba" in sys.modules:
        from numba.core import config

        name, features = config.CPU_NAME, config.CPU_FEATURES
    else:
        name, features = os.environ.get("NUMBA_CPU_NAME"), os.environ.get("NUMBA_CPU_FEATURES")
    if name is None:
        try:
            import llvmlite.binding as llvm

            name = llvm.get_host_cpu_name()
        except ImportError:
            return "absent"
        return f"{name} (host features)"
    described = "x86-64-v3 features" if features == X86_64_V3 else "host features" if not features else features
    return f"{name} ({described})"


def _blas_pools() -> list[dict[str, Any]]:
    """OpenBLAS/MKL/OpenMP pools loaded in this process (threadpoolctl): architecture and threads."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return []
    keys = ("internal_api", "prefix", "version", "architecture", "num_threads")
    return [{key: pool.get(key) for key in keys if pool.get(key) is not None} for pool in threadpool_info()]


def levels() -> dict[str, str]:
    """Each library's instruction-set level in this process, read back from the library where it can be."""
    import torch

    pools = _blas_pools()
    openblas = sorted({str(p.get("architecture")) for p in pools if p.get("internal_api") == "openblas"})
    return {
        "aten": torch.backends.cpu.get_cpu_capability(),
        "mkl": _mkl_branch(),
        # oneDNN has no query of its ISA in torch's build; the suite's float32 training calls MKL, not oneDNN
        "onednn": f"requested {os.environ.get('ONEDNN_MAX_CPU_ISA', 'ALL')} (not readable)",
        "numpy": _numpy_level(),
        "openblas": ", ".join(openblas) if openblas else "not loaded" if pools else "threadpoolctl absent",
        "numba": _numba_target(),
    }


def active_mode() -> str:
    """``portable`` when every pin of :data:`PORTABLE` is set and the libraries read back its levels, ``native``
    when none of this is so; a ConfigError when the pins are set but did not take (set after the libraries loaded)."""
    if any(os.environ.get(key) != value for key, value in PORTABLE.items()):
        return "native"
    got = levels()
    wrong = {name: got[name] for name, ok in (
        ("aten", got["aten"] in ("AVX2", "DEFAULT")), ("mkl", got["mkl"] in ("COMPATIBLE", "absent")),
        ("numpy", got["numpy"] in ("X86_V3", "X86_V2", "AVX2")),
        ("numba", got["numba"].startswith(f"{PORTABLE['NUMBA_CPU_NAME']} (x86-64-v3") or got["numba"] == "absent"),
    ) if not ok}
    if wrong:
        raise ConfigError(f"the portable pins are set but {', '.join(f'{k} runs at {v}' for k, v in wrong.items())}: "
                          f"they were set after the library loaded; start the process with {ENV}=portable "
                          "(train.py and lipgnn do this for numerics=portable)")
    return "portable"


def check(mode: str) -> None:
    """A job's ``numerics`` must be the mode this process runs (one-line ConfigError otherwise)."""
    active = active_mode()
    if mode != active:
        raise ConfigError(f"numerics={mode}, but this process runs {active} numerics, fixed when it started: pass "
                          f"numerics={mode} on train.py's command line, or export {ENV}={mode} before Python starts")


def environment(threads: int) -> dict[str, Any]:
    """What a record stores of its numeric environment: the mode, the CPU, each library's level, the threads used."""
    import torch

    pools = _blas_pools()
    return {"mode": active_mode(), "cpu": cpu(), "levels": levels(),
            "threads": {"torch": int(threads), "torch_interop": torch.get_num_interop_threads(),
                        **{str(p.get("internal_api")): p.get("num_threads") for p in pools}},
            "pins": {key: os.environ[key] for key in PORTABLE if key in os.environ}}


def describe(env: dict[str, Any]) -> str:
    """One line of :func:`environment`'s output, for reports."""
    lv = env.get("levels", {})
    return (f"{env.get('mode')} numerics on {env.get('cpu', {}).get('model')}: ATen {lv.get('aten')}, MKL "
            f"{lv.get('mkl')}, numpy {lv.get('numpy')}, OpenBLAS {lv.get('openblas')}, numba {lv.get('numba')}; "
            f"{env.get('threads', {}).get('torch')} thread(s)")
