"""FlatAdam: torch's Adam updates, skips and state dict, with the parameters in one buffer and one kernel call."""

from __future__ import annotations

import io

import pytest
import torch
from torch import nn

from lipgnn.train import flat_adam
from lipgnn.train.flat_adam import FlatAdam, flat_adam_applies
from lipgnn.train.trainer import adam


class _Net(nn.Module):
    """Two layers, an unused layer between them (like PyG's ``lin_skip`` with ``root_weight=False``) and a
    LayerNorm, so the parameters mix 1-D and 2-D tensors and one of them never gets a gradient."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a = nn.Linear(13, 33)
        self.unused = nn.Linear(4, 4)
        self.norm = nn.LayerNorm(33)
        self.b = nn.Linear(33, 7)
        self.use_all = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.b(self.norm(self.a(x)))
        return out + self.unused(out[:, :4]).sum() if self.use_all else out


def _loss(net: _Net, x: torch.Tensor) -> torch.Tensor:
    return net(x).square().mean()


def _train(net: _Net, opt: torch.optim.Optimizer, x: torch.Tensor, steps: int, drop_at: int | None = None) -> None:
    for t in range(steps):
        opt.zero_grad()
        _loss(net, x).backward()
        if t == drop_at:  # one parameter without a gradient in this step only
            net.a.bias.grad = None
        opt.step()


def _assert_same(ours: nn.Module, ref: nn.Module, ours_opt: torch.optim.Optimizer,
                 ref_opt: torch.optim.Optimizer) -> None:
    for (name, p), q in zip(ours.named_parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7, msg=name)
        s, r = ours_opt.state.get(p, {}), ref_opt.state.get(q, {})
        if not r:  # torch's Adam never stepped it: ours holds the initial state
            assert float(s["step"]) == 0 and not s["exp_avg"].any() and not s["exp_avg_sq"].any(), name
            continue
        assert float(s["step"]) == float(r["step"]), name
        torch.testing.assert_close(s["exp_avg"], r["exp_avg"], rtol=1e-6, atol=1e-8, msg=name)
        torch.testing.assert_close(s["exp_avg_sq"], r["exp_avg_sq"], rtol=1e-6, atol=1e-10, msg=name)


def test_updates_and_skips_match_torchs_adam() -> None:
    ours, ref = _Net(), _Net()
    x = torch.randn(50, 13)
    ours_opt = FlatAdam(ours.parameters(), lr=0.01, weight_decay=5e-4)
    ref_opt = torch.optim.Adam(ref.parameters(), lr=0.01, weight_decay=5e-4, fused=True)
    start = ours.a.weight.detach().clone()
    _train(ours, ours_opt, x, 12, drop_at=5)
    _train(ref, ref_opt, x, 12, drop_at=5)
    _assert_same(ours, ref, ours_opt, ref_opt)
    assert float(ours_opt.state[ours.a.bias]["step"]) == 11  # skipped once, as torch's Adam does
    assert (ours.a.weight - start).abs().min() > 1e-5  # the steps moved every entry
    assert torch.equal(ours.unused.weight, ref.unused.weight)  # never stepped, weight decay or not


def test_a_parameter_that_gets_its_first_gradient_late_is_updated_like_torchs() -> None:
    ours, ref = _Net(), _Net()
    x = torch.randn(50, 13)
    ours_opt = FlatAdam(ours.parameters(), lr=0.01, weight_decay=5e-4)
    ref_opt = torch.optim.Adam(ref.parameters(), lr=0.01, weight_decay=5e-4, fused=True)
    for net, opt in ((ours, ours_opt), (ref, ref_opt)):
        _train(net, opt, x, 3)  # the buffers are laid out with the unused layer last
        net.use_all = True
        _train(net, opt, x, 3)
    assert float(ours_opt.state[ours.unused.weight]["step"]) == 3
    _assert_same(ours, ref, ours_opt, ref_opt)


def test_parameters_share_one_buffer_and_a_usual_step_is_one_call(monkeypatch: pytest.MonkeyPatch) -> None:
    net = _Net()
    x = torch.randn(50, 13)
    opt = FlatAdam(net.parameters(), lr=0.01)
    _train(net, opt, x, 1)
    # the parameters with a gradient first, the unused layer's last, all in one storage
    assert opt._params[-2:] == [net.unused.weight, net.unused.bias]
    base = opt._values.untyped_storage().data_ptr()
    assert all(p.untyped_storage().data_ptr() == base for p in net.parameters())
    calls: list[int] = []
    real = flat_adam.adam_update
    monkeypatch.setattr(flat_adam, "adam_update", lambda params, *a, **k: calls.append(params[0].numel())
                        or real(params, *a, **k))
    _train(net, opt, x, 1)
    assert calls == [sum(p.numel() for p in net.parameters()) - 4 * 4 - 4]
    calls.clear()
    _train(net, opt, x, 1, drop_at=0)  # a gap: the parameters before and after it, in two calls
    assert len(calls) == 2
    calls.clear()
    _train(net, opt, x, 1)  # a.bias is a step behind now: its own bias correction, so its own call
    assert len(calls) == 3


def test_state_dicts_cross_with_torchs_adam() -> None:
    x = torch.randn(50, 13)
    # FlatAdam's checkpoint resumed by torch's Adam, and torch's by FlatAdam (loaded before the first step,
    # as the trainer's resume does), each continuing exactly like the uninterrupted optimizer.
    for first, second in ((FlatAdam, torch.optim.Adam), (torch.optim.Adam, FlatAdam)):
        kwargs = {"lr": 0.01, "weight_decay": 5e-4}
        net = _Net()
        opt = first(net.parameters(), **kwargs)
        _train(net, opt, x, 4, drop_at=2)
        buffer = io.BytesIO()
        torch.save({"model": net.state_dict(), "opt": opt.state_dict()}, buffer)
        buffer.seek(0)
        saved = torch.load(buffer)
        resumed = _Net()
        resumed.load_state_dict(saved["model"])
        resumed_opt = second(resumed.parameters(), **kwargs)
        resumed_opt.load_state_dict(saved["opt"])
        _train(net, opt, x, 3)
        _train(resumed, resumed_opt, x, 3)
        ours, ref = (net, resumed) if first is FlatAdam else (resumed, net)
        ours_opt, ref_opt = (opt, resumed_opt) if first is FlatAdam else (resumed_opt, opt)
        _assert_same(ours, ref, ours_opt, ref_opt)


def test_a_state_dict_loaded_after_the_first_step_is_copied_into_the_buffers() -> None:
    x = torch.randn(50, 13)
    net, other = _Net(), _Net()
    opt, other_opt = FlatAdam(net.parameters(), lr=0.01), FlatAdam(other.parameters(), lr=0.01)
    _train(net, opt, x, 3)
    _train(other, other_opt, x, 1)
    other.load_state_dict(net.state_dict())
    other_opt.load_state_dict(opt.state_dict())
    assert other_opt.state[other.a.weight]["exp_avg"].untyped_storage().data_ptr() == \
        other_opt._exp_avg.untyped_storage().data_ptr()
    _train(net, opt, x, 2)
    _train(other, other_opt, x, 2)
    for p, q in zip(net.parameters(), other.parameters(), strict=True):
        assert torch.equal(p, q)


def test_learning_rate_changes_take_effect() -> None:
    net = _Net()
    x = torch.randn(50, 13)
    opt = FlatAdam(net.parameters(), lr=0.01)
    _train(net, opt, x, 1)
    before = [p.detach().clone() for p in net.parameters()]
    opt.param_groups[0]["lr"] = 0.0  # a warm-up's first value, or a plateau schedule's cut
    _train(net, opt, x, 1)
    assert all(torch.equal(p, b) for p, b in zip(net.parameters(), before, strict=True))


def test_moving_the_model_after_the_first_step_is_an_error() -> None:
    net = _Net()
    x = torch.randn(50, 13)
    opt = FlatAdam(net.parameters(), lr=0.01)
    _train(net, opt, x, 1)
    net.double().float()  # new storage for every parameter
    with pytest.raises(RuntimeError, match="left FlatAdam's buffer"):
        _train(net, opt, x, 1)


def test_the_trainer_uses_it_where_it_applies() -> None:
    same = [nn.Parameter(torch.randn(3)), nn.Parameter(torch.randn(2, 2))]
    mixed = [nn.Parameter(torch.randn(3)), nn.Parameter(torch.randn(2, dtype=torch.float64))]
    assert flat_adam_applies(same) and not flat_adam_applies(mixed) and not flat_adam_applies([])
    assert isinstance(adam(same, lr=0.1), FlatAdam)
    plain = adam(mixed, lr=0.1)
    assert type(plain) is torch.optim.Adam and plain.defaults["fused"] is True
    with pytest.raises(ValueError, match="one dtype"):
        FlatAdam(mixed, lr=0.1)
