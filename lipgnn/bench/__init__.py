"""Speed/memory benchmark of deep attention stacks: ``python -m lipgnn.bench`` (see :mod:`lipgnn.bench.runner`)."""

from lipgnn.bench.runner import (
    CKPT_VARIANT,
    SUMMARY_COLUMNS,
    VARIANTS,
    BenchConfig,
    Measurement,
    build_variant,
    format_report,
    run,
)

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
