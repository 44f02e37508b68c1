"""Messages true to what happened: NaN is called NaN, a mistake is named only when the value
matches it, a float32-sized miss is told from a cut graph, and RoPE computed in float32 fails
exactly one test, the one that says so.

The end-to-end tests grade small synthetic submissions: a copy of solutions/ with one line edited
(as examples/submissions/bugs.py does for correct/)."""
import ast
import shutil
from pathlib import Path

import nbformat
import pytest
import torch

from grader.judge import GuardedStudent, judge, run_case
from grader.results import Result
from grader.sandbox.client import Sandbox
from grader.spec import COMPONENTS, GRADIENT_TOLERANCE, Status
from grader.submission import unpack
from grader.suites import all_cases
from grader.suites.checks import (
    Failed,
    expect_close,
    expect_dropout,
    expect_grad_close,
    expect_tensor,
    telling,
)
from helpers import EXAMPLES, ROOT, load_bugs

CUT = ".detach()"
FLOAT32 = "float32 rounding"


def failure(check, *args, **kwargs) -> str:
    with pytest.raises(Failed) as raised:
        check(*args, **kwargs)
    return str(raised.value)


# ---------------------------------------------------------------- checks.py on its own

def test_nan_is_reported_as_nan_not_as_a_sign_or_sum():
    weights = torch.tensor([[0.5, 0.5], [float("nan"), 0.2]], dtype=torch.float64)
    message = failure(expect_tensor, weights, (2, 2), "weights", finite=True)
    assert "nan at index (1, 0)" in message and "1 of 4 entries" in message
    message = failure(expect_close, weights, torch.full((2, 2), 0.5, dtype=torch.float64), "weights",
                      hint="is the softmax applied?")
    assert "nan at index (1, 0)" in message and "differs" not in message
    assert expect_tensor(weights, (2, 2), "weights") is weights  # finite only when asked


def test_a_mistake_is_named_only_when_it_explains_the_value():
    expected = torch.linspace(1, 2, 6, dtype=torch.float64)
    near_miss = expected + 3e-5  # 3x the default tolerance: no mistake explains that
    message = failure(expect_close, near_miss, expected, "y", hint="check (F1)",
                      diagnoses={"a mistake that does not change y here": expected.clone()})
    assert "it matches" not in message and message.endswith("— check (F1)")
    mistake = expected * 1.1
    message = failure(expect_close, mistake + 1e-7, expected, "y", hint="check (F1)",
                      diagnoses={"a mistake that does not change y here": expected.clone(),
                                 "y is scaled by 1.1": mistake})
    assert message.endswith("it matches what you get when y is scaled by 1.1")
    # of two mistakes within the matching tolerance, the nearer is named; two equal ones both
    message = failure(expect_close, mistake, expected, "y",
                      diagnoses={"y is nearly scaled by 1.1": mistake + 5e-6, "y is scaled by 1.1": mistake})
    assert message.endswith("it matches what you get when y is scaled by 1.1")
    message = failure(expect_close, mistake, expected, "y",
                      diagnoses={"A": mistake, "B": mistake.clone()})
    assert message.endswith("it matches what you get when A, or when B")


def test_float64_comparisons_name_a_float32_sized_miss():
    expected = torch.linspace(-2, 3, 8, dtype=torch.float64)
    rounded = expected.float().double() + 1e-7
    message = failure(expect_close, rounded, expected, "out", atol=1e-10, rtol=1e-10, hint="(P3)",
                      float64=True)
    assert FLOAT32 in message and "(P3)" not in message
    message = failure(expect_close, expected + 0.1, expected, "out", atol=1e-10, rtol=1e-10, hint="(P3)",
                      float64=True)
    assert FLOAT32 not in message and message.endswith("— (P3)")
    message = failure(expect_close, rounded, expected, "out", atol=1e-10, rtol=1e-10, hint="(P3)")
    assert FLOAT32 not in message  # only where the comparison is meant to be float64


def test_gradient_messages_tell_rounding_from_a_cut_graph():
    expected = torch.linspace(-1, 1, 10, dtype=torch.float64).reshape(2, 5)
    hint = "the gradients follow from (F1)"
    message = failure(expect_grad_close, expected * (1 + 3e-7) + 3e-7, expected, "d(y)/d(x)", hint=hint)
    assert FLOAT32 in message and CUT not in message and hint not in message
    cut = expected.clone()
    cut[1, 3:] = 0.0
    message = failure(expect_grad_close, cut, expected, "d(y)/d(x)", hint=hint)
    assert "is 0 at index (1, 3)" in message and "2 of 10 entries" in message and FLOAT32 not in message
    assert CUT not in message  # nothing confirms a cut graph: a wrong formula can be constant too
    marked = []
    message = failure(expect_grad_close, cut, expected, "d(y)/d(x)", hint=hint,
                      moves=lambda entries: marked.append(entries) or True)
    assert CUT in message and marked[0].nonzero().tolist() == [[1, 3], [1, 4]]
    message = failure(expect_grad_close, cut, expected, "d(y)/d(x)", moves=lambda entries: False)
    assert CUT not in message and "does not change when they move" in message
    assert CUT not in failure(expect_grad_close, None, expected, "d(y)/d(x)", hint=hint)
    message = failure(expect_grad_close, None, expected, "d(y)/d(x)", moves=lambda entries: True)
    assert "missing" in message and CUT in message
    for wrong in (expected * 1.5, expected * (1 + 4e-5)):  # 4e-5: GELU's tanh approximation, not rounding
        message = failure(expect_grad_close, wrong, expected, "d(y)/d(x)", hint=hint)
        assert message.endswith(hint) and CUT not in message and FLOAT32 not in message
    expect_grad_close(expected + 1e-12, expected, "d(y)/d(x)", tolerance=GRADIENT_TOLERANCE)


def test_dropout_readings_are_named_only_when_they_fit():
    kept = torch.linspace(0.5, 2.0, 2000, dtype=torch.float64).reshape(40, 50)
    drop = torch.rand(kept.shape, generator=torch.Generator().manual_seed(0)) < 0.3
    where = "between act and fc2"
    expect_dropout(torch.where(drop, 0.0, kept / 0.7), kept, 0.3, "h", where)
    message = failure(expect_dropout, kept.clone(), kept, 0.3, "h", where)
    assert "nothing is dropped" in message and where in message
    message = failure(expect_dropout, torch.where(drop, 0.0, kept), kept, 0.3, "h", where)
    assert "not scaled by 1/(1-p)" in message
    message = failure(expect_dropout, torch.where(drop, 0.0, kept / 0.9), kept, 0.3, "h", where)
    assert "1/(1-0.1)" in message
    c = 1.5
    after_bias = torch.where(drop, 0.0, (kept + c) / 0.7) - c
    message = failure(expect_dropout, after_bias, kept, 0.3, "h", where,
                      {"the dropout comes after the bias": ((kept + c) / 0.7 - c, torch.full_like(kept, -c))})
    assert "matches what you get when the dropout comes after the bias" in message
    too_many = torch.rand(kept.shape, generator=torch.Generator().manual_seed(1)) < 0.5
    message = failure(expect_dropout, torch.where(too_many, 0.0, kept / 0.7), kept, 0.3, "h", where)
    assert "expected about 30%" in message


def test_a_degenerate_counterexample_leads_with_a_typical_input():
    typical = {"n": 16, "delta": 3, "d": 8}

    @telling(lambda d, **_: d <= 2, typical)
    def check(student, n, delta, d):
        if d == 2:
            raise Failed("division by zero at d=2")
        if student == "buggy" and delta:  # any table passes a shift by 0: only a fresh delta shows this
            raise Failed("the layout is [sin | cos] halves")

    assert check("right", n=16, delta=3, d=8) is None
    message = failure(check, "buggy", n=2, delta=0, d=2)
    assert message.startswith("on a typical input (n=16, delta=3, d=8): the layout is [sin | cos] halves. "
                              "It fails on an edge case too"), message
    message = failure(check, "right", n=2, delta=0, d=2)
    assert message.startswith("division by zero at d=2. On a typical input (n=16, delta=3, d=8) this test "
                              "passes: only this edge case fails"), message
    with pytest.raises(Failed, match="halves$"):
        check("buggy", n=16, delta=1, d=8)  # not degenerate: the message is its own


def test_every_argument_needs_a_typical_value():
    with pytest.raises(TypeError, match="no typical value for delta of check"):
        @telling(lambda d, **_: d <= 2, {"n": 16, "d": 8})
        def check(student, n, delta, d):
            pass


# ---------------------------------------------------------------- the suites, end to end

def edited_solutions(tmp_path: Path, file: str, old: str, new: str) -> Path:
    """A copy of solutions/ with `old` (exactly once in `file`) replaced by `new`."""
    submission = tmp_path / "submission"
    shutil.copytree(ROOT / "solutions", submission, ignore=shutil.ignore_patterns("__pycache__"))
    text = (submission / file).read_text()
    assert text.count(old) == 1, old
    (submission / file).write_text(text.replace(old, new))
    return submission


def run_cases(submission: Path, tmp_path: Path, component: str, *names: str) -> dict[str, Result]:
    cases = [case for case in all_cases(components=(component,)) if case.name in names]
    assert len(cases) == len(names)
    sandbox = Sandbox(submission, tmp_path)
    try:
        return {case.name: run_case(case, GuardedStudent(sandbox)) for case in cases}
    finally:
        sandbox.close()


SCORES = "scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))"
SOFTMAX = "weights = torch.softmax(scores.masked_fill(dead, 0.0), dim=-1)"


@pytest.mark.sandbox
def test_nan_weights_are_called_nan(tmp_path):
    # dividing by sqrt(0): +-inf scores, NaN weights (inf - inf in the softmax)
    submission = edited_solutions(tmp_path, "attention.py", SCORES, SCORES.replace("q.size(-1))", "0)"))
    results = run_cases(submission, tmp_path, "attention", "sdpa_rows_are_distributions",
                        "sdpa_matches_reference")
    # Which of +-inf a drawn example's score is decides whether its row is NaN or treated as dead:
    # both fail, NaN is called NaN where it appears, and never "negative".
    assert all(r.status is Status.FAILED and "negative" not in r.message for r in results.values())
    assert any("weights is nan at index" in r.message for r in results.values()), results


@pytest.mark.sandbox
def test_a_float32_softmax_is_told_from_a_cut_graph(tmp_path):
    float32 = edited_solutions(tmp_path / "float32", "attention.py", SOFTMAX,
                               SOFTMAX.replace("dim=-1)", "dim=-1, dtype=torch.float32).to(scores.dtype)"))
    results = run_cases(float32, tmp_path / "float32", "attention", "sdpa_matches_reference",
                        "sdpa_gradients")
    assert results["sdpa_matches_reference"].status is Status.PASSED  # values: float32 rounding is fine
    message = results["sdpa_gradients"].message
    assert FLOAT32 in message and CUT not in message, message
    detached = edited_solutions(tmp_path / "detached", "attention.py", "return weights @ v, weights",
                                "return weights @ v.detach(), weights")
    message = run_cases(detached, tmp_path / "detached", "attention", "sdpa_gradients")[
        "sdpa_gradients"].message
    assert "d(out)/d(v) is missing" in message and CUT in message and FLOAT32 not in message, message


@pytest.mark.sandbox
def test_mha_hints_name_only_the_cause_that_matches(tmp_path):
    # a wrong scale in (A1), which MultiHeadAttention calls: neither a layout nor a dropout mistake
    wrong_scale = edited_solutions(tmp_path / "scale", "attention.py", SCORES,
                                   SCORES.replace("math.sqrt(q.size(-1))", "math.sqrt(q.size(-1) * 2)"))
    results = run_cases(wrong_scale, tmp_path / "scale", "attention", "mha_matches_reference", "mha_dropout")
    for result in results.values():
        assert result.status is Status.FAILED
        assert "transpose" not in result.message and "must be off in eval mode" not in result.message, (
            result.message)
    assert "differs with dropout=0.0 too" in results["mha_dropout"].message
    split = "return t.view(B, T, self.n_heads, self.d_head).transpose(1, 2)"
    viewed = edited_solutions(tmp_path / "view", "attention.py", split,
                              "return t.reshape(B, self.n_heads, T, self.d_head)")
    message = run_cases(viewed, tmp_path / "view", "attention", "mha_matches_reference")[
        "mha_matches_reference"].message
    assert "it matches what you get when the heads are split with .view(B, n_heads, T, d_head)" in message
    eval_dropout = edited_solutions(tmp_path / "dropout", "attention.py", "heads = self.dropout(weights) @ v",
                                    "heads = torch.nn.functional.dropout(weights, self.dropout.p) @ v")
    message = run_cases(eval_dropout, tmp_path / "dropout", "attention", "mha_dropout")["mha_dropout"].message
    assert "dropout must be off in eval mode" in message, message


@pytest.mark.slow
@pytest.mark.sandbox
def test_rope_in_float32_fails_only_the_dtype_test(tmp_path):
    bug = next(b for b in load_bugs().BUGS if b.name == "rope_float32_frequencies")
    submission = load_bugs().materialize(bug, tmp_path)
    components = tuple(c for c in COMPONENTS if c not in ("model", "analysis"))
    failed = {r.name: r.message for r in judge(submission, components=components)
              if r.status is not Status.PASSED}
    assert list(failed) == ["rope_computes_in_input_dtype"], failed
    assert FLOAT32 in failed["rope_computes_in_input_dtype"]


MASK = ('    if mask is not None:\n        scores = torch.where(mask, scores, float("-inf"))\n'
        "    # Softmax over a row of only -inf is 0/0 = NaN: give such rows zero weight instead.\n"
        "    dead = torch.isneginf(scores).all(dim=-1, keepdim=True)\n"
        "    weights = torch.softmax(scores.masked_fill(dead, 0.0), dim=-1).masked_fill(dead, 0.0)\n")


@pytest.mark.sandbox
def test_each_hint_names_a_cause_only_when_its_own_check_confirms_it(tmp_path):
    after = edited_solutions(tmp_path / "after", "attention.py", MASK,
                             "    weights = torch.softmax(scores, dim=-1)\n"
                             "    if mask is not None:\n        weights = weights.masked_fill(~mask, 0.0)\n")
    message = run_cases(after, tmp_path / "after", "attention", "sdpa_rows_are_distributions")[
        "sdpa_rows_are_distributions"].message
    assert "dim=-1" not in message and "query axis" not in message and "zeroed afterwards" in message, message
    over_queries = edited_solutions(tmp_path / "queries", "attention.py", MASK, MASK.replace(
        "torch.softmax(scores.masked_fill(dead, 0.0), dim=-1)",
        "torch.softmax(scores, dim=-2).nan_to_num(0.0)"))
    results = run_cases(over_queries, tmp_path / "queries", "attention", "sdpa_rows_are_distributions",
                        "sdpa_gradients")
    assert "a softmax over the query axis (dim=-2" in results["sdpa_rows_are_distributions"].message
    message = results["sdpa_gradients"].message
    assert results["sdpa_gradients"].status is Status.FAILED and CUT not in message, message


FAIRSEQ_TABLE = '''def sinusoidal_encoding(n_positions, d_model, base=10000.0):
    """As fairseq's SinusoidalPositionalEmbedding.get_embedding: [sin | cos] halves."""
    half_dim = d_model // 2
    emb = math.log(base) / (half_dim - 1)
    emb = torch.exp(torch.arange(half_dim, dtype=torch.float) * -emb)
    emb = torch.arange(n_positions, dtype=torch.float).unsqueeze(1) * emb.unsqueeze(0)
    return torch.cat([torch.sin(emb), torch.cos(emb)], dim=1).view(n_positions, -1)
'''
"""fairseq's layout, written here: it divides by zero at d_model=2, where hypothesis shrinks to."""
GET_LR = '''def lr_schedule(it, *, max_lr, warmup_steps, total_steps, min_lr=0.0):
    """As nanoGPT's get_lr: linear warmup, then cosine decay down to min_lr."""
    if it < warmup_steps:
        return max_lr * it / warmup_steps
    if it > total_steps:
        return min_lr
    decay_ratio = (it - warmup_steps) / (total_steps - warmup_steps)
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
    return min_lr + coeff * (max_lr - min_lr)
'''
"""nanoGPT's get_lr, written here: its warmup peaks one step late, and warmup_steps = total_steps divides
by zero."""


def with_function(tmp_path: Path, file: str, source: str) -> Path:
    """A copy of examples/submissions/correct with the top-level function that `source` defines replaced."""
    submission = tmp_path / "submission"
    shutil.copytree(EXAMPLES / "correct", submission, ignore=shutil.ignore_patterns("__pycache__"))
    name = ast.parse(source).body[0].name
    lines = (submission / file).read_text().splitlines(keepends=True)
    found = next(node for node in ast.parse("".join(lines)).body
                 if isinstance(node, ast.FunctionDef) and node.name == name)
    before, after = lines[:found.lineno - 1], lines[found.end_lineno:]
    (submission / file).write_text("".join(before) + source + "".join(after))
    return submission


def first_sentence(message: str) -> str:
    return message.split(". ", 1)[0]


@pytest.mark.sandbox
@pytest.mark.parametrize(("file", "source", "component", "names", "difference"), [
    ("positional.py", FAIRSEQ_TABLE, "positional",
     ("sinusoidal_table_properties", "shift_rotation_moves_rows", "sinusoidal_matches_reference"),
     "[sin | cos] halves"),
    ("trainer.py", GET_LR, "trainer",
     ("lr_schedule_properties", "lr_schedule_matches_definition", "lr_schedule_matches_reference"),
     "one step late"),
], ids=["fairseq_table", "nanogpt_get_lr"])
def test_a_message_leads_with_the_difference_a_typical_input_shows(tmp_path, file, source, component, names,
                                                                  difference):
    submission = with_function(tmp_path, file, source)
    results = run_cases(submission, tmp_path, component, *names)
    for result in results.values():
        assert result.status is Status.FAILED, result
        assert difference in first_sentence(result.message), result.message
        assert "only this edge case fails" not in result.message, result.message
    crashed = [r.message for r in results.values() if "ZeroDivisionError" in r.message]
    assert crashed, results  # hypothesis shrinks to the division by zero: it is said second
    for message in crashed:
        assert message.index(difference) < message.index("It also fails on an edge case: your code raised "
                                                         "ZeroDivisionError"), message


@pytest.mark.sandbox
def test_a_file_a_later_notebook_cell_replaced_is_said_once_naming_the_cell_graded(tmp_path):
    cells = [f"%%writefile {c}.py\n{(ROOT / 'solutions' / f'{c}.py').read_text()}" for c in COMPONENTS]
    cells.append("%%writefile attention.py\nimport torch\n\n\ndef causal_mask(n, device=None):\n"
                 "    raise NotImplementedError\n")  # a scratch cell that replaces the whole file
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in cells])
    nbformat.write(notebook, tmp_path / "lab.ipynb")
    (tmp_path / "files").mkdir()
    submission = unpack(tmp_path / "lab.ipynb", tmp_path / "files")
    messages = {r.status: r.message for r in judge(submission, public_only=True, components=("attention",))}
    last = len(cells)
    said = (f"attention.py is what cell {last} of your notebook writes: a `%%writefile attention.py` cell "
            f"replaces the whole file, so what cell 1 wrote is not graded, and cell {last}'s attention.py ")
    assert messages == {Status.FAILED: said + "lacks names the tests call (to add to a file, start the cell "
                                              "with `%%writefile -a attention.py`)",
                        Status.NOT_ATTEMPTED: said + "is still a stub (to add to a file, start the cell with "
                                                     "`%%writefile -a attention.py`)"}, messages


@pytest.mark.sandbox
def test_a_bare_not_implemented_error_says_where(tmp_path):
    submission = edited_solutions(tmp_path, "attention.py", "    return weights @ v, weights",
                                  "    raise NotImplementedError")
    result = run_cases(submission, tmp_path, "attention", "sdpa_shapes_and_dtype")["sdpa_shapes_and_dtype"]
    assert result.status is Status.NOT_ATTEMPTED
    assert result.message.startswith("not attempted: NotImplementedError raised (attention.py, line "), result
