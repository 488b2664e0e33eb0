"""The package's layout: no module of ``lipgnn/`` over 600 lines.

A module past that size holds more than one job; split it by job (as :mod:`lipgnn.nn.fused` splits its compiled
loops into one ``*_kernels`` module per layer family) rather than raising the limit.
"""

from __future__ import annotations

from pathlib import Path

import lipgnn

PKG_ROOT = Path(lipgnn.__file__).resolve().parent
MAX_LINES = 600


def module_sizes(root: Path = PKG_ROOT) -> dict[str, int]:
    """Lines per Python module under ``root``, keyed by the path relative to its parent."""
    return {str(p.relative_to(root.parent)): len(p.read_text().splitlines()) for p in sorted(root.rglob("*.py"))}


def test_module_sizes_counts_lines(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "a.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (pkg / "sub" / "b.py").write_text("y = 2\n")
    assert module_sizes(pkg) == {"pkg/a.py": MAX_LINES + 1, "pkg/sub/b.py": 1}


def test_no_module_over_600_lines() -> None:
    sizes = module_sizes()
    assert len(sizes) > 100 and "lipgnn/nn/fused/kernels.py" in sizes
    over = {path: n for path, n in sizes.items() if n > MAX_LINES}
    assert not over, f"modules over {MAX_LINES} lines (split each by job): {over}"
