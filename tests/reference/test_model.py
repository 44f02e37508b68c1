"""model.py: TinyTransformerLM (M1), its state-dict keys and its causality."""
import itertools

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from grader import spec
from helpers import assert_close, build, seeds
from solutions.attention import causal_mask
from solutions.model import POS_ENCODINGS, TinyTransformerLM
from solutions.positional import alibi_bias, sinusoidal_encoding

CONFIGS = list(itertools.product(POS_ENCODINGS, spec.NORMS))
VOCAB, D_MODEL, N_HEADS, N_LAYERS = 7, 8, 2, 2


def tiny_lm(pos_encoding: str, norm: str, seed: int = 0, dtype: torch.dtype = torch.float64,
            **kwargs) -> TinyTransformerLM:
    return build(TinyTransformerLM, VOCAB, d_model=D_MODEL, n_heads=N_HEADS, n_layers=N_LAYERS,
                 d_ff=16, max_len=12, norm=norm, pos_encoding=pos_encoding, seed=seed, dtype=dtype, **kwargs)


def tokens(B: int, T: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(VOCAB, (B, T), generator=torch.Generator().manual_seed(seed))


def expected_keys(pos_encoding: str, norm: str) -> set[str]:
    """The state-dict keys SPEC.md fixes for this configuration."""
    keys = {"tok_emb.weight", "lm_head.weight"}
    if pos_encoding == "learned":
        keys.add("pos_emb.weight")
    if norm == "pre":
        keys |= {"norm_f.weight", "norm_f.bias"}
    layers = ["attn.q_proj", "attn.k_proj", "attn.v_proj", "attn.out_proj", "ffn.fc1", "ffn.fc2",
              "norm1", "norm2"]
    keys |= {f"blocks.{i}.{layer}.{p}" for i in range(N_LAYERS) for layer in layers
             for p in ("weight", "bias")}
    return keys


def reference_logits(model: TinyTransformerLM, idx: torch.Tensor, pos_encoding: str) -> torch.Tensor:
    """(M1) composed by hand from the model's own submodules."""
    T = idx.size(1)
    x = model.tok_emb(idx)
    if pos_encoding == "sinusoidal":
        x = x + sinusoidal_encoding(T, D_MODEL).double()
    elif pos_encoding == "learned":
        x = x + model.pos_emb.weight[:T]
    bias = alibi_bias(N_HEADS, T).double() if pos_encoding == "alibi" else None
    for block in model.blocks:
        x = block(x, causal_mask(T), bias)
    if model.norm_f is not None:
        x = model.norm_f(x)
    return model.lm_head(x)


@pytest.mark.parametrize("pos_encoding, norm", CONFIGS)
def test_state_dict_keys_are_exactly_the_spec(pos_encoding: str, norm: str) -> None:
    state = tiny_lm(pos_encoding, norm).state_dict()
    assert set(state) == expected_keys(pos_encoding, norm)
    assert state["tok_emb.weight"].shape == (VOCAB, D_MODEL)
    assert state["lm_head.weight"].shape == (VOCAB, D_MODEL)
    assert state["blocks.0.ffn.fc1.weight"].shape == (16, D_MODEL)
    if pos_encoding == "learned":
        assert state["pos_emb.weight"].shape == (12, D_MODEL)


@pytest.mark.parametrize("pos_encoding, norm", CONFIGS)
def test_forward_follows_m1(pos_encoding: str, norm: str) -> None:
    model = tiny_lm(pos_encoding, norm)
    idx = tokens(3, 6)
    logits, weights = model(idx, return_weights=True)
    assert logits.shape == (3, 6, VOCAB) and logits.dtype == torch.float64
    assert len(weights) == N_LAYERS and all(w.shape == (3, N_HEADS, 6, 6) for w in weights)
    assert_close(logits, reference_logits(model, idx, pos_encoding))
    assert_close(model(idx), logits)


@pytest.mark.parametrize("pos_encoding, norm", CONFIGS)
def test_float32_model_runs_in_float32(pos_encoding: str, norm: str) -> None:
    model = tiny_lm(pos_encoding, norm, dtype=torch.float32)
    logits = model(tokens(2, 5))
    assert logits.dtype == torch.float32
    expected = reference_logits(model.double(), tokens(2, 5), pos_encoding)
    assert_close(logits.double(), expected, rtol=1e-4, atol=1e-4)


@given(config=st.sampled_from(CONFIGS), t=st.integers(0, 6), seed=seeds)
def test_perturbing_a_future_token_leaves_earlier_logits_unchanged(config: tuple, t: int, seed: int) -> None:
    model = tiny_lm(*config, seed=seed)
    idx = tokens(2, 7, seed)
    changed = idx.clone()
    changed[:, t] = (changed[:, t] + 1) % VOCAB
    before, after = model(idx), model(changed)
    assert torch.equal(before[:, :t], after[:, :t])
    # The perturbation is visible from position t on, so the test is not vacuous.
    assert not torch.allclose(before[:, t], after[:, t])


@pytest.mark.parametrize("pos_encoding, norm", CONFIGS)
def test_every_parameter_gets_a_finite_gradient(pos_encoding: str, norm: str) -> None:
    model = tiny_lm(pos_encoding, norm).train()
    model(tokens(2, 5)).logsumexp(-1).sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, name


@pytest.mark.parametrize("pos_encoding, norm", CONFIGS)
def test_state_dicts_transfer_between_instances(pos_encoding: str, norm: str) -> None:
    model, other = tiny_lm(pos_encoding, norm, seed=1), tiny_lm(pos_encoding, norm, seed=2)
    other.load_state_dict(model.state_dict())
    assert torch.equal(other(tokens(2, 5)), model(tokens(2, 5)))


@pytest.mark.parametrize("pos_encoding", POS_ENCODINGS)
def test_only_learned_positions_limit_the_length(pos_encoding: str) -> None:
    model = tiny_lm(pos_encoding, "pre")
    too_long = tokens(1, 13)
    if pos_encoding == "learned":
        with pytest.raises(ValueError, match="max_len|T"):
            model(too_long)
    else:
        assert model(too_long).shape == (1, 13, VOCAB)


@pytest.mark.parametrize("kwargs, name", [({"pos_encoding": "absolute"}, "pos_encoding"),
                                          ({"norm": "mid"}, "norm")])
def test_unknown_options_raise_value_error_naming_them(kwargs: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        TinyTransformerLM(VOCAB, **kwargs)


def test_the_reference_offers_exactly_the_spec_encodings() -> None:
    assert POS_ENCODINGS == spec.POS_ENCODINGS
