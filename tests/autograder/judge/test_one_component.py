"""One bug, one component: block, model and analysis are judged on what they add (their expected
values composed from the student's own dependencies), so a bug elsewhere costs them only their
integration cases; their public tests catch their own classic bugs; and three bugs that used to
pass every hidden test fail (attention dropout not passed on, attention_maps with a graph) or,
RoPE in float32, fail none of these components' tests. An attention that cannot run in float64
costs them nothing: they are checked in float32 then, where their own mistakes still fail."""
import pytest

from grader.judge import judge
from grader.spec import Status
from grader.suites import all_cases
from helpers import load_bugs

pytestmark = [pytest.mark.slow, pytest.mark.sandbox]
bugs = load_bugs()
JUDGED = ("block", "model", "analysis")
INTEGRATION = {(case.component, case.name) for case in all_cases(components=JUDGED) if case.integration}


def _variant(tmp_path, name: str, component: str, old: str, new: str):
    """correct/ with one replacement in <component>.py, as bugs.py builds its bugs."""
    bug = bugs.Bug(name, component, f"{component}.py", old=old, new=new, description="a variant.",
                   keywords=("x",))
    return bugs.materialize(bug, tmp_path)


def _failed(results) -> list:
    return [r for r in results if r.status is not Status.PASSED]


@pytest.mark.parametrize("name", ["head_reshape_without_transpose", "gelu_tanh_approximation",
                                  "sinusoidal_sin_cos_swapped", "post_norm_as_pre_norm", "no_causal_mask"])
def test_a_bug_elsewhere_costs_only_integration_cases(name, tmp_path):
    bug = bugs.BY_NAME[name]
    others = tuple(c for c in JUDGED if c != bug.component)
    lost = [f"{r.component}.{r.name}: {r.message}" for r in _failed(judge(bugs.materialize(bug, tmp_path),
                                                                          components=others))
            if (r.component, r.name) not in INTEGRATION]
    assert not lost, "\n".join(lost)


def test_a_block_that_keeps_its_dropout_from_attn_fails(tmp_path):
    submission = _variant(tmp_path, "attn_dropout_not_passed", "block",
                          "MultiHeadAttention(d_model, n_heads, dropout=dropout, rope=rope)",
                          "MultiHeadAttention(d_model, n_heads, rope=rope)")
    failed = {r.name: r.message for r in _failed(judge(submission, components=("block",)))}
    assert "dropout" in failed.get("block_sublayer_arguments", ""), failed


def test_attention_maps_with_an_autograd_graph_fails(tmp_path):
    forward = "_, per_layer = model(idx, return_weights=True)\n"
    submission = _variant(tmp_path, "attention_maps_with_grad", "analysis",
                          f"        with torch.no_grad():\n            {forward}", f"        {forward}")
    failed = {r.name: r.message for r in _failed(judge(submission, components=("analysis",)))}
    assert set(failed) == {"attention_maps_contract", "attention_maps_matches_model"}, failed
    assert all("autograd graph" in message for message in failed.values()), failed


@pytest.mark.parametrize("name", ["attn_dropout_in_eval_mode", "ffn_dropout_in_eval_mode"])
def test_dropout_left_on_in_eval_mode_elsewhere_costs_attention_maps_nothing(name, tmp_path):
    # attention_maps cannot turn off what the model's eval() leaves on: it is judged at dropout=0 then
    bug = bugs.BY_NAME[name]
    results = judge(bugs.materialize(bug, tmp_path), components=(bug.component, "analysis"))
    assert _failed(r for r in results if r.component == bug.component)
    assert not _failed(r for r in results if r.component == "analysis"), _failed(results)


@pytest.mark.parametrize(("component", "old", "new", "case"), [
    ("block", "return self.dropout(y), w", "return self.dropout(y).detach(), w", "block_gradients"),
    ("model", "x = self.tok_emb(idx)\n", "x = self.tok_emb(idx).detach()\n", "gradients"),
])
def test_a_cut_graph_fails_the_gradient_test(component, old, new, case, tmp_path):
    submission = _variant(tmp_path, f"{component}_detached", component, old, new)
    failed = {r.name: r.message for r in _failed(judge(submission, components=(component,)))}
    assert "graph" in failed.get(case, ""), failed


def test_rope_frequencies_in_float32_fail_no_test_of_these_components(tmp_path):
    submission = _variant(
        tmp_path, "rope_float32", "positional",
        "positions.to(device=x.device, dtype=torch.float64),\n                         _inv_freq(d, base, "
        "device=x.device))",
        "positions.to(device=x.device, dtype=torch.float32),\n                         _inv_freq(d, base, "
        "device=x.device).float())")
    failed = [f"{r.component}.{r.name}: {r.message}" for r in _failed(judge(submission, components=JUDGED))]
    assert not failed, "\n".join(failed)


@pytest.mark.heavy  # about 25 CPU-seconds: three components graded
def test_an_attention_that_cannot_run_in_float64_costs_these_components_nothing(tmp_path):
    submission = bugs.materialize(bugs.BY_NAME["softmax_in_float32"], tmp_path)
    failed = [f"{r.component}.{r.name}: {r.message}" for r in _failed(judge(submission, components=JUDGED))]
    assert not failed, "\n".join(failed)


@pytest.mark.heavy  # about 30 CPU-seconds: three components graded
def test_checked_in_float32_these_components_still_fail_their_own_mistakes(tmp_path):
    # the attention cannot run in float64, and the block, model and attention_maps each have mistakes
    submission = bugs.materialize(bugs.BY_NAME["softmax_in_float32"], tmp_path)
    edits = [bugs.BY_NAME[name] for name in ("post_norm_as_pre_norm", "missing_final_norm",
                                               "attention_maps_train_mode")]
    edits += [bugs.Bug("block_detached", "block", "block.py", old="return self.dropout(y), w",
                       new="return self.dropout(y).detach(), w", description="a variant.", keywords=("x",)),
              bugs.Bug("model_detached", "model", "model.py", old="x = self.tok_emb(idx)\n",
                       new="x = self.tok_emb(idx).detach()\n", description="a variant.", keywords=("x",))]
    for bug in edits:
        (submission / bug.file).write_text(bugs.apply(bug, (submission / bug.file).read_text()))
    failed = {(r.component, r.name): r.message for r in _failed(judge(submission, components=JUDGED))}
    assert "pre-norm formula (B1) instead of (B2)" in failed[("block", "block_post_norm_formula")]
    assert "graph" in failed[("block", "block_gradients")]
    assert "norm_f" in failed[("model", "m1_absolute_positions")]
    assert "graph" in failed[("model", "gradients")]
    assert "eval" in failed[("analysis", "attention_maps_matches_model")]
    assert all("float32" in failed[case] for case in [("block", "block_gradients"), ("model", "gradients")])


def test_a_near_miss_names_no_mistake_that_gives_the_expected_logits(tmp_path):
    # 3e-5 relative: between 1x and 10x the tolerance, where a variant equal to the expected logits
    # (positions added after the dropout, in eval mode) would be "matched"
    submission = _variant(tmp_path, "logits_near_miss", "model", "logits = self.lm_head(x)",
                          "logits = self.lm_head(x) * (1 + 3e-5)")
    failed = {r.name: r.message for r in _failed(judge(submission, components=("model",)))}
    assert {"m1_absolute_positions", "m1_relative_positions"} <= set(failed), failed
    assert not [message for message in failed.values() if "it matches what you get" in message], failed


def test_a_positional_function_that_crashes_on_some_widths_costs_analysis_nothing(tmp_path):
    # its sinusoidal_encoding raises ZeroDivisionError at d_model=2, which the analysis draws include
    fairseq = bugs.materialize(bugs.BY_NAME["sinusoidal_halves_fairseq_style"], tmp_path)
    assert not _failed(judge(fairseq, components=("analysis",)))
