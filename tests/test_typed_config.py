"""Configs are consumed as the schema's dataclasses (lipgnn.config.typed): a composed config converts to them, a
mapping is completed from the schema and checked the same way, and no model, data or training module keeps a
default of its own for a key the schema has."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest

import lipgnn
from lipgnn.config import compose, typed
from lipgnn.config_schema import (
    SCHEMAS,
    GCNIIConfig,
    LipNormConfig,
    ModelConfig,
    NormConfig,
    PlanetoidConfig,
    RootConfig,
    TrainConfig,
    schema_defaults,
    schema_fields,
)
from lipgnn.errors import ConfigError

PKG = Path(lipgnn.__file__).resolve().parent
#: The consumers that read their configs through typed(): every module of these.
CONSUMERS = sorted([*(PKG / "models").rglob("*.py"), *(PKG / "data").rglob("*.py"), PKG / "train" / "trainer.py"])
SCHEMA_KEYS = {key for schema in SCHEMAS.values() for key in schema_fields(schema)}


def test_a_composed_config_becomes_the_schema_dataclasses() -> None:
    root = typed(compose(["model=gt", "norm=lip", "model.nonlocal=true", "train.epochs=7"]))
    assert isinstance(root, RootConfig) and isinstance(root.model, ModelConfig)
    assert isinstance(root.norm, LipNormConfig) and isinstance(root.dataset, PlanetoidConfig)
    assert isinstance(root.train, TrainConfig) and root.train.epochs == 7
    # The key `nonlocal` (a Python keyword) is the field nonlocal_, and nothing else.
    assert root.model.nonlocal_ is True and "nonlocal" not in vars(root.model)
    assert typed(compose(["model=gt"]).model).nonlocal_ is False
    # A node converts on its own too, and a dataclass passes through as it is.
    model = typed(compose(["model=gcnii"]).model)
    assert isinstance(model, GCNIIConfig) and typed(model) is model


def test_a_mapping_is_completed_from_the_schema_and_checked() -> None:
    model = typed({"name": "gcnii", "hidden": 8}, "model")
    expected = {spec.name: schema_defaults(GCNIIConfig)[key] for key, spec in schema_fields(GCNIIConfig).items()
                if key not in ("name", "hidden")}
    assert isinstance(model, GCNIIConfig) and model.hidden == 8
    assert {k: v for k, v in dataclasses.asdict(model).items() if k in expected} == expected
    assert typed({"name": "gat", "nonlocal": True}, "model").nonlocal_ is True
    # A key of another norm is dropped (one mapping may serve every norm); a key no norm has is refused.
    assert typed({"name": "none", "alpha": 2.0}, "norm") == NormConfig("none")
    with pytest.raises(ConfigError, match=r"^norm.variant is not a config key \(valid keys under norm: name, alpha, "
                                          r"formula, layernorm\)$"):
        typed({"name": "lip", "variant": "paper"}, "norm")
    with pytest.raises(ConfigError, match=r"^model.dropout=1.5 is out of range: it must be >= 0 and < 1$"):
        typed({"name": "gat", "dropout": 1.5}, "model")
    with pytest.raises(ConfigError, match=r"^dataset.kind='tudataset' is unknown; use one of: planetoid, pyg, trees, "
                                          r"ogb$"):
        typed({"kind": "tudataset", "name": "x"}, "dataset")
    with pytest.raises(ConfigError, match=r"^model.name is not set"):
        typed({"hidden": 8}, "model")


def _literal_defaults(path: Path) -> list[str]:
    """Reads of a schema key with a fallback of their own: ``x.get("key", d)``, ``getattr(x, "key", d)``,
    and the retired helpers ``cfg_get`` / ``_opt``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name in ("cfg_get", "_opt"):
            found.append(f"{path.name}:{node.lineno} {name}(")
            continue
        args = node.args[1:] if name == "getattr" else node.args if name == "get" else []
        if len(args) >= 2 and isinstance(args[0], ast.Constant) and args[0].value in SCHEMA_KEYS:
            found.append(f"{path.name}:{node.lineno} {name}({args[0].value!r}, ...)")
    return found


def test_no_consumer_keeps_a_default_for_a_schema_key() -> None:
    assert len(CONSUMERS) > 20 and SCHEMA_KEYS >= {"dropout", "impl", "lr", "download", "formula"}
    found = [hit for path in CONSUMERS for hit in _literal_defaults(path)]
    assert not found, f"consumers with their own default for a schema key: {found}"


def test_the_default_finder_sees_one(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("lr = cfg.get('lr', 0.005)\nd = getattr(cfg, 'dropout', 0.0)\nx = cfg_get(cfg, 'root')\n"
                     "y = payload.get('carry', {})\n")
    assert _literal_defaults(probe) == ["probe.py:1 get('lr', ...)", "probe.py:2 getattr('dropout', ...)",
                                        "probe.py:3 cfg_get("]


@pytest.mark.parametrize(("overrides", "message"), [
    (["experiment=gh_energy", "energy.features=col"], "energy.features='col' is unknown; use one of: raw, row"),
    (["experiment=gh_energy", "+energy.bins=3"], "energy.bins is not a config key"),
    (["experiment=kim_bounds", "kim.lr=fast"], "kim.lr=fast is invalid"),
    (["experiment=kim_bounds", "kim.restarts=0"], "kim.restarts=0 is out of range"),
    (["experiment=kim_bounds", "+kim.iters=3"], "kim.iters is not a config key"),  # kim_invertibility's key
    (["experiment=fig5", "trees_protocol.block.gat.layer_norm=mid"], "trees_protocol.block.gat.layer_norm='mid'"),
    (["experiment=fig5", "trees_protocol.eval_every.d3=often"], "trees_protocol.eval_every.d3=often is invalid"),
    (["experiment=fig5", "+trees_protocol.depth=2"], "trees_protocol.depth is not a config key"),
])
def test_the_job_kinds_nodes_have_schemas(overrides: list[str], message: str) -> None:
    """The ``energy``, ``kim`` and ``trees_protocol`` nodes are typed by the schemas their experiments name: a wrong
    value or an unknown key is one line at composition."""
    with pytest.raises(ConfigError, match=re.escape(message)) as error:
        compose(overrides)
    assert "\n" not in str(error.value)


def test_a_node_merged_untyped_still_becomes_its_schema() -> None:
    """A record's stored config merged over a composed one (how ``lipgnn verify`` reruns it) leaves the ``energy``
    and ``trees_protocol`` nodes untyped; the settings hold their schemas' dataclasses all the same."""
    from omegaconf import OmegaConf

    from lipgnn.config import validate
    from lipgnn.config_schema import EnergyConfig, TreesBlockConfig

    protocol = {"batch_size": {"d2": 64}, "eval_every": {"d2": 1000},
                "block": {"gat": {"layer_norm": "post", "activation": "none"}}}
    settings = validate(OmegaConf.merge(compose(["model=gcn"]), {"energy": {"features": "row"},
                                                                 "trees_protocol": protocol}))
    assert settings.energy == EnergyConfig("row") and settings.trees_protocol.cpu_pass_cap is None
    assert settings.trees_protocol.block == {"gat": TreesBlockConfig("post", "none")}
    with pytest.raises(ConfigError, match=r"^energy.features='col' is unknown"):
        validate(OmegaConf.merge(compose(["model=gcn"]), {"energy": {"features": "col"}}))
