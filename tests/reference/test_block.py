"""block.py: TransformerBlock pre (B1) and post (B2) against nn.TransformerEncoderLayer."""
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from grader.suites.strategies import randn
from helpers import assert_close, build, head_shapes, lengths, seeds, sizes, torch_attn_mask
from solutions.attention import MultiHeadAttention, causal_mask
from solutions.block import TransformerBlock
from solutions.positional import alibi_bias

norms = st.sampled_from(["pre", "post"])


def torch_encoder_layer(block: TransformerBlock, n_heads: int, norm: str) -> nn.TransformerEncoderLayer:
    """nn.TransformerEncoderLayer (GELU, no dropout) holding the block's weights."""
    attn, ffn = block.attn, block.ffn
    d_model, d_ff = ffn.fc1.in_features, ffn.fc1.out_features
    ref = nn.TransformerEncoderLayer(d_model, n_heads, dim_feedforward=d_ff, dropout=0.0,
                                     activation="gelu", batch_first=True, norm_first=norm == "pre",
                                     dtype=ffn.fc1.weight.dtype)
    projections = (attn.q_proj, attn.k_proj, attn.v_proj)
    with torch.no_grad():
        ref.self_attn.in_proj_weight.copy_(torch.cat([p.weight for p in projections]))
        ref.self_attn.in_proj_bias.copy_(torch.cat([p.bias for p in projections]))
        pairs = [(ref.self_attn.out_proj, attn.out_proj), (ref.linear1, ffn.fc1), (ref.linear2, ffn.fc2),
                 (ref.norm1, block.norm1), (ref.norm2, block.norm2)]
        for theirs, ours in pairs:
            theirs.load_state_dict(ours.state_dict())
    return ref.eval()


@given(shape=head_shapes(), B=sizes, T=lengths, norm=norms, alibi=st.booleans(), seed=seeds)
def test_block_matches_torch_encoder_layer(shape: tuple, B: int, T: int, norm: str, alibi: bool,
                                           seed: int) -> None:
    d_model, n_heads = shape
    block = build(TransformerBlock, d_model, n_heads, 3 * d_model, norm=norm, seed=seed)
    x = randn(seed, B, T, d_model)
    mask, bias = causal_mask(T), alibi_bias(n_heads, T).double() if alibi else None
    y, weights = block(x, mask=mask, bias=bias, return_weights=True)
    ref = torch_encoder_layer(block, n_heads, norm)
    assert_close(y, ref(x, src_mask=torch_attn_mask(mask, bias, B, n_heads)))
    # The weights are those of the attention sublayer, on norm1(x) for pre-norm.
    attn_input = block.norm1(x) if norm == "pre" else x
    assert_close(weights, block.attn(attn_input, mask, bias, return_weights=True)[1])
    assert_close(block(x, mask=mask, bias=bias), y)


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_block_float32_matches_torch(norm: str) -> None:
    block = build(TransformerBlock, 8, 2, 16, norm=norm, dtype=torch.float32)
    x = randn(0, 2, 5, 8, dtype=torch.float32)
    y = block(x, mask=causal_mask(5))
    assert y.dtype == torch.float32
    assert_close(y, torch_encoder_layer(block, 2, norm)(x, src_mask=~causal_mask(5)))


@pytest.mark.parametrize("rope", [False, True])
@pytest.mark.parametrize("norm", ["pre", "post"])
def test_block_gradcheck(norm: str, rope: bool) -> None:
    block = build(TransformerBlock, 4, 2, 8, norm=norm, rope=rope)
    x = randn(0, 2, 3, 4).requires_grad_()
    assert torch.autograd.gradcheck(lambda x: block(x, causal_mask(3)), (x,))


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_block_rope_reaches_attention(norm: str) -> None:
    """With rope=True the attention sublayer is a rotary MultiHeadAttention."""
    block = build(TransformerBlock, 8, 2, 16, norm=norm, rope=True)
    rotary = MultiHeadAttention(8, 2, rope=True).double()
    rotary.load_state_dict(block.attn.state_dict())
    x = randn(0, 2, 5, 8)
    assert_close(block.attn(x, causal_mask(5)), rotary(x, causal_mask(5)))
    plain = build(TransformerBlock, 8, 2, 16, norm=norm, rope=False)
    assert not torch.allclose(plain(x, causal_mask(5)), block(x, causal_mask(5)))


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_block_submodules_and_dropout(norm: str) -> None:
    block = TransformerBlock(8, 2, 16, dropout=0.2, norm=norm, activation="relu").double().eval()
    assert isinstance(block.attn, MultiHeadAttention) and block.attn.dropout.p == 0.2
    assert block.ffn.fc1.out_features == 16 and block.ffn.dropout.p == 0.2
    x = randn(0, 3, 8)
    assert_close(block.ffn(x), block.ffn.fc2(torch.relu(block.ffn.fc1(x))))
    assert isinstance(block.norm1, nn.LayerNorm) and isinstance(block.norm2, nn.LayerNorm)
    assert isinstance(block.dropout, nn.Dropout) and block.dropout.p == 0.2


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_block_residual_dropout_is_applied_in_training(norm: str) -> None:
    """Dropout(1.0) drops both sublayer outputs: pre-norm returns x, post-norm norm2(norm1(x))."""
    block = build(TransformerBlock, 8, 2, 16, dropout=1.0, norm=norm).train()
    x = randn(0, 2, 5, 8)
    expected = x if norm == "pre" else block.norm2(block.norm1(x))
    assert_close(block(x, causal_mask(5)), expected)


def test_block_rejects_unknown_norm() -> None:
    with pytest.raises(ValueError, match="norm"):
        TransformerBlock(8, 2, 16, norm="sandwich")
