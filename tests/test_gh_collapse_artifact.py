"""The gh_collapse artifact's reading rules (conf/experiment/gh_collapse.yaml) on hand-built records."""

from __future__ import annotations

import pandas as pd
import pytest

from lipgnn.results.artifacts.guan_he import gh_collapse

EPOCHS, LAYERS, LOG_DEG = 40, 4, 1.5


def _record(arch: str, train: list[float], loss: list[float], *, energy_end: float = 1e-6, rank_end: float = 1.0,
            entropy_end: float = 0.999, grad_first_end: float = 1e-7, grad_first_before: float | None = None) -> dict:
    """A 4-layer record measured at epochs 0, 10, 20, 30, 40; the watched quantities change only at the end
    unless told (``grad_first_before``: the first block's gradient norm at epoch 30)."""
    snaps = [0, 10, 20, 30, 40]

    def layer_rows(first: float, last_init: float, last_end: float) -> list[list[float]]:
        return [[first, 1.0, 0.5, 0.1, last_init if e == 0 else last_end] for e in snaps]

    grads = [[None] * LAYERS] + [[grad_first_end if e == 40 else (grad_first_before or grad_first_end),
                                  0.1, 0.1, 1.0] for e in snaps[1:]]
    collapse = {"every": 10, "uniform_entropy": LOG_DEG, "epochs": snaps,
                "energy": layer_rows(2.0, 0.5, energy_end), "energy_norm": layer_rows(2.0, 0.5, energy_end),
                "rank": layer_rows(20.0, 12.0, rank_end),
                "entropy": [[LOG_DEG * 0.9] * 2 + [LOG_DEG * (0.95 if e == 0 else entropy_end)] * 2 for e in snaps],
                "nonlocal": [[0.1] * LAYERS for _ in snaps], "grad": grads,
                "grad_att": grads, "grad_encoder": [None, 1, 1, 1, 1], "grad_decoder": [None, 1, 1, 1, 1]}
    return {"experiment": "gh_collapse", "status": "completed", "dataset": "cora", "depth": LAYERS, "seed": 0,
            "config": {"model": {"name": "san", "layer_norm": "pre" if arch == "pre" else "post",
                                 "nonlocal": arch == "nonlocal"},
                       "train": {"epochs": EPOCHS, "lr": 1e-4, "warmup_epochs": 4}, "budget": {"name": "cpu"}},
            "history": {"epoch": list(range(1, EPOCHS + 1)), "train": train, "loss": loss,
                        "val": train},
            "diagnostics": {"collapse": collapse}}


FLAT = [0.2] * 9 + [0.309] * 31        # at the majority class from epoch 10
PRIOR = [2.5] * 9 + [1.823] * 31


def test_a_flat_run_is_collapsed_from_the_epoch_it_stays_and_each_explanation_is_read() -> None:
    (r,) = gh_collapse.readings(pd.DataFrame([_record("post", FLAT, PRIOR)]))
    assert r.collapsed and r.flat_from == 10 and r.train == pytest.approx(0.309)
    assert r.explanations == {"feature collapse": True, "rank collapse": True, "uniform attention": True,
                              "vanishing gradient": True}
    assert r.energy_ratio == pytest.approx(1e-6 / 2.0) and r.init_energy_ratio == pytest.approx(0.25)
    assert r.peak_energy_ratio == pytest.approx(0.25)  # the largest over the snapshots: at initialisation
    assert r.entropy_ratio == pytest.approx(0.999) and r.init_entropy_ratio == pytest.approx(0.95)
    assert r.still_moving == []
    text = gh_collapse.report(pd.DataFrame([_record("post", FLAT, PRIOR)]))["gh_collapse-reading"]
    assert "**Post-LN SAN** collapsed" in text and "from epoch 10 to 40" in text
    assert "feature collapse; rank collapse; uniform attention; vanishing gradient" in text
    assert "fixed point" in text


def test_the_explanations_that_fail_their_thresholds_are_named_as_not_holding() -> None:
    record = _record("nonlocal", FLAT, PRIOR, energy_end=0.1, rank_end=5.0, entropy_end=0.9, grad_first_end=0.5)
    (r,) = gh_collapse.readings(pd.DataFrame([record]))
    assert not any(r.explanations.values())
    assert "none of the pre-registered explanations (not: feature collapse, rank collapse, uniform attention, " \
           "vanishing gradient)" in gh_collapse._sentence(r)


def test_a_quantity_still_moving_over_the_last_quarter_says_a_longer_budget_could_change_it() -> None:
    loss = PRIOR[:29] + [1.9] + PRIOR[30:]  # the loss at epoch 30 is 4 % above the one at epoch 40
    (r,) = gh_collapse.readings(pd.DataFrame([_record("post", FLAT, loss, grad_first_before=2e-7)]))
    assert r.moving["train loss"] == pytest.approx((1.823 - 1.9) / 1.9)
    assert r.moving["first block's gradient norm"] == pytest.approx(-0.5)
    assert r.still_moving == ["train loss", "first block's gradient norm"]
    assert "a longer budget could change it" in gh_collapse._sentence(r)


def test_a_run_whose_accuracy_moves_in_its_last_half_is_not_collapsed() -> None:
    rising = [0.1 + 0.02 * e for e in range(EPOCHS)]
    frame = pd.DataFrame([_record("pre", rising, PRIOR), _record("post", FLAT, PRIOR)])
    pre, post = sorted(gh_collapse.readings(frame), key=lambda r: r.arch != "pre")
    assert not pre.collapsed and pre.flat_from is None and post.collapsed
    assert [r.arch for r in gh_collapse.readings(frame)] == ["post", "pre"]  # the collapsed variants first
    assert "**Pre-LN SAN** does not collapse" in gh_collapse.report(frame)["gh_collapse-reading"]


def _longer(record: dict, epochs: int, train: list[float]) -> dict:
    """A gh_depth record of the same model, seed and schedule, trained for ``epochs``."""
    config = {**record["config"], "train": {**record["config"]["train"], "epochs": epochs}}
    return {**record, "experiment": "gh_depth", "config": config, "diagnostics": {}, "git_commit": "abcdef123",
            "history": {"epoch": list(range(1, epochs + 1)), "train": train, "loss": record["history"]["loss"]
                        + [1.823] * (epochs - EPOCHS), "val": train}}


def test_the_curves_are_compared_with_the_longer_gh_depth_run_of_the_same_config() -> None:
    ours = _record("post", FLAT, PRIOR)
    same = gh_collapse.report(pd.DataFrame([ours, _longer(ours, 100, FLAT + [0.309] * 60)]))["gh_collapse-reading"]
    assert "the same run as the first 40 epochs of gh_depth's 100-epoch record (commit `abcdef1`)" in same
    assert "over its 100 epochs the train accuracy stays within 0.5 points of its last value, 30.9 %, from epoch 10 " \
           "on" in same
    drifted = FLAT[:14] + [0.31] + FLAT[15:] + [0.309] * 60
    text = gh_collapse.report(pd.DataFrame([ours, _longer(ours, 100, drifted)]))["gh_collapse-reading"]
    assert "not bit-identical to gh_depth's 100-epoch record (commit `abcdef1`) of the same config: the curves first " \
           "differ at epoch 15 (train accuracy at most 0.1 points apart over the first 40 epochs)" in text
    other_lr = _longer(ours, 100, FLAT + [0.309] * 60)
    other_lr["config"]["train"]["lr"] = 1e-3
    assert "no gh_depth record of the same model" in gh_collapse.report(pd.DataFrame([ours, other_lr]))[
        "gh_collapse-reading"]


def test_no_records_give_one_line_and_an_empty_figure() -> None:
    assert "No gh_collapse records yet" in gh_collapse.report(pd.DataFrame())["gh_collapse-reading"]


def test_the_figure_draws_three_heat_maps_and_the_curves_per_variant() -> None:
    frame = pd.DataFrame([_record("post", FLAT, PRIOR), _record("nonlocal", FLAT, PRIOR)])
    fig = gh_collapse.figure(frame)
    assert len([ax for ax in fig.axes if ax.images]) == 6
