r"""``lipgnn diagnose``: :func:`lipgnn.diagnostics.diagnose.diagnose` from the command line (:data:`HELP`).

Bad input (a factory file or name that does not exist, a missing ``:factory``, a factory with another
signature, a model without message-passing layers, a forward pass that fails, a bad override) is one line on
stderr and exit status 2; ``--debug`` adds the traceback.
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from lipgnn.errors import ConfigError, LipgnnError

USAGE = ("lipgnn diagnose model=gat norm=lip depth=30 dataset=cora [options]\n"
         "       lipgnn diagnose my_models.py:make_model dataset=cora [options]")
HELP = """\
Per-layer diagnostics of a message-passing network on a dataset of the suite: raw and scale-free
energies (E and E/|X|^2), feature norm, MAD, group distance ratios, attention-gradient peaks and
Lipschitz lower bounds, from the input features (layer 0) to the last message-passing layer, with a
one-line summary that judges smoothing and scale apart.

Two ways to name the model, on a dataset of the suite (dataset=cora etc., as for train.py):
  a suite model, from the same overrides as train.py:
      lipgnn diagnose model=gat norm=lip depth=30 dataset=cora
    (built as a training run would start it, with the run's seed, on PyG's layer path);
  your own, from a function in a Python file:
      lipgnn diagnose my_models.py:make_model dataset=cora
    where make_model(in_channels, out_channels) returns a torch.nn.Module, called as
    model(x, edge_index) plus batch= where its forward takes it and edge_attr= where it uses edge
    features (its forward requires edge_attr or a layer has edge_dim), or returns (model, forward)
    with forward(model, data) running it.

device=cuda (or cuda:<i>) moves the model and data there; device=auto picks CUDA when available."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lipgnn diagnose", usage=USAGE, description=HELP,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train-steps", type=int, default=0,
                        help="Adam steps over which the attention-gradient peak is taken (default 0: none)")
    parser.add_argument("--every", type=int, default=0,
                        help="with --train-steps: record the quantities every k steps (the JSON's history)")
    parser.add_argument("--no-lipschitz", action="store_true", help="skip the Lipschitz lower bounds")
    parser.add_argument("--lipschitz-budget", type=float, default=10.0, metavar="SECONDS",
                        help="stop the Lipschitz bounds after this many seconds, within a layer's power "
                             "iteration too; the summary says what was cut (default 10)")
    parser.add_argument("--plot", default=None, help="figure path (default: <model>-<dataset>-diagnose.png)")
    parser.add_argument("--no-plot", action="store_true", help="print only")
    parser.add_argument("--csv", default=None, metavar="PATH", help="also write the table as CSV")
    parser.add_argument("--json", default=None, metavar="PATH",
                        help="also write the table, summary and settings as JSON")
    parser.add_argument("--debug", action="store_true", help="on an error, print the traceback too")
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
        raise ConfigError(f"importing {path} failed: {type(exc).__name__}: {exc}") from exc
    factory = getattr(module, name, None)
    if factory is None or not callable(factory):
        raise ConfigError(f"{path} has no function {name!r}; define {name}(in_channels, out_channels) there")
    return factory


def build_from_factory(factory: Any, in_channels: int, out_channels: int,
                       target: str) -> tuple[nn.Module, Callable[[nn.Module, Any], Any] | None]:
    """``factory(in_channels, out_channels)``, checked: the signature takes the two and the result is a module
    or ``(module, forward)``; returns ``(model, forward or None)``."""
    try:
        inspect.signature(factory).bind(in_channels, out_channels)
    except TypeError:
        raise ConfigError(f"{target} must take (in_channels, out_channels); its signature is "
                          f"{inspect.signature(factory)}") from None
    except ValueError:  # no signature to inspect (a builtin): let the call decide
        pass
    try:
        result = factory(in_channels, out_channels)
    except Exception as exc:  # the user's code
        raise ConfigError(f"{target}({in_channels}, {out_channels}) raised {type(exc).__name__}: {exc}") from exc
    forward = None
    if isinstance(result, tuple) and len(result) == 2:
        result, forward = result
        if not callable(forward):
            raise ConfigError(f"{target} returned (model, {type(forward).__name__}); the second item must be a "
                              "callable forward(model, data)")
    if not isinstance(result, nn.Module):
        raise ConfigError(f"{target} returned {type(result).__name__}, not a torch.nn.Module or (module, forward)")
    return result, forward


def _factory_target(items: Sequence[str]) -> str | None:
    """The ``file.py:factory`` item (the first), or ``None``; a file named without ``:factory`` is refused."""
    if not items or "=" in items[0]:
        return None
    first = items[0]
    if ":" in first:
        return first
    if first.endswith(".py") or Path(first).is_file():
        raise ConfigError(f"{first} names no factory: write {first}:make_model, the function that takes "
                          "(in_channels, out_channels) and returns the model")
    raise ConfigError(f"{first!r} is neither file.py:factory nor a key=value override; e.g. "
                      "lipgnn diagnose my_models.py:make_model dataset=cora")


def _prepare(items: Sequence[str]) -> tuple[nn.Module, Any, str, Any, torch.device]:
    """``(model, data, name, forward or None, device)`` for the command line's items (a factory first, then
    overrides)."""
    from lipgnn.config import compose
    from lipgnn.data import load
    from lipgnn.models import build_model
    from lipgnn.runs.kinds.training import resolve_device
    from lipgnn.seeding import seed_run

    factory_target = _factory_target(items)
    overrides = list(items[1:] if factory_target else items)
    if factory_target is None and not any(o.startswith("model.impl=") for o in overrides):
        overrides.append("model.impl=pyg")
    cfg = compose(overrides)
    device = resolve_device(str(cfg.device))
    seed_run(int(cfg.seed))
    task = load(cfg.dataset, int(cfg.seed))
    data = next(iter(task.eval_batches()))
    seed_run(int(cfg.seed))
    forward = None
    if factory_target is not None:
        factory = load_factory(factory_target)
        model, forward = build_from_factory(factory, int(task.spec.num_features), int(task.spec.num_classes),
                                            factory_target)
        name = f"{factory_target.rpartition(':')[2]}-{cfg.dataset.name}"
    else:
        model = build_model(cfg.model, cfg.norm, task.spec, int(cfg.depth))
        name = f"{cfg.model.name}-{cfg.norm.name}-{cfg.dataset.name}-L{cfg.depth}"
    return model, data, name, forward, device


def write_atomic(path: str | Path, text: str) -> Path:
    """``text`` to ``path`` by the store's atomic writer (temporary file + ``os.replace``): never half-written."""
    from lipgnn.store import _atomic_write_text

    _atomic_write_text(Path(path), text)
    return Path(path)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    torch.set_num_threads(1)
    import json

    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from lipgnn.diagnostics.diagnose import diagnose

    try:
        for flag, value in (("--train-steps", args.train_steps), ("--every", args.every)):
            if value < 0:
                raise ConfigError(f"{flag}={value} is invalid; use an integer >= 0")
        model, data, name, forward, device = _prepare(args.items)
        options = {} if forward is None else {"forward": forward}
        y = getattr(data, "y", None)
        # Multi-label targets (ogbn-proteins) have no class per node: no group ratios, no training steps.
        labels = y if isinstance(y, torch.Tensor) and y.dim() == 1 and not y.is_floating_point() else None
        if labels is None and args.train_steps:
            raise ConfigError(f"--train-steps needs one class label per node; {name}'s targets are not class "
                              "indices (multi-label): use --train-steps 0")
        result = diagnose(model, data, labels=labels, train_steps=args.train_steps,
                          every=args.every, lipschitz=not args.no_lipschitz,
                          lipschitz_budget_s=args.lipschitz_budget, device=device, **options)
    except (HydraException, OmegaConfBaseException, LipgnnError) as exc:
        if args.debug:
            traceback.print_exception(exc)
        message = str(exc).strip()
        print(f"error: {message.splitlines()[0] if message else type(exc).__name__}"
              + ("" if args.debug else " (--debug for the traceback)"), file=sys.stderr)
        return 2
    baseline = result.settings["group_ratio_baseline"]
    print(f"# {name}: layer 0 = input features, then each message-passing call (energies per entry, "
          f"mu = deg + 1; group_ratio without separation: {baseline:.3g}; device {result.settings['device']})")
    print(result.layers.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    print(result.summary)
    if args.csv:
        print(f"csv: {write_atomic(args.csv, result.layers.to_csv(index=False))}")
    if args.json:
        text = json.dumps({"name": name, **result.to_record()}, indent=1, allow_nan=False)
        print(f"json: {write_atomic(args.json, text)}")
    if not args.no_plot:
        path = result.plot(args.plot or f"{name}-diagnose.png")
        print(f"plot: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
