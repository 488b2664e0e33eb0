r"""``lipgnn diagnose``: :func:`lipgnn.diagnostics.diagnose.diagnose` from the command line.

Two ways to name the model, both on a dataset of the suite (``dataset=cora`` etc., as for ``train.py``):

* a suite model, from the same overrides as ``train.py``: ``lipgnn diagnose model=gat norm=lip depth=30
  dataset=cora`` (built as a training run would start it, with the run's seed; PyG's layer path,
  ``model.impl=pyg``, tested equal to the fused one);
* the user's own: ``lipgnn diagnose my_models.py:make_model dataset=cora``, where
  ``make_model(in_channels, out_channels)`` returns the ``torch.nn.Module``, called as
  ``model(x, edge_index)``.

Prints the per-layer table and the one-line summary and saves the plot. Bad input (a factory file or name
that does not exist, a factory with another signature, a model without message-passing layers, a bad
override) is one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from lipgnn.errors import ConfigError, LipgnnError

USAGE = ("lipgnn diagnose model=gat norm=lip depth=30 dataset=cora [--train-steps N] [--plot out.png]\n"
         "       lipgnn diagnose my_models.py:make_model dataset=cora [--train-steps N] [--plot out.png]")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lipgnn diagnose", usage=USAGE, description=__doc__.split("\n\n")[0])
    parser.add_argument("--train-steps", type=int, default=0,
                        help="Adam steps over which the attention-gradient peak is taken (default 0: none)")
    parser.add_argument("--no-lipschitz", action="store_true", help="skip the Lipschitz lower bounds")
    parser.add_argument("--plot", default=None, help="figure path (default: <model>-<dataset>-diagnose.png)")
    parser.add_argument("--no-plot", action="store_true", help="print only")
    parser.add_argument("items", nargs="*", help="[file.py:factory] and config overrides as for train.py")
    return parser


def load_factory(target: str) -> Any:
    """The callable ``name`` of ``path`` in ``path:name`` (``ConfigError`` in one line where it is missing)."""
    path_text, _, name = target.rpartition(":")
    path = Path(path_text)
    if not path_text or not name:
        raise ConfigError(f"{target!r} is not file.py:factory; name the file and the function, e.g. "
                          "my_models.py:make_model")
    if not path.is_file():
        raise ConfigError(f"factory file {path} does not exist; give the path of a .py file")
    spec = importlib.util.spec_from_file_location(f"lipgnn_user_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"{path} cannot be imported as a Python module; give a .py file")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # the user's file: any error it raises is reported in one line
        raise ConfigError(f"importing {path} failed: {type(exc).__name__}: {exc}") from None
    factory = getattr(module, name, None)
    if factory is None or not callable(factory):
        raise ConfigError(f"{path} has no function {name!r}; define {name}(in_channels, out_channels) there")
    return factory


def build_from_factory(factory: Any, in_channels: int, out_channels: int, target: str) -> nn.Module:
    """``factory(in_channels, out_channels)``, checked: the signature takes the two and the result is a module."""
    try:
        inspect.signature(factory).bind(in_channels, out_channels)
    except TypeError:
        raise ConfigError(f"{target} must take (in_channels, out_channels); its signature is "
                          f"{inspect.signature(factory)}") from None
    except ValueError:  # no signature to inspect (a builtin): let the call decide
        pass
    try:
        model = factory(in_channels, out_channels)
    except Exception as exc:  # the user's code
        raise ConfigError(f"{target}({in_channels}, {out_channels}) raised {type(exc).__name__}: {exc}") from None
    if not isinstance(model, nn.Module):
        raise ConfigError(f"{target} returned {type(model).__name__}, not a torch.nn.Module")
    return model


def _prepare(items: Sequence[str]) -> tuple[nn.Module, Any, str]:
    """``(model, data, name)`` for the command line's items (a factory first, then overrides)."""
    from lipgnn.config import compose
    from lipgnn.data import load
    from lipgnn.models import build_model
    from lipgnn.seeding import seed_run

    factory_target = items[0] if items and ":" in items[0] and "=" not in items[0] else None
    overrides = list(items[1:] if factory_target else items)
    if factory_target is None and not any(o.startswith("model.impl=") for o in overrides):
        overrides.append("model.impl=pyg")
    cfg = compose(overrides)
    seed_run(int(cfg.seed))
    task = load(cfg.dataset, int(cfg.seed))
    data = next(iter(task.eval_batches()))
    seed_run(int(cfg.seed))
    if factory_target is not None:
        factory = load_factory(factory_target)
        model = build_from_factory(factory, int(task.spec.num_features), int(task.spec.num_classes), factory_target)
        name = f"{factory_target.rpartition(':')[2]}-{cfg.dataset.name}"
    else:
        model = build_model(cfg.model, cfg.norm, task.spec, int(cfg.depth))
        name = f"{cfg.model.name}-{cfg.norm.name}-{cfg.dataset.name}-L{cfg.depth}"
    return model, data, name


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    torch.set_num_threads(1)
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from lipgnn.diagnostics.diagnose import diagnose

    try:
        if args.train_steps < 0:
            raise ConfigError(f"--train-steps={args.train_steps} is invalid; use an integer >= 0")
        model, data, name = _prepare(args.items)
        result = diagnose(model, data, labels=getattr(data, "y", None), train_steps=args.train_steps,
                          lipschitz=not args.no_lipschitz)
    except (HydraException, OmegaConfBaseException, LipgnnError) as exc:
        message = str(exc).strip()
        print(f"error: {message.splitlines()[0] if message else type(exc).__name__}", file=sys.stderr)
        return 2
    print(f"# {name}: per message-passing layer (energies per entry, mu = deg + 1)")
    print(result.layers.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    print(result.summary)
    if not args.no_plot:
        path = result.plot(args.plot or f"{name}-diagnose.png")
        print(f"plot: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
