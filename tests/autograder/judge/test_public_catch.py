"""The public tests' coverage: the gaps of issue 8 (lr_schedule with total_steps <= warmup_steps,
param_groups with frozen parameters) are drawn, and a wrong scaled_dot_product_attention costs only
its own test, whether or not the heads call it; RoPE computed in float32 fails the one public test of
the dtype rule. That every bug of bugs.py (but HIDDEN_ONLY's) loses
public points is checked with its grading in test_grade_examples.py; benchmarks/public_catch.py
measures it over every component."""
import pytest

from grader.judge import judge
from helpers import load_bugs

bugs = load_bugs()
GAPS = {
    "lr_schedule_properties": bugs.Bug(
        "schedule_divides_by_zero", "trainer", "trainer.py",
        old="decay_steps = max(1, total_steps - warmup_steps)",
        new="decay_steps = total_steps - warmup_steps",
        description="lr_schedule divides by total_steps - warmup_steps, zero when they are equal.",
        keywords=("total_steps",)),
    "param_groups_split": bugs.Bug(
        "groups_drop_frozen", "trainer", "trainer.py",
        old="for name, p in model.named_parameters():",
        new="for name, p in [(n, p) for n, p in model.named_parameters() if p.requires_grad]:",
        description="param_groups leaves out the parameters with requires_grad=False.",
        keywords=("frozen",)),
}

DELEGATING_HEADS = bugs.Bug(
    "heads_call_sdpa", "attention", "attention.py",
    old=('        scores = torch.einsum("bhqd,bhkd->bhqk", q, k) * self.scale\n'
         "        if bias is not None:\n"
         "            scores = scores + bias\n"
         "        weights = masked_softmax(scores, mask)\n"),
    new="        _, weights = scaled_dot_product_attention(q, k, v, mask, bias)\n",
    description="MultiHeadAttention's heads call scaled_dot_product_attention (not a bug).", keywords=("",))


def public_failures(submission, component: str) -> dict[str, str]:
    """The public tests of `component` that lose points on `submission`, with their messages."""
    results = judge(submission, public_only=True, components=(component,))
    return {r.name: r.message for r in results if r.score < r.max_score}


@pytest.mark.slow
@pytest.mark.sandbox
@pytest.mark.parametrize("case", GAPS, ids=lambda case: GAPS[case].name)
def test_the_coverage_gaps_are_drawn(case, tmp_path):
    bug = GAPS[case]
    failing = public_failures(bugs.materialize(bug, tmp_path), bug.component)
    assert set(failing) == {case}, failing
    assert any(word in failing[case].lower() for word in bug.keywords), failing[case]


@pytest.mark.slow
@pytest.mark.sandbox
@pytest.mark.parametrize("delegating", [False, True], ids=["own_scores", "heads_call_sdpa"])
def test_a_wrong_attention_function_costs_only_its_own_test(delegating, tmp_path):
    submission = bugs.materialize(bugs.BY_NAME["no_scale"], tmp_path)
    if delegating:
        source = submission / "attention.py"
        source.write_text(bugs.apply(DELEGATING_HEADS, source.read_text()))
    assert set(public_failures(submission, "attention")) == {"sdpa_matches_definition"}


@pytest.mark.sandbox
def test_the_public_tests_catch_rope_computed_in_float32(tmp_path):
    bug = bugs.BY_NAME["rope_float32_frequencies"]
    failing = public_failures(bugs.materialize(bug, tmp_path), bug.component)
    assert list(failing) == ["rope_computes_in_input_dtype"], failing  # one rule, one test
    assert "float32 rounding" in failing["rope_computes_in_input_dtype"]
