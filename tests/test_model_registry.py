"""The model registry: one builder per family, registered by name under the families that
lipgnn.config_schema.FAMILIES declares; the name tuples the rest of lipgnn reads derive from that table."""

from __future__ import annotations

from pathlib import Path

import pytest

from lipgnn.config import CONF_DIR
from lipgnn.config_schema import ATTENTION_MODELS, FAMILIES, FUSED_MODELS, MODELS, ModelConfig, NormConfig
from lipgnn.data.spec import DataSpec
from lipgnn.errors import ConfigError
from lipgnn.models import build_model
from lipgnn.models.registry import model_builder, register_model, registered_models
from lipgnn.store.records import variant_label


def test_every_declared_family_has_one_builder_and_a_yaml_file() -> None:
    assert registered_models() == MODELS == tuple(FAMILIES)
    assert sorted(p.stem for p in (Path(CONF_DIR) / "model").glob("*.yaml")) == sorted(MODELS)
    for name in MODELS:
        assert model_builder(name).__module__ == f"lipgnn.models.families.{name}"


def test_an_unknown_family_is_one_line_naming_the_registered_ones() -> None:
    with pytest.raises(ConfigError) as info:
        model_builder("mlp")
    assert str(info.value) == ("model.name=mlp is unknown; choose one of: gcn, ggnn, gin, gat, gt, gcnii, san, "
                               "pyg_stack")
    # A dataclass skips the schema's check of the name: the registry refuses it.
    with pytest.raises(ConfigError, match=r"^model.name=mlp is unknown; choose one of: gcn, "):
        build_model(ModelConfig(name="mlp"), NormConfig(), DataSpec(4, 2), 2)


def test_a_builder_registers_only_under_a_declared_family() -> None:
    with pytest.raises(ValueError, match="no entry in lipgnn.config_schema.FAMILIES"):
        register_model("mlp")(lambda b: None)
    with pytest.raises(ValueError, match="registered twice"):
        register_model("gat")(lambda b: None)


def test_the_name_tuples_derive_from_the_family_table() -> None:
    # These sets decide validation, run identity (heads etc. count for attention models only) and table labels.
    assert ATTENTION_MODELS == ("gat", "gt", "san", "pyg_stack")
    assert set(FUSED_MODELS) == {"gat", "gt", "san", "gcn", "ggnn", "gin", "gcnii"}
    assert [variant_label(m, "lip") for m in ("gat", "gt", "san")] == ["GAT-Lip", "GT-Lip", "SAN-Lip"]
    assert variant_label("gcnii", "none", residual=True) == "GCNII" and variant_label("gcn", "none", True) == "GCN-res"
