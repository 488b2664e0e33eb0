"""Speed/memory benchmark of deep attention stacks: ``python -m lipgnn.bench`` (see :mod:`lipgnn.bench.runner`)."""

from lipgnn.bench.runner import SUMMARY_COLUMNS, BenchConfig, Measurement, format_report, run
from lipgnn.bench.variants import CKPT_VARIANT, VARIANTS, build_variant

__all__ = [
    "CKPT_VARIANT",
    "SUMMARY_COLUMNS",
    "VARIANTS",
    "BenchConfig",
    "Measurement",
    "build_variant",
    "format_report",
    "run",
]
