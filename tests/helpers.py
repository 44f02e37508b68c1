"""What the tests share: paths, tolerances, strategies and comparison helpers (`from helpers import ...`;
tests/ is on pytest's `pythonpath`). Fixtures and hooks live in conftest.py.

Seeded tensors come from the grader's own `grader.suites.strategies.randn(seed, *shape, dtype=...)`
and `random_mask(seed, *shape)`: hypothesis draws the seed and the shapes, never the floats.
"""
import json
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from types import ModuleType

import nbformat
import torch
from hypothesis import strategies as st
from torch import nn

from attacks import stop_sessions
from grader.instructor import corpus
from grader.judge import GuardedStudent, run_case
from grader.results import Result
from grader.sandbox.client import Sandbox
from grader.spec import TOLERANCES as GRADER_TOLERANCES
from grader.spec import Tolerance, Visibility
from grader.suites import Case, Suite
from grader.suites.strategies import randn

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "submissions"

DTYPES = (torch.float32, torch.float64)
TOLERANCES = {
    torch.float32: GRADER_TOLERANCES[torch.float32],
    # The reference against torch, same inputs and weights: float64 pins the formula far tighter than
    # the grader's float64 tolerance, which has to admit any correct order of operations.
    torch.float64: Tolerance(atol=1e-10, rtol=1e-9),
}

# Strategies: small sizes keep each example cheap; composites combine them.
seeds = st.integers(0, 2**31 - 1)
sizes = st.integers(1, 5)
lengths = st.integers(2, 7)
batch_shapes = st.lists(st.integers(1, 3), max_size=2).map(tuple)


@st.composite
def head_shapes(draw: st.DrawFn, even_head: bool = False) -> tuple[int, int]:
    """(d_model, n_heads) with d_model divisible by n_heads; d_head even if asked (RoPE)."""
    n_heads = draw(st.integers(1, 4))
    d_head = draw(st.sampled_from([2, 4]) if even_head else st.integers(1, 4))
    return n_heads * d_head, n_heads


def assert_close(actual: torch.Tensor, expected: torch.Tensor, *, atol: float | None = None,
                 rtol: float | None = None) -> None:
    """Same shape and dtype, values within the dtype's tolerance unless one is given.

    (torch.testing.assert_close would do, but its first call imports sympy: seconds per run.)
    """
    default = TOLERANCES[expected.dtype]
    atol = default.atol if atol is None else atol
    rtol = default.rtol if rtol is None else rtol
    assert actual.shape == expected.shape, f"shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    assert actual.dtype == expected.dtype, f"dtype {actual.dtype} != {expected.dtype}"
    error = (actual - expected).abs().nan_to_num(nan=float("inf"))
    allowed = atol + rtol * expected.abs()
    assert torch.equal(actual.isnan(), expected.isnan()) and (error <= allowed).all(), (
        f"max abs error {error.max().item():.3g} beyond atol={atol}, rtol={rtol}")


def build(cls: type[nn.Module], *args, seed: int = 0, dtype: torch.dtype = torch.float64,
          **kwargs) -> nn.Module:
    """cls(*args, **kwargs) in eval mode, with every parameter perturbed away from its init.

    Perturbing LayerNorm gains and biases (1 and 0 at init) lets comparisons tell apart
    norm1 from norm2 and a missing bias from a zero one.
    """
    torch.manual_seed(seed)
    module = cls(*args, **kwargs).to(dtype)
    with torch.no_grad():
        for i, p in enumerate(module.parameters()):
            p.add_(0.3 * randn(seed + i, *p.shape, dtype=dtype))
    return module.eval()


def additive_mask(mask: torch.Tensor | None, bias: torch.Tensor | None,
                  dtype: torch.dtype = torch.float64) -> torch.Tensor | None:
    """Our mask (True = allowed) and bias as one float bias, -inf where the mask is False:
    a float `attn_mask` as torch's attention functions add it to the scores."""
    if mask is None:
        return bias
    zeros = torch.zeros(mask.shape, dtype=dtype)
    return (zeros if bias is None else bias).masked_fill(~mask, float("-inf"))


def torch_attn_mask(mask: torch.Tensor | None, bias: torch.Tensor | None,
                    batch: int, n_heads: int) -> torch.Tensor | None:
    """Our (mask, bias) as an `attn_mask` for nn.MultiheadAttention, shaped (B * H, T, T).

    nn.MultiheadAttention reads a boolean mask the other way round (True = BLOCKED); with a
    bias, mask and bias go in together as one float mask.
    """
    combined = ~mask if bias is None and mask is not None else additive_mask(mask, bias)
    if combined is None:
        return None
    T = combined.shape[-1]
    return combined.expand(batch, n_heads, T, T).reshape(batch * n_heads, T, T)


@cache
def load_bugs() -> ModuleType:
    """examples/submissions/bugs.py."""
    return corpus.load_bugs(EXAMPLES / "bugs.py")


def autograder_root(bundle: Path, root: Path, submission: Path) -> Path:
    """/autograder as Gradescope lays it out: the bundle unzipped in source/, run_autograder copied to
    the top, the student's files in submission/, and an empty results/."""
    with zipfile.ZipFile(bundle) as archive:
        archive.extractall(root / "source")
    shutil.copy(root / "source" / "run_autograder", root / "run_autograder")
    shutil.copytree(submission, root / "submission", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "results").mkdir()
    return root


def zip_of(folder: Path, target: Path) -> Path:
    """A zip of `folder`'s files at `target`, named relative to it (as a student zips their work)."""
    with zipfile.ZipFile(target, "w") as archive:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                archive.write(path, path.relative_to(folder).as_posix())
    return target


def notebook_of(target: Path, files: dict[str, str]) -> Path:
    """A notebook at `target` with one `%%writefile NAME` cell per file."""
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(f"%%writefile {name}\n{text}")
                      for name, text in files.items()]
    nbformat.write(notebook, target)
    return target


def as_case(fn: Callable, timeout: float = 30.0) -> Case:
    """A Case of fn, registered as the suites register theirs (under GRADER_SETTINGS)."""
    suite = Suite("quiz", Visibility.PUBLIC)
    suite.case(1.0, timeout=timeout)(fn)
    return suite.cases[0]


def run_on_solutions(case: Case, tmp_path: Path, submission: str = "solutions") -> Result:
    """One case run against a submission of this repository (the reference by default) in a sandbox."""
    sandbox = Sandbox(ROOT / submission, tmp_path)
    try:
        return run_case(case, GuardedStudent(sandbox))
    finally:
        sandbox.close()


@contextmanager
def local_dask_cluster(folder: Path, *, workers: int) -> Iterator[str]:
    """A real Dask scheduler on a port of 127.0.0.1 it picks and `workers` workers of one thread each, every
    process in a folder of its own (nothing of the class on their paths) and a session of its own, its log
    beside it; yields the scheduler's address once the workers are in, and stops them all at the end."""
    address_file = folder / "scheduler.json"
    dask = [sys.executable, "-m", "dask"]
    processes: list[subprocess.Popen] = []

    def start(command: list[str], name: str) -> None:
        (folder / name).mkdir()
        processes.append(subprocess.Popen(command, cwd=folder / name, stdout=subprocess.DEVNULL,
                                          stderr=(folder / f"{name}.log").open("w"), start_new_session=True))

    try:
        start([*dask, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
               "--scheduler-file", str(address_file)], "scheduler")
        deadline = time.monotonic() + 60
        while not address_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        for name in (f"worker-{number}" for number in range(1, workers + 1)):
            start([*dask, "worker", "--scheduler-file", str(address_file), "--nthreads", "1", "--no-nanny",
                   "--no-dashboard", "--local-directory", str(folder / name)], name)
        address = json.loads(address_file.read_text())["address"]
        from distributed import Client
        with Client(address, timeout="60s") as client:
            client.wait_for_workers(workers, timeout=120)
        yield address
    finally:
        stop_sessions(processes)
