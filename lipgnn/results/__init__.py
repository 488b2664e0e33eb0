"""The analysis: the selection protocol, grids, verdicts, and the artifact registry with its engine and report.

It reads run records through :mod:`lipgnn.store` and never runs a job. The engine (``engine``, ``report``), the
artifacts (``artifacts/<paper>/<name>.py``) and the plotting helpers are not imported here (matplotlib is slow to
import).
"""
