"""The example submissions: correct/ matches the reference, and every bug in bugs.py applies
cleanly and is caught by a reference comparison of its own component (crashes are only
applied, never run here)."""
import itertools
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from grader.sandbox.worker.loader import import_module, import_package
from grader.submission import MODULES
from helpers import EXAMPLES, load_bugs

CORRECT = EXAMPLES / "correct"
bugs = load_bugs()
WRONG = [b for b in bugs.BUGS if not b.crash]
CRASHES = [b for b in bugs.BUGS if b.crash]


def load(directory: Path) -> SimpleNamespace:
    """Every component's module of a submission directory, imported as a fresh package."""
    package = import_package(directory, f"example_sub_{directory.name}_{uuid.uuid4().hex[:8]}")
    return SimpleNamespace(**{name: import_module(package, name) for name in MODULES})


def load_reference() -> SimpleNamespace:
    import solutions
    return SimpleNamespace(**{name: import_module(solutions, name) for name in MODULES})


REF = load_reference()


# ------------------------------------------------------------------ comparison helpers
def close(actual, expected, atol=1e-10, rtol=1e-7):
    torch.testing.assert_close(actual, expected, atol=atol, rtol=rtol, equal_nan=False)


def expect_value_error(fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except ValueError:
        return
    raise AssertionError(f"{getattr(fn, '__name__', fn)} did not raise ValueError")


def twin(ref_cls, sub_cls, *args, **kwargs):
    """A reference module and the submission's, holding the same float64 state dict.

    Every parameter is perturbed away from its init, so norm1 and norm2 (both 1 and 0 at
    init) can be told apart.
    """
    torch.manual_seed(0)
    ref = ref_cls(*args, **kwargs).double()
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.2 * torch.randn_like(p))
    sub = sub_cls(*args, **kwargs).double()
    sub.load_state_dict(ref.state_dict())  # strict: the state-dict keys must match
    return ref.eval(), sub.eval()


def same_seed(module, *args, **kwargs):
    """module(*args, **kwargs) right after seeding: two modules that drop the same tensors in the same
    order (nn.Dropout, as the contract places it) drop the same entries."""
    torch.manual_seed(9)
    return module(*args, **kwargs)


def rand(*shape, requires_grad=False):
    return torch.randn(*shape, dtype=torch.float64, requires_grad=requires_grad)


# ------------------------------------------------------------------ per-component checks
def check_attention(sub, ref):
    for n in range(1, 6):
        assert torch.equal(sub.attention.causal_mask(n), ref.attention.causal_mask(n))
    torch.manual_seed(1)
    mask = torch.rand(5, 6) > 0.4
    mask[0] = False  # a fully masked row
    bias = rand(3, 5, 6)
    bias[1, 2] = float("-inf")  # a row with no allowed key through the bias
    shapes = [((2, 3, 5, 4), (2, 3, 6, 4), (2, 3, 6, 3)), ((1, 3, 5, 4), (2, 1, 6, 4), (2, 1, 6, 2))]
    for (sq, sk, sv), m, b in itertools.product(shapes, (None, mask), (None, bias)):
        outs, grads = [], []
        for impl in (sub, ref):
            torch.manual_seed(2)
            q, k, v = (rand(*sq, requires_grad=True), rand(*sk, requires_grad=True),
                       rand(*sv, requires_grad=True))
            out, w = impl.attention.scaled_dot_product_attention(q, k, v, mask=m, bias=b)
            (out.square().sum() + w.square().sum()).backward()
            outs.append((out, w))
            grads.append((q.grad, k.grad, v.grad))
        close(outs[0], outs[1])
        close(grads[0], grads[1])
    T, causal = 7, ref.attention.causal_mask(7)
    for rope, (m, b) in itertools.product((False, True), [(None, None), (causal, None),
                                                           (causal, rand(4, T, T))]):
        r, s = twin(ref.attention.MultiHeadAttention, sub.attention.MultiHeadAttention, 16, 4, rope=rope)
        x = rand(2, T, 16)
        close(s(x, m, b, return_weights=True), r(x, m, b, return_weights=True))
        close(s(x, mask=m, bias=b), r(x, mask=m, bias=b))
    r, s = twin(ref.attention.MultiHeadAttention, sub.attention.MultiHeadAttention, 12, 3, bias=False)
    x = rand(3, 4, 12)
    close(s(x), r(x))
    r, s = twin(ref.attention.MultiHeadAttention, sub.attention.MultiHeadAttention, 16, 4, dropout=0.5)
    _, w_ref = r(x := rand(2, T, 16), causal, return_weights=True)
    _, w_sub = s.train()(x, causal, return_weights=True)
    close(w_sub, w_ref)  # weights are taken before dropout
    close(s.eval()(x, causal), r.eval()(x, causal))  # dropout is off in eval mode
    close(same_seed(s.train(), x, causal), same_seed(r.train(), x, causal))  # and where (A1) puts it
    expect_value_error(sub.attention.MultiHeadAttention, 10, 4)
    expect_value_error(sub.attention.MultiHeadAttention, 12, 4, rope=True)


def check_positional(sub, ref):
    pos_s, pos_r = sub.positional, ref.positional
    for n, d, base in [(50, 16, 10000.0), (7, 6, 100.0)]:
        table = pos_s.sinusoidal_encoding(n, d, base=base)
        assert table.dtype == torch.float32 and table.shape == (n, d)
        close(table, pos_r.sinusoidal_encoding(n, d, base=base), atol=1e-6, rtol=1e-5)
    expect_value_error(pos_s.sinusoidal_encoding, 4, 7)
    for delta, d in [(3, 8), (-2, 12)]:
        close(pos_s.shift_rotation(delta, d), pos_r.shift_rotation(delta, d), atol=1e-6, rtol=1e-5)
    x = rand(2, 3, 6, 8)
    close(pos_s.apply_rope(x), pos_r.apply_rope(x))
    positions = torch.tensor([3, 1, 4, 1, 5, 9])
    close(pos_s.apply_rope(x, positions, base=100.0), pos_r.apply_rope(x, positions, base=100.0))
    x32 = x.float()
    close(pos_s.apply_rope(x32), pos_r.apply_rope(x32), atol=1e-6, rtol=1e-5)
    expect_value_error(pos_s.apply_rope, rand(2, 5))
    for n in range(1, 13):
        close(pos_s.alibi_slopes(n), pos_r.alibi_slopes(n), atol=1e-7, rtol=1e-6)
    close(pos_s.alibi_bias(6, 5, 7), pos_r.alibi_bias(6, 5, 7), atol=1e-6, rtol=1e-6)
    close(pos_s.alibi_bias(4, 5), pos_r.alibi_bias(4, 5), atol=1e-6, rtol=1e-6)


def check_feedforward(sub, ref):
    for activation in ("gelu", "relu"):
        r, s = twin(ref.feedforward.FeedForward, sub.feedforward.FeedForward, 8, 32, activation=activation)
        for shape in [(2, 3, 8), (5, 8)]:
            x = 2 * rand(*shape)
            close(s(x), r(x))
    r, s = twin(ref.feedforward.FeedForward, sub.feedforward.FeedForward, 8, 32, dropout=0.3)
    x = rand(4, 5, 8)
    close(s.eval()(x), r.eval()(x))
    close(same_seed(s.train(), x), same_seed(r.train(), x))
    expect_value_error(sub.feedforward.FeedForward, 8, 32, activation="swish")


def check_block(sub, ref):
    T = 6
    causal = ref.attention.causal_mask(T)
    for norm, rope in itertools.product(("pre", "post"), (False, True)):
        r, s = twin(ref.block.TransformerBlock, sub.block.TransformerBlock, 16, 4, 32, norm=norm, rope=rope)
        x = rand(2, T, 16)
        close(s(x, causal, return_weights=True), r(x, causal, return_weights=True))
        b = rand(4, T, T)
        close(s(x, mask=causal, bias=b), r(x, mask=causal, bias=b))
    for norm in ("pre", "post"):
        r, s = twin(ref.block.TransformerBlock, sub.block.TransformerBlock, 16, 4, 32, dropout=0.3, norm=norm,
                    rope=True, activation="relu")
        x = rand(2, T, 16)
        close(s.eval()(x, causal), r.eval()(x, causal))
        close(same_seed(s.train(), x, causal), same_seed(r.train(), x, causal))
    expect_value_error(sub.block.TransformerBlock, 16, 4, 32, norm="sandwich")


def check_model(sub, ref):
    lm_r, lm_s = ref.model.TinyTransformerLM, sub.model.TinyTransformerLM
    kwargs = dict(d_model=16, n_heads=4, n_layers=2, d_ff=32, max_len=12)
    idx = torch.randint(11, (2, 9), generator=torch.Generator().manual_seed(3))
    for pos, norm in itertools.product(("sinusoidal", "learned", "rope", "alibi", "none"), ("pre", "post")):
        r, s = twin(lm_r, lm_s, 11, pos_encoding=pos, norm=norm, **kwargs)
        close(s(idx, return_weights=True), r(idx, return_weights=True))
        close(s(idx), r(idx))
    r, s = twin(lm_r, lm_s, 11, pos_encoding="sinusoidal", **kwargs)
    long = torch.randint(11, (1, 15))
    close(s(long), r(long))
    r, s = twin(lm_r, lm_s, 11, pos_encoding="sinusoidal", dropout=1.0, **kwargs)
    close(s.train()(idx), r.train()(idx))  # p=1 dropout is deterministic: all zeros
    _, s = twin(lm_r, lm_s, 11, pos_encoding="learned", **kwargs)
    expect_value_error(s, long)
    expect_value_error(lm_s, 11, pos_encoding="absolute")


def _batches(n_batches=4, seed=5):
    gen = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n_batches):
        x = torch.randint(11, (3, 8), generator=gen)
        y = torch.randint(11, (3, 8), generator=gen)
        y[:, : 2 * i + 1] = -100  # a different number of scored positions per batch
        out.append((x, y))
    return out


def check_trainer(sub, ref):
    tr_s, tr_r = sub.trainer, ref.trainer
    for warmup, total, min_lr in [(0, 10, 0.0), (3, 10, 1e-4), (5, 5, 0.0), (4, 20, 2e-4), (6, 60, 1e-3)]:
        for step in range(total + 6):
            kw = dict(max_lr=1e-2, warmup_steps=warmup, total_steps=total, min_lr=min_lr)
            assert tr_s.lr_schedule(step, **kw) == pytest.approx(tr_r.lr_schedule(step, **kw), abs=1e-12)
    model = ref.model.TinyTransformerLM(11, d_model=16, d_ff=32, max_len=12, pos_encoding="learned")
    groups_s, groups_r = tr_s.param_groups(model, 0.3), tr_r.param_groups(model, 0.3)
    assert [g["weight_decay"] for g in groups_s] == [g["weight_decay"] for g in groups_r]
    assert ([{id(p) for p in g["params"]} for g in groups_s]
            == [{id(p) for p in g["params"]} for g in groups_r])
    # sharp: lm_head's weights times 30 give gradient norms well above 5 (clipping shows)
    for kw, sharp in [(dict(warmup_steps=2, grad_clip=0.05, min_lr=1e-4), 1.0),
                      (dict(grad_clip=None, weight_decay=0.5), 1.0),
                      (dict(grad_clip=None), 30.0), (dict(grad_clip=5.0), 30.0)]:
        models = []
        for impl in (sub, ref):
            torch.manual_seed(4)
            lm = ref.model.TinyTransformerLM(11, d_model=16, d_ff=32, max_len=12).double()
            with torch.no_grad():
                lm.lm_head.weight.mul_(sharp)
            history = impl.trainer.train(lm, iter(_batches()), steps=4, max_lr=1e-2, **kw)
            assert not lm.training
            models.append((lm, history))
        (lm_s, h_s), (lm_r, h_r) = models
        assert set(h_s) >= {"loss", "lr", "grad_norm"}
        for key in ("loss", "lr", "grad_norm"):
            assert h_s[key] == pytest.approx(h_r[key], rel=1e-7, abs=1e-12), key
        close(lm_s.state_dict(), lm_r.state_dict(), atol=1e-9, rtol=1e-7)
    torch.manual_seed(6)
    lm = ref.model.TinyTransformerLM(11, d_model=16, d_ff=32, max_len=12).double()
    got, want = tr_s.evaluate(lm, _batches(seed=7)), tr_r.evaluate(lm, _batches(seed=7))
    assert got["loss"] == pytest.approx(want["loss"], rel=1e-9)
    assert got["accuracy"] == pytest.approx(want["accuracy"], rel=1e-9)


def check_analysis(sub, ref):
    an_s, an_r = sub.analysis, ref.analysis
    torch.manual_seed(8)
    causal = ref.attention.causal_mask(7)
    weights = torch.softmax(rand(2, 3, 7, 7).masked_fill(~causal, float("-inf")), dim=-1)
    close(an_s.attention_entropy(weights), an_r.attention_entropy(weights))
    close(an_s.previous_token_score(weights), an_r.previous_token_score(weights))
    for period in (2, 3):
        close(an_s.induction_score(weights, period), an_r.induction_score(weights, period))
    lm = ref.model.TinyTransformerLM(11, d_model=16, d_ff=32, max_len=12, dropout=0.5).double()
    idx = torch.randint(11, (2, 9))
    want = an_r.attention_maps(lm, idx)
    got = an_s.attention_maps(lm.train(), idx)
    assert lm.training and not got.requires_grad
    close(got, want)


def check_quiz(sub, ref):
    assert sub.quiz.ANSWERS == ref.quiz.ANSWERS


CHECKS = {name: globals()[f"check_{name}"] for name in MODULES if f"check_{name}" in globals()}
"""Each component's comparison of correct/ with the reference, in this process. A new component has none
until its author writes check_<name> (docs/authoring.md): its tests say so, and its bugs are still graded
by test_grade_examples and `grader selftest`."""


def _check(component: str):
    if component not in CHECKS:
        pytest.skip(f"no check_{component} in this file yet (docs/authoring.md, 'A new component')")
    return CHECKS[component]


# ------------------------------------------------------------------ tests
@pytest.fixture(scope="module")
def correct():
    return load(CORRECT)


@pytest.fixture(scope="module")
def materialized(tmp_path_factory):
    root = tmp_path_factory.mktemp("bugs")
    return {path.name: path for path in bugs.materialize_all(root)}


@pytest.mark.parametrize("component", MODULES)
def test_correct_submission_matches_reference(correct, component):
    _check(component)(correct, REF)


def test_correct_submission_calls_no_builtin_attention():
    banned = ("F.scaled_dot_product_attention", "functional.scaled_dot_product_attention",
              "MultiheadAttention", "nn.Transformer")
    for path in CORRECT.glob("*.py"):
        assert not [word for word in banned if word in path.read_text()], path.name


def test_manifest_is_well_formed():
    names = [b.name for b in bugs.BUGS]
    assert len(names) == len(set(names)) and len(WRONG) >= 30
    assert {b.component for b in WRONG} == set(MODULES)
    for bug in bugs.BUGS:
        bugs.validate(bug)
        assert bug.file == f"{bug.component}.py"
        assert bug.description.strip() and bug.old != bug.new
    assert {"hang", "exit", "syntax_error", "import_time_error", "print_flood"} <= {b.name for b in CRASHES}


@pytest.mark.parametrize("bug", bugs.BUGS, ids=lambda b: b.name)
def test_bug_applies_to_exactly_one_file(bug, materialized):
    assert (CORRECT / bug.file).read_text().count(bug.old) == 1
    directory = materialized[bug.name]
    files = sorted(p.name for p in directory.glob("*.py"))
    assert files == sorted(p.name for p in CORRECT.glob("*.py"))
    changed = [f for f in files if (directory / f).read_text() != (CORRECT / f).read_text()]
    assert changed == [bug.file]
    source = (directory / bug.file).read_text()
    if bug.name == "syntax_error":
        with pytest.raises(SyntaxError):
            compile(source, bug.file, "exec")
    else:
        compile(source, bug.file, "exec")  # parses; nothing is run


def test_materialize_rejects_a_stale_old(tmp_path):
    stale = bugs.Bug("stale", "quiz", "quiz.py", old="not in the file", new="", description="x.",
                     keywords=("x",))
    with pytest.raises(ValueError):
        bugs.materialize(stale, tmp_path)


@pytest.mark.parametrize("bug", WRONG, ids=lambda b: b.name)
def test_bug_is_caught_by_its_component(bug, materialized):
    sub = load(materialized[bug.name])
    # Any exception counts: a bug shows as a failed comparison or as an error (a shape mismatch, ...).
    with pytest.raises(Exception):  # noqa: B017
        _check(bug.component)(sub, REF)
