"""lipgnn reads top to bottom: every module imports only its own layer and the layers below it.

Every import counts, wherever it stands (module level, function body, ``try``/``if`` blocks), as the import
graph of tests/test_import_cycles.py resolves it; there is no exemption. A module belongs to the layer of its
longest matching prefix in :data:`LAYERS`.
"""

from __future__ import annotations

from test_import_cycles import PKG_ROOT, _module_name, import_graph

#: bottom to top: the layer's name and the modules (and packages) it holds
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("config", ("lipgnn", "lipgnn.errors", "lipgnn.config_schema", "lipgnn.config", "lipgnn.identity",
                "lipgnn.provenance", "lipgnn.numerics")),
    ("data", ("lipgnn.data",)),
    ("layers", ("lipgnn.nn",)),
    ("models", ("lipgnn.models",)),
    ("seeding", ("lipgnn.seeding",)),
    ("record store", ("lipgnn.store",)),
    ("trainer", ("lipgnn.train",)),
    # measurements of models (energies, probes, Lipschitz estimates) and the experiments made of them
    ("diagnostics", ("lipgnn.diagnostics", "lipgnn.lipschitz")),
    ("run layer", ("lipgnn.runs", "lipgnn.sweep")),
    ("analysis", ("lipgnn.results",)),
    ("entry points", ("lipgnn.cli", "lipgnn.slurm", "lipgnn.summarize", "lipgnn.docs", "lipgnn.demo", "lipgnn.bench",
                      "lipgnn.lipschitz.cli", "lipgnn.diagnostics.cli", "lipgnn.diagnostics.diagnose_cli",
                      "lipgnn.verify")),
)


def layer_of(module: str) -> int:
    """The index in :data:`LAYERS` of ``module``'s layer (its longest matching prefix)."""
    matches = [(len(prefix), index) for index, (_, prefixes) in enumerate(LAYERS) for prefix in prefixes
               if module == prefix or module.startswith(prefix + ".")]
    assert matches, f"{module} is in no layer: add it to LAYERS"
    return max(matches)[1]


def test_every_module_has_a_layer() -> None:
    for path in PKG_ROOT.rglob("*.py"):
        layer_of(_module_name(path))


def test_no_module_imports_a_layer_above_its_own() -> None:
    upward = sorted(f"{module} ({LAYERS[layer_of(module)][0]}) imports {target} ({LAYERS[layer_of(target)][0]})"
                    for module, targets in import_graph().items() for target in targets
                    if layer_of(target) > layer_of(module))
    assert not upward, "upward imports:\n" + "\n".join(upward)


def test_the_order_is_checked() -> None:
    # The run layer is below the analysis, the record store below the trainer.
    assert layer_of("lipgnn.runs.layer") < layer_of("lipgnn.results.grid")
    assert layer_of("lipgnn.store.checkpoint") < layer_of("lipgnn.train.trainer") < layer_of("lipgnn.runs.layer")
    assert layer_of("lipgnn.lipschitz.cli") > layer_of("lipgnn.results.report")


def test_no_test_imports_a_script() -> None:
    """scripts/ are thin command lines above every layer: a test imports the package (it may run a script as a
    command line, ``conftest.run_script``), so what a script does is in the package, tested there."""
    import ast

    tests = PKG_ROOT.parent / "tests"
    scripts = {path.stem for path in (PKG_ROOT.parent / "scripts").glob("*.py")}
    found = []
    for path in sorted(tests.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            calls = (getattr(node.func, "attr", None) or getattr(node.func, "id", None)
                     if isinstance(node, ast.Call) else None)
            if any(name.split(".")[0] in scripts | {"scripts"} for name in names) or calls in (
                    "spec_from_file_location", "run_path", "SourceFileLoader"):
                found.append(f"{path.name}:{node.lineno}")
    assert not found, f"tests that import a script (import the package instead): {', '.join(found)}"
