"""Twin modules: the student's and the reference's, built alike and sharing one state dict."""
from typing import Any

import torch
from torch import nn

from ..student import Remote, Student
from .checks import expect_same_keys


def twins(student: Student, target: str, reference_cls: type, seed: int,
          dtype: torch.dtype = torch.float64, **kwargs: Any) -> tuple[Remote, nn.Module]:
    """Build target(**kwargs) in the worker and reference_cls(**kwargs) here, seeded, both in
    eval mode and `dtype`, with the reference's parameters loaded into the student's module."""
    torch.manual_seed(seed)
    reference = reference_cls(**kwargs).to(dtype).eval()
    remote = student.call(target, **kwargs).to(dtype)  # then the state dict loads without rounding
    state = reference.state_dict()
    expect_same_keys(remote.state_dict(), state, f"{target.split('.')[-1]}.state_dict()")
    remote.load_state_dict(state)
    return remote.eval(), reference


def reference_grads(module: nn.Module, inputs: list[torch.Tensor], grad_output: torch.Tensor,
                    **kwargs: Any) -> tuple[list[torch.Tensor], dict[str, torch.Tensor]]:
    """Gradients of <module(*inputs), grad_output> w.r.t. the inputs and the parameters."""
    inputs = [x.detach().requires_grad_(True) for x in inputs]
    module.zero_grad()
    out = module(*inputs, **kwargs)
    out = out[0] if isinstance(out, tuple) else out
    out.backward(grad_output)
    return [x.grad for x in inputs], {n: p.grad for n, p in module.named_parameters()}
