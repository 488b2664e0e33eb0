"""Artifacts of LipschitzNorm (Dasoulas, Scaman & Virmaux, ICML 2021): Tables 1–3, Figs. 2–6, the GT protocol check."""

PAPER = "lipschitznorm"
