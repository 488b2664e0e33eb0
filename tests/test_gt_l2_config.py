"""GT's ``model.score`` / ``model.tie_qk`` keys: the builder wires them, validation rejects bad combinations
in one line, default values keep run ids unchanged, and ``lipgnn lipschitz`` exits 2 on a bad config."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from lipgnn.cli import main
from lipgnn.config import _validate_score
from lipgnn.errors import ConfigError
from lipgnn.models import build_model

SPEC = SimpleNamespace(input="dense", num_features=5, num_classes=3, vocab_sizes=(), edge_dim=None)


def _model(**kw):
    base = {"name": "gt", "hidden": 8, "heads": 2, "head_aggregation": "concat", "dropout": 0.0,
            "attn_dropout": 0.0, "residual": False, "impl": "pyg", "score": "dot", "tie_qk": False}
    return OmegaConf.create({**base, **kw})


def test_builder_wires_l2_scores_and_tied_weights() -> None:
    model = build_model(_model(score="l2", tie_qk=True), OmegaConf.create({"name": "none"}), SPEC, 3)
    convs = model.attention_layers()
    assert len(convs) == 3 and all(c.score == "l2" and c.lin_key is c.lin_query for c in convs)
    plain = build_model(_model(), OmegaConf.create({"name": "none"}), SPEC, 2)
    assert all(c.score == "dot" and c.lin_key is not c.lin_query for c in plain.attention_layers())


@pytest.mark.parametrize(("model", "norm", "message"), [
    (_model(score="l2", tie_qk=True), "lip", "dot-product"),
    (_model(name="gat", score="l2"), "none", "model=gt only"),
])
def test_validation_rejects_bad_score_combinations(model, norm: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _validate_score(model, OmegaConf.create({"name": norm}))
    with pytest.raises(ConfigError, match=message.split()[0]):
        build_model(model, OmegaConf.create({"name": norm}), SPEC, 2)


def test_an_unknown_score_is_refused_by_the_schema() -> None:
    with pytest.raises(ConfigError, match="model.score='cosine' is unknown; use one of: dot, l2"):
        build_model(_model(score="cosine"), OmegaConf.create({"name": "none"}), SPEC, 2)


@pytest.mark.parametrize("impl", ["pyg", "fused"])
def test_both_implementations_accept_l2_scores(impl: str) -> None:
    model = _model(score="l2", tie_qk=True, impl=impl)
    _validate_score(model, OmegaConf.create({"name": "none"}))
    convs = build_model(model, OmegaConf.create({"name": "none"}), SPEC, 2).attention_layers()
    assert all(c.score == "l2" and c.lin_key is c.lin_query for c in convs)
    assert all(type(c).__name__.startswith("Fused") == (impl == "fused") for c in convs)


def test_lipschitz_command_exits_2_on_a_bad_config(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lipschitz", "model=gcn", "norm=lip"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "norm=lip needs an attention model" in err[0]


def test_default_score_keys_leave_run_ids_unchanged() -> None:
    from lipgnn.config import compose
    from lipgnn.identity import run_id

    cfg = compose(["model=gt", "depth=2"])
    with_keys = run_id(cfg)
    plain = OmegaConf.to_container(cfg, resolve=True)
    del plain["model"]["score"]
    del plain["model"]["tie_qk"]
    assert run_id(plain) == with_keys  # records made before the keys existed keep their ids
    assert run_id(compose(["variant=gt_l2", "depth=2"])) != with_keys


def test_checkpoint_weights_load_and_mismatches_are_config_errors(tmp_path) -> None:
    import torch

    from lipgnn.lipschitz.cli import _load_weights

    trained = build_model(_model(score="l2", tie_qk=True), OmegaConf.create({"name": "none"}), SPEC, 2)
    path = tmp_path / "checkpoint.pt"
    torch.save({"model": trained.state_dict(), "epoch": 3}, path)  # the trainer's checkpoint layout
    fresh = build_model(_model(score="l2", tie_qk=True), OmegaConf.create({"name": "none"}), SPEC, 2)
    _load_weights(fresh, str(path))
    assert all(torch.equal(a, b) for a, b in zip(fresh.state_dict().values(), trained.state_dict().values(),
                                                   strict=True))
    other = build_model(_model(hidden=4), OmegaConf.create({"name": "none"}), SPEC, 2)
    with pytest.raises(ConfigError, match="does not fit"):
        _load_weights(other, str(path))
    with pytest.raises(ConfigError, match="no such file"):
        _load_weights(other, str(tmp_path / "missing.pt"))
