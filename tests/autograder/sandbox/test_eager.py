"""grader.sandbox.eager: torch's optimizers step without importing torch._dynamo, and backward passes
given their output gradients run without importing sympy, to the same values and errors; anything else
asked of either module gets the real one."""
import subprocess
import sys
import textwrap

PROGRAM = textwrap.dedent("""\
    import sys
    import torch
    from grader.sandbox.worker import eager

    def trained(cls, **options):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.Linear(8, 2)).double()
        optimizer = cls(model.parameters(), lr=0.01, **options)
        x = torch.randn(16, 4, dtype=torch.float64)
        for _ in range(5):
            optimizer.zero_grad()
            model(x).pow(2).mean().backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
            optimizer.step()
        return [p.detach().clone() for p in model.parameters()]

    def backward(grad):
        x = torch.linspace(-1, 1, 12, dtype=torch.float64).reshape(3, 4).requires_grad_()
        try:
            torch.autograd.backward([(x * 2).sin()], [grad])
        except RuntimeError as error:
            return str(error)
        return x.grad

    GRADS = [torch.randn(3, 4, dtype=torch.float64), torch.randn(4, 3, dtype=torch.float64)]
    RUNS = [(torch.optim.AdamW, {"weight_decay": 0.1}), (torch.optim.AdamW, {"foreach": False}),
            (torch.optim.Adam, {"fused": True}), (torch.optim.SGD, {"momentum": 0.9})]
    eager.install()
    eager.manual_seed(5)
    drawn = torch.rand(3)
    torch.manual_seed(5)
    assert torch.equal(drawn, torch.rand(3)), "eager.manual_seed seeds the CPU as torch.manual_seed does"
    before = [trained(cls, **options) for cls, options in RUNS]
    assert "torch._dynamo.convert_frame" not in sys.modules, "the real torch._dynamo was imported"
    grads = [backward(grad) for grad in GRADS]
    assert "sympy" not in sys.modules, "backward imported torch.fx.experimental.symbolic_shapes"
    from torch.fx.experimental import symbolic_shapes
    assert symbolic_shapes.ShapeEnv and "sympy" in sys.modules  # another name: the real module
    real = [backward(grad) for grad in GRADS]
    assert torch.equal(grads[0], real[0]) and grads[1] == real[1] and "Mismatch in shape" in real[1]
    import torch._dynamo.utils  # a submodule: the real package replaces the stand-in
    assert "torch._dynamo.convert_frame" in sys.modules and torch._dynamo.is_compiling() is False
    after = [trained(cls, **options) for cls, options in RUNS]
    assert all(torch.equal(a, b) for run_a, run_b in zip(before, after) for a, b in zip(run_a, run_b))
    print("ok")
""")


def test_optimizers_and_backward_without_dynamo_or_sympy_to_the_same_values():
    done = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=300)
    assert done.stdout.strip() == "ok", done.stderr[-2000:]
