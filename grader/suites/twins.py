"""Twin modules: one built in the worker by the student's code (or from torch fixtures), one
built here, holding one perturbed state dict. No reference in here: the hidden suites pass the
reference's classes in, the public ones torch's."""
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from ..sandbox.worker import eager
from ..student import Remote, Student
from .checks import Moves, expect_same_keys
from .strategies import randn

PERTURBATION = 0.3
"""Every parameter moves off its init by this times N(0, 1), so that LayerNorm gains (1 at
init) and biases (0) matter: norm1 vs norm2, a missing bias or an extra norm all change the
output."""


def perturb(module: nn.Module, seed: int) -> nn.Module:
    """Move every parameter of `module` off its init, in place; the perturbation is drawn in
    float32, so a float32 copy holds exactly the same values."""
    with torch.no_grad():
        for i, p in enumerate(module.parameters()):
            p.add_((PERTURBATION * randn(seed + 100 + i, *p.shape, dtype=torch.float32)).to(p.dtype))
    return module


def reference_module(cls: type[nn.Module], seed: int, dtype: torch.dtype = torch.float64,
                     **kwargs: Any) -> nn.Module:
    """cls(**kwargs) seeded, in eval mode and `dtype`, every parameter perturbed."""
    eager.manual_seed(seed)
    return perturb(cls(**kwargs).to(dtype).eval(), seed)


def load_twin(remote: Remote, local: nn.Module, dtype: torch.dtype = torch.float64,
              check_keys: Callable[[Mapping], None] | None = None, what: str = "state_dict()") -> Remote:
    """Cast `remote` to `dtype`, then load `local`'s state dict into it (cast first: float64
    values load without rounding). check_keys checks the remote's state-dict keys (default:
    exactly local's)."""
    remote.to(dtype)
    state = local.state_dict()
    if check_keys is None:
        expect_same_keys(remote.state_dict(), state, what)
    else:
        check_keys(remote.state_dict())
    remote.load_state_dict(state)
    return remote


def student_twin(student: Student, target: str, reference: nn.Module, dtype: torch.dtype = torch.float64,
                 check_keys: Callable[[Mapping], None] | None = None, **kwargs: Any) -> Remote:
    """target(**kwargs) built in the worker and loaded with the reference's weights, in eval mode."""
    remote = student.call(target, **kwargs)
    what = f"{target.split('.')[-1]}.state_dict()"
    return load_twin(remote, reference, dtype, check_keys, what).eval()


def twins(student: Student, target: str, reference_cls: type[nn.Module], seed: int,
          dtype: torch.dtype = torch.float64, **kwargs: Any) -> tuple[Remote, nn.Module]:
    """The student's target(**kwargs) and reference_cls(**kwargs), one perturbed state dict."""
    reference = reference_module(reference_cls, seed, dtype, **kwargs)
    return student_twin(student, target, reference, dtype, **kwargs), reference


def reference_grads(module: nn.Module, inputs: list[torch.Tensor], grad_output: torch.Tensor,
                    **kwargs: Any) -> tuple[list[torch.Tensor], dict[str, torch.Tensor]]:
    """Gradients of <module(*inputs), grad_output> w.r.t. the floating-point inputs (None for
    others, e.g. token ids) and the parameters."""
    inputs = [x.detach().requires_grad_(True) if x.is_floating_point() else x for x in inputs]
    module.zero_grad()
    out = module(*inputs, **kwargs)
    out = out[0] if isinstance(out, tuple) else out
    out.backward(grad_output)
    return [x.grad for x in inputs], {n: p.grad for n, p in module.named_parameters()}


MOVE = 1e-3
"""How far moves_input / moves_parameter move the entries: float64 outputs that depend on them change
by far more than rounding (1e-12)."""


def _first(result: Any) -> torch.Tensor:
    return result[0] if isinstance(result, (tuple, list)) else result


def _changed(before: Any, after: Any) -> bool:
    before, after = _first(before), _first(after)
    tensors = isinstance(before, torch.Tensor) and isinstance(after, torch.Tensor)
    if not (tensors and before.shape == after.shape):
        return True
    return bool(((after.to(torch.float64) - before.to(torch.float64)).abs() > 1e-12).any())


def moves_input(call: Callable[[list], Any], args: list, index: int) -> Moves:
    """expect_grad_close's `moves` for args[index]: whether call(args)'s (first) output changes when
    the marked entries of args[index] move."""
    def moves(entries: torch.Tensor) -> bool:
        moved = list(args)
        moved[index] = args[index] + MOVE * entries.to(args[index].dtype)
        return _changed(call(args), call(moved))
    return moves


def moves_parameter(module: Remote, args: list, kwargs: dict, name: str) -> Moves:
    """expect_grad_close's `moves` for parameter `name` of the student's module: whether
    module(*args, **kwargs)'s (first) output changes when its marked entries move."""
    def moves(entries: torch.Tensor) -> bool:
        value = module.state_dict()[name]
        before = module(*args, **kwargs)
        module.load_state_dict({name: value + MOVE * entries.to(value.dtype)}, strict=False)
        try:
            return _changed(before, module(*args, **kwargs))
        finally:
            module.load_state_dict({name: value}, strict=False)
    return moves
