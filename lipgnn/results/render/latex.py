"""LaTeX escaping for table text (plain ``tabular``, no extra packages)."""

from __future__ import annotations

_TEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
        "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
        "±": r"$\pm$", "–": "--", "—": "---", "≥": r"$\geq$", "×": r"$\times$"}


def tex(text: str) -> str:
    """``text`` with LaTeX's special characters escaped and a few Unicode signs written as LaTeX."""
    return "".join(_TEX.get(ch, ch) for ch in text)
