"""Model families by name: ``@register_model("gat")`` on a family's builder (one module per family in
:mod:`lipgnn.models.families`), :func:`model_builder` to find it. What a family *is* (attention, fused twin,
label) is declared once in :data:`lipgnn.config_schema.FAMILIES`; a builder registers only under a name
declared there, so the config's choices, the run identity and the tables know every built family."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from lipgnn.config_schema import FAMILIES
from lipgnn.errors import ConfigError

if TYPE_CHECKING:
    from lipgnn.models.deep import DeepGNN
    from lipgnn.models.stack import Build

#: A family's builder: the typed configs, spec, depth and resolved impl in, the model out.
Builder = Callable[["Build"], "DeepGNN"]
_BUILDERS: dict[str, Builder] = {}


def register_model(name: str) -> Callable[[Builder], Builder]:
    """Register the decorated function as the builder of family ``name`` (a key of ``FAMILIES``): it takes a
    :class:`~lipgnn.models.stack.Build` and returns a :class:`~lipgnn.models.deep.DeepGNN`."""

    def register(builder: Builder) -> Builder:
        if name not in FAMILIES:
            raise ValueError(f"model family {name!r} has no entry in lipgnn.config_schema.FAMILIES; declare it there")
        if name in _BUILDERS and _BUILDERS[name] is not builder:
            raise ValueError(f"model family {name!r} is registered twice ({_BUILDERS[name].__module__}, "
                             f"{builder.__module__})")
        _BUILDERS[name] = builder
        return builder

    return register


def registered_models() -> tuple[str, ...]:
    """The names with a registered builder, in ``FAMILIES`` order."""
    return tuple(name for name in FAMILIES if name in _BUILDERS)


def model_builder(name: str) -> Builder:
    """The builder registered for ``name``; :class:`ConfigError` (one line, the registered names) if none."""
    if name not in _BUILDERS:
        raise ConfigError(f"model.name={name} is unknown; choose one of: {', '.join(registered_models())}")
    return _BUILDERS[name]
