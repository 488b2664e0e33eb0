"""Capturing the logits that enter an attention layer's softmax, for :meth:`attention_scores`.

The logits exist only inside a layer's message computation, between the score (with LipschitzNorm's
denominator applied) and PyG's ``softmax``; the layers keep them for exactly one forward pass when asked,
so a caller inspecting them (the tests hold them to hand-computed values) reads what training uses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import Tensor


class ScoreCapture:
    """Mixin for attention convs. The layer passes its softmax input through
    :meth:`_keep`, which stores it while :meth:`_capture_scores` runs one forward pass."""

    _keep_scores: bool = False
    _scores: Tensor | None = None

    def _keep(self, scores: Tensor) -> None:
        if self._keep_scores:
            self._scores = scores

    def _capture_scores(self, forward: Callable[[], Any]) -> tuple[Tensor, Tensor]:
        """Run ``forward`` (a call with ``return_attention_weights=True``); returns the edge index it used and
        the scores :meth:`_keep` saw."""
        self._keep_scores = True
        try:
            _, (edge_index_used, _) = forward()
            scores = self._scores
        finally:
            self._keep_scores = False
            self._scores = None
        if scores is None:
            raise RuntimeError(f"{type(self).__name__}'s forward did not reach its softmax")
        return edge_index_used, scores


__all__ = ["ScoreCapture"]
