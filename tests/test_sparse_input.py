"""The fused encoder for sparse features (lipgnn.nn.fused.sparse_input) against torch.nn.Linear."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
from devices import seeded
from torch import nn

from lipgnn.config import compose
from lipgnn.data.spec import DataSpec
from lipgnn.models import build_model
from lipgnn.nn.fused import kernels, sparse_kernels
from lipgnn.nn.fused.sparse_input import MAX_DENSITY, SparseInputLinear


def _sparse_features(n: int = 300, f: int = 120, density: float = 0.05, seed: int = 0,
                     dtype: torch.dtype = torch.float32) -> torch.Tensor:
    g = seeded(seed)
    x = torch.rand(n, f, generator=g, dtype=dtype)
    return torch.where(torch.rand(n, f, generator=g, dtype=dtype) < density, x, torch.zeros((), dtype=dtype))


def _pair(f: int = 120, out: int = 16, dtype: torch.dtype = torch.float32) -> tuple[SparseInputLinear, nn.Linear]:
    torch.manual_seed(1)
    ours = SparseInputLinear(f, out, dtype=dtype)
    ref = nn.Linear(f, out, dtype=dtype)
    ref.load_state_dict(ours.state_dict())
    return ours, ref


def _forward_backward(lin: nn.Linear, x: torch.Tensor, g: torch.Tensor) -> tuple[torch.Tensor, ...]:
    lin.zero_grad()
    y = lin(x)
    (y * g).sum().backward()
    return y.detach(), lin.weight.grad.clone(), lin.bias.grad.clone()


@pytest.mark.cpu_only
def test_csr_t_matmul_matches_hand_computed_product() -> None:
    # x = [[1, 0, 2], [0, 3, 0]], g = [[1, 10], [100, 1000]]: xᵀ g row k sums x[i, k] g[i].
    x = torch.tensor([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]]).to_sparse_csr()
    g = torch.tensor([[1.0, 10.0], [100.0, 1000.0]])
    expected = torch.tensor([[1.0, 10.0], [300.0, 3000.0], [2.0, 20.0]])
    assert torch.equal(sparse_kernels.csr_t_matmul(x, g), expected)


@pytest.mark.cpu_only
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_values_and_gradients_equal_nn_linear_from_the_second_forward_on(dtype: torch.dtype) -> None:
    ours, ref = _pair(dtype=dtype)
    x = _sparse_features(dtype=dtype)
    g = torch.randn(x.size(0), 16, dtype=dtype)
    first = _forward_backward(ours, x, g)
    assert ours._seen is not None and not ours._seen[3]  # first sight: the dense product
    second = _forward_backward(ours, x, g)
    assert ours._seen[2] is not None and ours._seen[2].layout == torch.sparse_csr  # now the CSR product
    expected = _forward_backward(ref, x, g)
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    for got in (first, second):
        for a, b in zip(got, expected, strict=True):
            torch.testing.assert_close(a, b, rtol=tol, atol=tol)


@pytest.mark.cpu_only
def test_dense_features_stay_dense() -> None:
    ours, _ = _pair()
    x = _sparse_features(density=min(1.0, 2 * MAX_DENSITY))
    ours(x)
    ours(x)
    assert ours._seen[3] and ours._seen[2] is None


def test_features_modified_in_place_are_converted_again() -> None:
    ours, ref = _pair()
    x = _sparse_features()
    ours(x)
    ours(x)
    x[0, :] = 1.0  # in place: the old CSR copy no longer holds x
    ours(x)
    torch.testing.assert_close(ours(x), ref(x))


def test_inputs_that_need_a_gradient_or_eager_kernels_take_the_dense_product() -> None:
    ours, ref = _pair()
    x = _sparse_features().requires_grad_()
    ours(x)
    y = ours(x)
    assert ours._seen is None  # never considered
    y.sum().backward()
    assert x.grad is not None
    with kernels.disabled():
        z = _sparse_features()
        ours(z)
        ours(z)
        assert ours._seen is None


def test_a_copy_built_during_evaluation_serves_training() -> None:
    ours, ref = _pair()
    x = _sparse_features()
    g = torch.randn(x.size(0), 16)
    ours(x)
    with torch.inference_mode():
        ours(x)  # converts here
    got = _forward_backward(ours, x, g)
    for a, b in zip(got, _forward_backward(ref, x, g), strict=True):
        torch.testing.assert_close(a, b)


def test_copies_and_pickles_keep_parameters_not_the_cache() -> None:
    ours, _ = _pair()
    x = _sparse_features()
    ours(x)
    ours(x)
    for clone in (copy.deepcopy(ours), pickle.loads(pickle.dumps(ours))):
        assert clone._seen is None
        torch.testing.assert_close(clone(x), ours(x))
    assert set(ours.state_dict()) == {"weight", "bias"}


@pytest.mark.parametrize("model, impl, expected", [
    ("gat", "fused", SparseInputLinear), ("gat", "auto", SparseInputLinear), ("gat", "pyg", nn.Linear),
    ("gcn", "auto", SparseInputLinear), ("gcn", "pyg", nn.Linear),
])
def test_builder_uses_the_sparse_encoder_unless_the_stock_path_is_asked_for(model: str, impl: str,
                                                                             expected: type) -> None:
    cfg = compose([f"model={model}", "depth=2", f"model.impl={impl}"])
    model = build_model(cfg.model, cfg.norm, DataSpec(num_features=40, num_classes=3), 2)
    assert type(model.encoder) is expected


@pytest.mark.cpu_only
def test_csr_dropout_keeps_the_zeros_and_scales_each_kept_entry() -> None:
    """F.dropout on a CSR matrix's stored entries: each becomes 0 or v / (1 - p), the pattern is kept, the keep rate
    is 1 - p within binomial noise, and the decisions are independent of their neighbours' and of the last call's."""
    from lipgnn.nn.fused.sparse_input import csr_dropout

    p = 0.3
    x = _sparse_features(n=400, f=500, density=0.5, seed=3)
    x_csr = x.to_sparse_csr()
    torch.manual_seed(0)
    out = csr_dropout(x_csr, p)
    assert torch.equal(out.crow_indices(), x_csr.crow_indices()) and torch.equal(out.col_indices(), x_csr.col_indices())
    v, w = x_csr.values(), out.values()
    kept = w != 0
    torch.testing.assert_close(w[kept], v[kept] / (1 - p), rtol=1e-6, atol=0)
    nnz = v.numel()
    assert abs(kept.float().mean().item() - (1 - p)) < 4 * ((p * (1 - p) / nnz) ** 0.5)
    k = kept.float() - kept.float().mean()
    bound = 4 / nnz ** 0.5
    assert abs(float((k[1:] * k[:-1]).mean() / k.var())) < bound  # neighbouring entries
    again = csr_dropout(x_csr, p).values() != 0
    k2 = again.float() - again.float().mean()
    assert abs(float((k * k2).mean() / (k.std() * k2.std()))) < bound  # a second call draws afresh
    torch.manual_seed(0)
    assert torch.equal(csr_dropout(x_csr, p).values(), w)  # torch's generator: seeded runs repeat
    assert torch.equal(csr_dropout(x_csr, 0.0).values(), v)
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        csr_dropout(x_csr, 1.0)


@pytest.mark.cpu_only
def test_dropped_equals_dropout_then_linear_with_the_same_mask(monkeypatch: pytest.MonkeyPatch) -> None:
    """SparseInputLinear.dropped(x, p): the first step is F.dropout and the dense product; from the second the
    dropout is drawn on the stored entries and multiplied in CSR form, equal (values and parameter gradients) to
    nn.Linear on the same dropped features, while x keeps its CSR copy from step to step."""
    from lipgnn.nn.fused import sparse_input

    ours, ref = _pair()
    x = _sparse_features()
    g = torch.randn(x.size(0), 16)
    drawn: list[torch.Tensor] = []
    draw = sparse_input.csr_dropout
    monkeypatch.setattr(sparse_input, "csr_dropout", lambda x_csr, p: drawn.append(draw(x_csr, p)) or drawn[-1])

    def step(lin: nn.Module, features: torch.Tensor, dropped: bool) -> tuple[torch.Tensor, ...]:
        lin.zero_grad()
        y = lin.dropped(features, 0.4) if dropped else lin(features)
        (y * g).sum().backward()
        return y.detach(), lin.weight.grad.clone(), lin.bias.grad.clone()

    torch.manual_seed(5)
    first = step(ours, x, True)
    torch.manual_seed(5)
    expected_first = step(ref, torch.nn.functional.dropout(x, 0.4), False)
    assert not drawn and not ours.used_csr
    for a, b in zip(first, expected_first, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    for _ in range(2):
        got = step(ours, x, True)
        assert ours.used_csr and ours._seen[0]() is x and ours._seen[3]
        expected = step(ref, drawn[-1].to_dense(), False)
        for a, b in zip(got, expected, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    assert len(drawn) == 2 and not torch.equal(drawn[0].values(), drawn[1].values())
    state = torch.get_rng_state()
    torch.testing.assert_close(ours.dropped(x, 0.4, training=False), ref(x), rtol=1e-5, atol=1e-5)
    assert torch.equal(torch.get_rng_state(), state) and len(drawn) == 2  # evaluation draws nothing


def test_san_encoder_keeps_its_modules_and_takes_the_sparse_dropout() -> None:
    """SAN's encoder (dropout, then the MLP): the same modules and state_dict keys with either impl; with the fused
    encoder its dropout runs on the stored entries (the features' CSR copy in use from the second step)."""
    from lipgnn.models.blocks import DroppedInputMLP

    x = _sparse_features(n=200, f=60, density=0.05, seed=2)
    encoders = {}
    for impl in ("fused", "pyg"):
        cfg = compose(["model=san", "depth=2", f"model.impl={impl}"])
        encoders[impl] = build_model(cfg.model, cfg.norm, DataSpec(num_features=60, num_classes=3), 2).encoder
    fused, stock = encoders["fused"], encoders["pyg"]
    assert type(fused) is type(stock) is DroppedInputMLP
    assert isinstance(fused[1], SparseInputLinear) and type(stock[1]) is nn.Linear
    assert list(fused.state_dict()) == list(stock.state_dict())
    stock.load_state_dict(fused.state_dict())
    torch.manual_seed(0)
    plain = nn.Sequential(*stock)(x)  # the pyg encoder is the plain Sequential
    torch.manual_seed(0)
    assert torch.equal(stock(x), plain)
    fused.train()
    for _ in range(2):
        fused(x)
    assert fused[1].used_csr
    fused.eval()
    torch.testing.assert_close(fused(x), stock.eval()(x), rtol=1e-5, atol=1e-5)
