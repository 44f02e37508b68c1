"""Autograd through the worker: a student's module as one differentiable step of a formula composed
here, so that the formula's gradients use the student's own backward for that step."""
from typing import Any

import torch

from ..student import Remote


class _Through(torch.autograd.Function):
    """module(z, **kwargs) (its first output) computed in the worker; backward asks the worker for
    z's gradient and adds the module's parameter gradients into `grads`."""

    @staticmethod
    def forward(ctx: Any, z: torch.Tensor, module: Remote, kwargs: dict, grads: dict) -> torch.Tensor:
        ctx.save_for_backward(z)
        ctx.module, ctx.kwargs, ctx.grads = module, kwargs, grads
        out = module(z, **kwargs)
        return out[0] if isinstance(out, tuple) else out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:
        (z,) = ctx.saved_tensors
        ctx.module.method("zero_grad")  # the worker's .grad fields accumulate across calls
        _, inputs, params = ctx.module.grad([z], ctx.kwargs, grad_outputs=[grad], wrt=(0,))
        for name, g in params.items():
            if g is not None:
                ctx.grads[name] = ctx.grads[name] + g if name in ctx.grads else g
        return inputs.get(0), None, None, None


def through(module: Remote, z: torch.Tensor, grads: dict[str, torch.Tensor], **kwargs: Any) -> torch.Tensor:
    """module(z, **kwargs) (its first output), differentiable w.r.t. z by the student's own autograd;
    backward adds the module's parameter gradients into `grads`, by parameter name."""
    return _Through.apply(z, module, kwargs, grads)
