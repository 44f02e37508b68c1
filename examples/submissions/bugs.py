"""Buggy example submissions, each one exact text replacement in one file of correct/.

Every `Bug` names the SPEC component that must lose points (`component`), the file it lives
in, the replacement (`old` occurs exactly once in correct/<file>), a sentence for a student,
and `keywords`: words of which a good grader's feedback for it should contain at least one.

`crash=True` marks submissions that must not be run in-process (they hang, exit, flood stdout,
or fail to import): a grader must survive them, grade the other components, and finish in
bounded time and output. print_flood's functions still return correct values.

    python examples/submissions/bugs.py OUT_DIR    # writes OUT_DIR/<name>/ for every bug
"""
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from grader.spec import COMPONENTS

CORRECT = Path(__file__).resolve().parent / "correct"


@dataclass(frozen=True)
class Bug:
    """One bug: replace `old` (exactly once) by `new` in correct/<file>."""

    name: str
    component: str
    file: str
    old: str
    new: str
    description: str
    keywords: tuple[str, ...]
    crash: bool = False


BUGS: list[Bug] = [
    # ---------------------------------------------------------------- attention
    Bug("no_scale", "attention", "attention.py",
        old='scores = torch.einsum("...qd,...kd->...qk", q, k) * d_k ** -0.5',
        new='scores = torch.einsum("...qd,...kd->...qk", q, k)',
        description="scaled_dot_product_attention forgets to divide the scores by sqrt(d_k).",
        keywords=("sqrt", "scale")),
    Bug("scale_by_sqrt_d_model", "attention", "attention.py",
        old="self.scale = 1.0 / self.d_head ** 0.5",
        new="self.scale = 1.0 / d_model ** 0.5",
        description="MultiHeadAttention scales the scores by 1/sqrt(d_model) instead of 1/sqrt(d_head).",
        keywords=("sqrt", "scale", "d_head")),
    Bug("softmax_over_queries", "attention", "attention.py",
        old="weights = scores.softmax(dim=-1)",
        new="weights = scores.softmax(dim=-2)",
        description="The softmax normalises over the query axis instead of the key axis.",
        keywords=("softmax", "axis", "sum to 1")),
    Bug("causal_mask_future_visible", "attention", "attention.py",
        old="return cols <= rows",
        new="return cols >= rows",
        description="causal_mask is transposed: each token sees the future instead of the past.",
        keywords=("causal", "mask", "future")),
    Bug("causal_mask_hides_diagonal", "attention", "attention.py",
        old="return cols <= rows",
        new="return cols < rows",
        description="causal_mask hides the diagonal, so a token cannot attend to itself.",
        keywords=("causal", "diagonal", "mask")),
    Bug("sdpa_ignores_mask", "attention", "attention.py",
        old="weights = masked_softmax(scores, mask)\n    out = ",
        new="weights = masked_softmax(scores)\n    out = ",
        description="scaled_dot_product_attention never applies its mask argument.",
        keywords=("mask",)),
    Bug("head_reshape_without_transpose", "attention", "attention.py",
        old="return t.unflatten(-1, (self.n_heads, self.d_head)).transpose(1, 2)",
        new="return t.reshape(t.size(0), self.n_heads, t.size(1), self.d_head)",
        description="Heads are split by viewing (B, T, d_model) as (B, n_heads, T, d_head), which mixes "
                    "tokens and features instead of transposing.",
        keywords=("head", "reshape", "transpose")),
    Bug("fully_masked_rows_nan", "attention", "attention.py",
        old=("    scores = torch.where(allowed, scores, torch.finfo(scores.dtype).min)\n"
             "    weights = scores.softmax(dim=-1)\n"
             "    return torch.where(allowed, weights, 0.0)\n"),
        new=("    scores = torch.where(allowed, scores, float(\"-inf\"))\n"
             "    return scores.softmax(dim=-1)\n"),
        description="A query whose keys are all masked gets NaN weights (softmax of a row of -inf).",
        keywords=("nan", "fully masked", "masked row")),
    Bug("fully_masked_rows_uniform", "attention", "attention.py",
        old="    return torch.where(allowed, weights, 0.0)\n",
        new="    return weights\n",
        description="A query whose keys are all masked attends uniformly to them instead of getting "
                    "zero weights.",
        keywords=("fully masked", "zero", "masked row")),
    Bug("weights_after_dropout", "attention", "attention.py",
        old='heads = torch.einsum("bhqk,bhkd->bhqd", self.dropout(weights), v)',
        new=('weights = self.dropout(weights)\n'
             '        heads = torch.einsum("bhqk,bhkd->bhqd", weights, v)'),
        description="MultiHeadAttention returns the attention weights after dropout instead of before.",
        keywords=("dropout", "weights")),
    Bug("rope_applied_to_values", "attention", "attention.py",
        old="            k = apply_rope(k, base=self.rope_base)\n",
        new=("            k = apply_rope(k, base=self.rope_base)\n"
             "            v = apply_rope(v, base=self.rope_base)\n"),
        description="RoPE rotates the values as well as the queries and keys.",
        keywords=("rope", "values")),
    Bug("no_divisibility_check", "attention", "attention.py",
        old=("        if d_model % n_heads != 0:\n"
             "            raise ValueError(f\"d_model={d_model} is not divisible by n_heads={n_heads}\")\n"),
        new="",
        description="MultiHeadAttention accepts a d_model that n_heads does not divide instead of "
                    "raising ValueError.",
        keywords=("valueerror", "divisible", "n_heads")),
    Bug("bias_after_softmax", "attention", "attention.py",
        old=("        if bias is not None:\n"
             "            scores = scores + bias\n"
             "        weights = masked_softmax(scores, mask)\n"),
        new=("        weights = masked_softmax(scores, mask)\n"
             "        if bias is not None:\n"
             "            weights = weights + bias\n"),
        description="MultiHeadAttention adds the bias (ALiBi) to the weights after the softmax instead "
                    "of to the scores before it.",
        keywords=("bias", "softmax", "alibi")),
    Bug("attn_dropout_on_output", "attention", "attention.py",
        old=('heads = torch.einsum("bhqk,bhkd->bhqd", self.dropout(weights), v)\n'
             '        y = self.out_proj(heads.transpose(1, 2).flatten(2))'),
        new=('heads = torch.einsum("bhqk,bhkd->bhqd", weights, v)\n'
             '        y = self.dropout(self.out_proj(heads.transpose(1, 2).flatten(2)))'),
        description="MultiHeadAttention applies its dropout to the output y instead of to the attention "
                    "weights.",
        keywords=("dropout", "weights")),
    Bug("attn_dropout_in_eval_mode", "attention", "attention.py",
        old='heads = torch.einsum("bhqk,bhkd->bhqd", self.dropout(weights), v)',
        new='heads = torch.einsum("bhqk,bhkd->bhqd", F.dropout(weights, self.dropout.p), v)',
        description="MultiHeadAttention calls F.dropout without training=self.training, so the attention "
                    "weights are dropped in eval mode too.",
        keywords=("eval mode",)),
    Bug("attn_dropout_on_scores", "attention", "attention.py",
        old="        weights = masked_softmax(scores, mask)\n        heads = ",
        new="        weights = masked_softmax(self.dropout(scores), mask)\n        heads = ",
        description="MultiHeadAttention drops the scores before the softmax instead of the weights after it.",
        keywords=("dropout", "softmax")),
    Bug("attn_dropout_on_values", "attention", "attention.py",
        old='heads = torch.einsum("bhqk,bhkd->bhqd", self.dropout(weights), v)',
        new='heads = torch.einsum("bhqk,bhkd->bhqd", weights, self.dropout(v))',
        description="MultiHeadAttention drops entries of the values v instead of the attention weights.",
        keywords=("dropout", "weights")),
    Bug("attn_dropout_not_rescaled", "attention", "attention.py",
        old='heads = torch.einsum("bhqk,bhkd->bhqd", self.dropout(weights), v)',
        new=('keep = torch.rand_like(weights) >= self.dropout.p if self.training else 1.0\n'
             '        heads = torch.einsum("bhqk,bhkd->bhqd", weights * keep, v)'),
        description="MultiHeadAttention drops attention weights with a hand-made mask and does not scale the "
                    "kept ones by 1/(1-p).",
        keywords=("1/(1-p)", "scaled")),
    Bug("softmax_in_float32", "attention", "attention.py",
        old="weights = scores.softmax(dim=-1)",
        new="weights = scores.float().softmax(dim=-1)  # float32 for stability",
        description="masked_softmax computes the softmax in float32 and returns float32 weights for float64 "
                    "scores, so attention fails on float64 inputs (the contract: compute in the inputs' "
                    "dtype).",
        keywords=("float32", "dtype", "float64")),
    # ---------------------------------------------------------------- positional
    Bug("sinusoidal_sin_cos_swapped", "positional", "positional.py",
        old=("        table[:, 2 * j] = torch.sin(pos * w)\n"
             "        table[:, 2 * j + 1] = torch.cos(pos * w)\n"),
        new=("        table[:, 2 * j] = torch.cos(pos * w)\n"
             "        table[:, 2 * j + 1] = torch.sin(pos * w)\n"),
        description="sinusoidal_encoding puts cos in the even columns and sin in the odd ones.",
        keywords=("sin", "cos")),
    Bug("sinusoidal_linear_frequencies", "positional", "positional.py",
        old="w = math.exp(-(2 * j / d_model) * math.log(base))",
        new="w = 1.0 - 2 * j / d_model",
        description="sinusoidal_encoding spaces the frequencies linearly instead of geometrically.",
        keywords=("frequency", "frequencies", "geometric")),
    Bug("sinusoidal_exponent_j_over_d", "positional", "positional.py",
        old="w = math.exp(-(2 * j / d_model) * math.log(base))",
        new="w = math.exp(-(j / d_model) * math.log(base))",
        description="sinusoidal_encoding uses the exponent -j/d instead of -2j/d for pair j.",
        keywords=("exponent", "frequency", "frequencies")),
    Bug("shift_rotation_transposed", "positional", "positional.py",
        old="blocks.append(torch.tensor([[c, s], [-s, c]], dtype=torch.float64))",
        new="blocks.append(torch.tensor([[c, -s], [s, c]], dtype=torch.float64))",
        description="shift_rotation returns the transpose, i.e. the rotation by -delta.",
        keywords=("transpose", "rotation", "sign")),
    Bug("rope_rotate_half", "positional", "positional.py",
        old=("    pairs = torch.view_as_complex(x.reshape(*x.shape[:-1], d // 2, 2).contiguous())\n"
             "    return torch.view_as_real(pairs * rotor).reshape(x.shape).to(x.dtype)\n"),
        new=("    halves = x.reshape(*x.shape[:-1], 2, d // 2).transpose(-1, -2)  # pairs (j, j + d/2)\n"
             "    pairs = torch.view_as_complex(halves.contiguous())\n"
             "    return torch.view_as_real(pairs * rotor).transpose(-1, -2).reshape(x.shape).to(x.dtype)\n"),
        description="apply_rope rotates the pairs (j, j + d/2) (rotate-half layout) instead of the "
                    "interleaved pairs (2j, 2j+1).",
        keywords=("interleaved", "rotate-half", "pairs")),
    Bug("rope_negative_angle", "positional", "positional.py",
        old="rotor = torch.polar(torch.ones_like(angles), angles)",
        new="rotor = torch.polar(torch.ones_like(angles), -angles)",
        description="apply_rope rotates by -a instead of +a (the sin terms have the wrong sign).",
        keywords=("rope", "angle", "sign")),
    Bug("rope_float32_frequencies", "positional", "positional.py",
        old=("    angles = torch.outer(positions.to(device=x.device, dtype=torch.float64),\n"
             "                         _inv_freq(d, base, device=x.device))\n"),
        new=("    angles = torch.outer(positions.to(device=x.device, dtype=torch.float32),\n"
             "                         _inv_freq(d, base, device=x.device).float())\n"),
        description="apply_rope computes its frequencies, angles, cos and sin in float32 even for float64 "
                    "inputs (the contract says: compute in the inputs' dtype).",
        keywords=("float32", "dtype")),
    Bug("alibi_slopes_not_press", "positional", "positional.py",
        old=("    p = 1 << (n_heads.bit_length() - 1)  # largest power of two <= n_heads\n"
             "    slopes = _geometric_slopes(p)\n"
             "    if p < n_heads:\n"
             "        slopes += _geometric_slopes(2 * p)[::2][: n_heads - p]\n"),
        new="    slopes = _geometric_slopes(n_heads)\n",
        description="alibi_slopes uses 2^(-8h/n) for every n, which is wrong when n_heads is not a power "
                    "of two (e.g. 6 heads).",
        keywords=("slope", "power of two")),
    Bug("alibi_bias_sign_flipped", "positional", "positional.py",
        old="return -(slopes * distance.abs())",
        new="return slopes * distance.abs()",
        description="alibi_bias rewards distant keys (+m|i-j|) instead of penalising them (-m|i-j|).",
        keywords=("sign", "negative", "bias")),
    Bug("sinusoidal_halves_fairseq_style", "positional", "positional.py",
        old=("    pos = torch.arange(n_positions, dtype=torch.float64)\n"
             "    table = torch.empty(n_positions, d_model, dtype=torch.float64)\n"
             "    for j in range(d_model // 2):\n"
             "        w = math.exp(-(2 * j / d_model) * math.log(base))\n"
             "        table[:, 2 * j] = torch.sin(pos * w)\n"
             "        table[:, 2 * j + 1] = torch.cos(pos * w)\n"
             "    return table.to(torch.float32)\n"),
        new=("    half = d_model // 2\n"
             "    step = math.log(base) / (half - 1)  # fairseq's spacing: w_0 = 1 ... w_{half-1} = 1/base\n"
             "    freqs = torch.exp(-step * torch.arange(half, dtype=torch.float32))\n"
             "    angles = torch.arange(n_positions, dtype=torch.float32)[:, None] * freqs[None, :]\n"
             "    return torch.cat([angles.sin(), angles.cos()], dim=1)\n"),
        description="sinusoidal_encoding is written as fairseq's table: [sin | cos] halves, frequencies "
                    "base^(-j/(d/2-1)), and a division by zero at d_model=2.",
        keywords=("[sin | cos] halves",)),
    # ---------------------------------------------------------------- feedforward
    Bug("gelu_tanh_approximation", "feedforward", "feedforward.py",
        old="h = F.gelu(h)",
        new='h = F.gelu(h, approximate="tanh")',
        description="FeedForward uses the tanh approximation of GELU instead of the exact (erf) one.",
        keywords=("gelu", "tanh", "exact")),
    Bug("relu_ignored", "feedforward", "feedforward.py",
        old=("        if self.activation == \"gelu\":\n"
             "            h = F.gelu(h)\n"
             "        else:\n"
             "            h = F.relu(h)\n"),
        new="        h = F.gelu(h)\n",
        description="FeedForward always applies GELU, even with activation=\"relu\".",
        keywords=("relu", "activation")),
    Bug("missing_activation", "feedforward", "feedforward.py",
        old="return self.fc2(self.dropout(h))",
        new="return self.fc2(self.dropout(self.fc1(x)))",
        description="FeedForward applies no non-linearity between fc1 and fc2.",
        keywords=("activation", "gelu", "nonlinear")),
    Bug("ffn_dropout_before_activation", "feedforward", "feedforward.py",
        old=("        h = self.fc1(x)\n        if self.activation"),
        new=("        h = self.dropout(self.fc1(x))\n        if self.activation"),
        description="FeedForward drops fc1's output before the activation (and again after it) instead of "
                    "only act(fc1(x)).",
        keywords=("dropout", "act(fc1(x))")),
    Bug("ffn_dropout_after_fc2", "feedforward", "feedforward.py",
        old="return self.fc2(self.dropout(h))",
        new="return self.dropout(self.fc2(h))",
        description="FeedForward applies its dropout to the output of fc2 instead of between act and fc2.",
        keywords=("dropout", "fc2")),
    Bug("ffn_dropout_in_eval_mode", "feedforward", "feedforward.py",
        old="return self.fc2(self.dropout(h))",
        new="return self.fc2(F.dropout(h, self.dropout.p))",
        description="FeedForward calls F.dropout without training=self.training, so it drops in eval mode "
                    "too.",
        keywords=("eval mode",)),
    Bug("ffn_dropout_rate_hard_coded", "feedforward", "feedforward.py",
        old="self.dropout = nn.Dropout(dropout)",
        new="self.dropout = nn.Dropout(0.1)",
        description="FeedForward ignores its dropout argument and always drops at rate 0.1.",
        keywords=("rate", "dropout")),
    Bug("ffn_dropout_not_rescaled", "feedforward", "feedforward.py",
        old="return self.fc2(self.dropout(h))",
        new=("keep = torch.rand_like(h) >= self.dropout.p if self.training else 1.0\n"
             "        return self.fc2(h * keep)"),
        description="FeedForward drops with a hand-made mask and does not scale the kept entries by 1/(1-p).",
        keywords=("1/(1-p)", "scaled")),
    # ---------------------------------------------------------------- block
    Bug("post_norm_as_pre_norm", "block", "block.py",
        old="sublayers = self._pre if self.pre_norm else self._post",
        new="sublayers = self._pre",
        description="TransformerBlock computes the pre-norm formula (B1) even when norm=\"post\".",
        keywords=("post-norm", "post", "norm")),
    Bug("norm1_for_both_sublayers", "block", "block.py",
        old="return h + self.dropout(self.ffn(self.norm2(h))), w",
        new="return h + self.dropout(self.ffn(self.norm1(h))), w",
        description="The pre-norm block normalises the feed-forward input with norm1 instead of norm2.",
        keywords=("norm2", "layernorm", "norm")),
    Bug("pre_norm_on_residual_stream", "block", "block.py",
        old=("        a, w = self._attend(self.norm1(x), mask, bias)\n"
             "        h = x + a\n"),
        new=("        x = self.norm1(x)\n"
             "        a, w = self._attend(x, mask, bias)\n"
             "        h = x + a\n"),
        description="The pre-norm block normalises the residual stream itself (x = norm1(x)) instead of "
                    "only the attention input.",
        keywords=("residual", "pre-norm", "norm")),
    Bug("block_attn_output_not_dropped", "block", "block.py",
        old="return self.dropout(y), w",
        new="return y, w",
        description="TransformerBlock adds the attention sublayer's output to the residual without its "
                    "dropout.",
        keywords=("dropout", "attention sublayer")),
    Bug("block_dropout_on_residual_sum", "block", "block.py",
        old="return h + self.dropout(self.ffn(self.norm2(h))), w",
        new="return self.dropout(h + self.ffn(self.norm2(h))), w",
        description="The pre-norm block drops the residual sum h + ffn(...) instead of the feed-forward "
                    "sublayer's output alone.",
        keywords=("dropout", "residual")),
    Bug("block_post_norm_ffn_not_dropped", "block", "block.py",
        old="return self.norm2(h + self.dropout(self.ffn(h))), w",
        new="return self.norm2(h + self.ffn(h)), w",
        description="The post-norm block adds the feed-forward sublayer's output without its dropout.",
        keywords=("dropout", "feed-forward sublayer")),
    Bug("block_dropout_in_eval_mode", "block", "block.py",
        old="return self.dropout(y), w",
        new="return torch.nn.functional.dropout(y, self.dropout.p), w",
        description="TransformerBlock calls F.dropout without training=self.training on the attention "
                    "sublayer's output, so it drops in eval mode too.",
        keywords=("eval mode",)),
    Bug("block_dropout_not_passed_to_attn", "block", "block.py",
        old="self.attn = MultiHeadAttention(d_model, n_heads, dropout=dropout, rope=rope)",
        new="self.attn = MultiHeadAttention(d_model, n_heads, rope=rope)",
        description="TransformerBlock builds attn without its dropout, so the attention weights are never "
                    "dropped.",
        keywords=("dropout", "passed on")),
    Bug("block_rope_not_passed", "block", "block.py",
        old="self.attn = MultiHeadAttention(d_model, n_heads, dropout=dropout, rope=rope)",
        new="self.attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)",
        description="TransformerBlock builds attn without rope, so rope=True blocks have no rotary "
                    "positions.",
        keywords=("rope",)),
    Bug("block_activation_not_passed", "block", "block.py",
        old="self.ffn = FeedForward(d_model, d_ff, dropout=dropout, activation=activation)",
        new="self.ffn = FeedForward(d_model, d_ff, dropout=dropout)",
        description="TransformerBlock builds ffn without its activation, so activation=\"relu\" gets GELU.",
        keywords=("activation",)),
    Bug("block_dropout_rate_hard_coded", "block", "block.py",
        old="self.dropout = nn.Dropout(dropout)",
        new="self.dropout = nn.Dropout(0.1)",
        description="TransformerBlock's residual dropout ignores the dropout argument (always 0.1).",
        keywords=("rate", "dropout")),
    # ---------------------------------------------------------------- model
    Bug("missing_final_norm", "model", "model.py",
        old=("        if self.norm_f is not None:\n"
             "            x = self.norm_f(x)\n"),
        new="",
        description="The pre-norm model never applies its final LayerNorm norm_f before lm_head.",
        keywords=("norm_f", "final norm", "layernorm")),
    Bug("final_norm_in_post_norm", "model", "model.py",
        old='self.norm_f = nn.LayerNorm(d_model) if norm == "pre" else None',
        new="self.norm_f = nn.LayerNorm(d_model)",
        description="The post-norm model also gets a final LayerNorm norm_f (extra parameters).",
        keywords=("norm_f", "final norm", "post")),
    Bug("learned_no_max_len_check", "model", "model.py",
        old=("            if T > self.max_len:\n"
             "                raise ValueError(f\"sequence length T={T} is longer than "
             "max_len={self.max_len}\")\n"),
        new="",
        description="With learned positions, a sequence longer than max_len does not raise ValueError.",
        keywords=("max_len", "valueerror")),
    Bug("embeddings_scaled_by_sqrt_d_model", "model", "model.py",
        old="x = self.tok_emb(idx)\n",
        new="x = self.tok_emb(idx) * self.tok_emb.embedding_dim ** 0.5\n",
        description="The token embeddings are multiplied by sqrt(d_model), which (M1) does not do.",
        keywords=("embedding", "sqrt", "tok_emb")),
    Bug("no_causal_mask", "model", "model.py",
        old="mask = causal_mask(T, device=idx.device)",
        new="mask = None",
        description="The model never passes the causal mask to its blocks, so tokens see the future.",
        keywords=("causal", "mask", "future")),
    Bug("positions_added_after_dropout", "model", "model.py",
        old=("        if pos is not None:\n"
             "            x = x + pos\n"
             "        x = self.drop(x)\n"),
        new=("        x = self.drop(x)\n"
             "        if pos is not None:\n"
             "            x = x + pos\n"),
        description="The positional encoding is added after the embedding dropout instead of before it.",
        keywords=("dropout", "position")),
    Bug("rope_not_enabled", "model", "model.py",
        old='rope=(pos_encoding == "rope")',
        new="rope=False",
        description="With pos_encoding=\"rope\" the blocks are built without rope, so the model has no "
                    "positional information.",
        keywords=("rope",)),
    Bug("sinusoidal_buffer_in_state_dict", "model", "model.py",
        old='sinusoidal_encoding(max_len, d_model), persistent=False)',
        new="sinusoidal_encoding(max_len, d_model))",
        description="The cached sinusoidal table is a persistent buffer, so state_dict() has an extra key.",
        keywords=("state_dict", "buffer", "persistent")),
    # ---------------------------------------------------------------- trainer
    Bug("warmup_off_by_one", "trainer", "trainer.py",
        old="return max_lr * (step + 1) / warmup_steps",
        new="return max_lr * step / warmup_steps",
        description="Warmup uses max_lr * step / warmup_steps, so step 0 has learning rate 0.",
        keywords=("warmup", "off by one", "step 0")),
    Bug("cosine_not_clamped", "trainer", "trainer.py",
        old="progress = min(1.0, max(0.0, (step - warmup_steps) / decay_steps))",
        new="progress = (step - warmup_steps) / decay_steps",
        description="Past total_steps the cosine rises again instead of staying at min_lr.",
        keywords=("clamp", "total_steps", "min_lr")),
    Bug("weight_decay_on_layernorm", "trainer", "trainer.py",
        old="if p.ndim >= 2:",
        new='if not name.endswith("bias"):',
        description="param_groups decays every non-bias parameter, LayerNorm weights included.",
        keywords=("weight decay", "layernorm", "ndim")),
    Bug("weight_decay_on_all_params", "trainer", "trainer.py",
        old="if p.ndim >= 2:",
        new="if p.ndim >= 1:",
        description="param_groups puts biases and LayerNorm parameters in the weight-decay group too.",
        keywords=("weight decay", "bias", "ndim")),
    Bug("grad_norm_after_clipping", "trainer", "trainer.py",
        old=("        grad_norm = _grad_norm(params)\n"
             "        if grad_clip is not None:\n"
             "            torch.nn.utils.clip_grad_norm_(params, grad_clip)\n"),
        new=("        if grad_clip is not None:\n"
             "            torch.nn.utils.clip_grad_norm_(params, grad_clip)\n"
             "        grad_norm = _grad_norm(params)\n"),
        description="train records the gradient norm after clipping instead of before.",
        keywords=("grad_norm", "clipping", "before")),
    Bug("lr_never_set", "trainer", "trainer.py",
        old=("        for group in optimizer.param_groups:\n"
             "            group[\"lr\"] = lr\n"),
        new="",
        description="train computes the scheduled learning rate but never writes it into the optimizer.",
        keywords=("learning rate", "optimizer", "lr")),
    Bug("no_zero_grad", "trainer", "trainer.py",
        old="        optimizer.zero_grad()\n",
        new="",
        description="train never zeroes the gradients, so they accumulate across steps.",
        keywords=("zero_grad", "gradient", "accumulate")),
    Bug("ignore_index_not_applied", "trainer", "trainer.py",
        old="scored = y != IGNORE\n",
        new="scored = torch.ones_like(y, dtype=torch.bool)\n",
        description="The loss also counts positions whose target is -100 instead of ignoring them.",
        keywords=("-100", "ignore")),
    Bug("evaluate_mean_of_batch_means", "trainer", "trainer.py",
        old='return {"loss": sum(sums) / n, "accuracy": sum(hits) / n}',
        new=('return {"loss": sum(s / c for s, c in zip(sums, counts)) / len(counts),\n'
             '            "accuracy": sum(h / c for h, c in zip(hits, counts)) / len(counts)}'),
        description="evaluate averages per-batch means instead of averaging over every scored position.",
        keywords=("per-batch", "mean", "position")),
    Bug("train_leaves_train_mode", "trainer", "trainer.py",
        old="    model.eval()\n    return history\n",
        new="    return history\n",
        description="train leaves the model in training mode instead of eval mode.",
        keywords=("eval", "training mode")),
    Bug("lr_linear_decay", "trainer", "trainer.py",
        old="coeff = 0.5 * (1.0 + math.cos(math.pi * progress))  # 1 -> 0",
        new="coeff = 1.0 - progress",
        description="After the warmup the learning rate decays linearly instead of along the cosine (T1).",
        keywords=("cosine", "linear")),
    Bug("lr_quarter_cosine", "trainer", "trainer.py",
        old="coeff = 0.5 * (1.0 + math.cos(math.pi * progress))  # 1 -> 0",
        new="coeff = math.cos(0.5 * math.pi * progress)",
        description="The decay follows a quarter cosine cos(pi/2 p) instead of (1 + cos(pi p)) / 2.",
        keywords=("cosine",)),
    Bug("lr_cosine_to_zero_floored", "trainer", "trainer.py",
        old="return min_lr + coeff * (max_lr - min_lr)",
        new="return max(min_lr, coeff * max_lr)",
        description="The cosine decays from max_lr to 0 and is cut off at min_lr, instead of decaying to "
                    "min_lr.",
        keywords=("min_lr", "cosine")),
    Bug("lr_decay_one_step_early", "trainer", "trainer.py",
        old="progress = min(1.0, max(0.0, (step - warmup_steps) / decay_steps))",
        new="progress = min(1.0, max(0.0, (step - warmup_steps + 1) / decay_steps))",
        description="The cosine progress counts from warmup_steps - 1, so the decay starts one step early.",
        keywords=("warmup_steps", "max_lr")),
    Bug("lr_nanogpt_style", "trainer", "trainer.py",
        old=("    if step < warmup_steps:\n"
             "        return max_lr * (step + 1) / warmup_steps\n"
             "    decay_steps = max(1, total_steps - warmup_steps)\n"
             "    progress = min(1.0, max(0.0, (step - warmup_steps) / decay_steps))\n"),
        new=("    if step < warmup_steps:\n"
             "        return max_lr * step / warmup_steps\n"
             "    if step > total_steps:\n"
             "        return min_lr\n"
             "    progress = (step - warmup_steps) / (total_steps - warmup_steps)\n"),
        description="lr_schedule is written as nanoGPT's get_lr: the warmup is off by one (step 0 gets 0, "
                    "the peak comes one step late) and warmup_steps = total_steps divides by zero.",
        keywords=("one step late", "off by one")),
    Bug("clip_none_crashes", "trainer", "trainer.py",
        old=("        if grad_clip is not None:\n"
             "            torch.nn.utils.clip_grad_norm_(params, grad_clip)\n"),
        new="        torch.nn.utils.clip_grad_norm_(params, grad_clip)\n",
        description="train always calls clip_grad_norm_(params, grad_clip), which fails for grad_clip=None "
                    "(no clipping).",
        keywords=("grad_clip=none",)),
    Bug("clip_none_means_one", "trainer", "trainer.py",
        old=("        if grad_clip is not None:\n"
             "            torch.nn.utils.clip_grad_norm_(params, grad_clip)\n"),
        new="        torch.nn.utils.clip_grad_norm_(params, 1.0 if grad_clip is None else grad_clip)\n",
        description="train clips at 1.0 when grad_clip=None instead of not clipping.",
        keywords=("grad_clip=none",)),
    Bug("clip_by_value", "trainer", "trainer.py",
        old="torch.nn.utils.clip_grad_norm_(params, grad_clip)",
        new="torch.nn.utils.clip_grad_value_(params, grad_clip)",
        description="train clips each gradient entry to [-grad_clip, grad_clip] instead of the global norm.",
        keywords=("clip", "norm")),
    Bug("clip_each_parameter", "trainer", "trainer.py",
        old="torch.nn.utils.clip_grad_norm_(params, grad_clip)",
        new="[torch.nn.utils.clip_grad_norm_([p], grad_clip) for p in params]",
        description="train clips each parameter's gradient norm separately instead of the global norm.",
        keywords=("clip", "global")),
    Bug("clip_at_one", "trainer", "trainer.py",
        old="torch.nn.utils.clip_grad_norm_(params, grad_clip)",
        new="torch.nn.utils.clip_grad_norm_(params, 1.0)",
        description="train clips the global gradient norm at 1.0 whatever grad_clip says.",
        keywords=("clip", "grad_clip")),
    # ---------------------------------------------------------------- analysis
    Bug("entropy_log2", "analysis", "analysis.py",
        old="torch.log(p.clamp(min=tiny))",
        new="torch.log2(p.clamp(min=tiny))",
        description="attention_entropy uses log2 (bits) instead of the natural log (nats).",
        keywords=("log2", "natural log", "nats")),
    Bug("previous_token_off_by_one", "analysis", "analysis.py",
        old="return weights[..., i, i - 1].mean(dim=-1)",
        new="return weights[..., i, i].mean(dim=-1)",
        description="previous_token_score reads the diagonal weights[i, i] instead of weights[i, i-1].",
        keywords=("offset", "previous", "i - 1")),
    Bug("induction_wrong_offset", "analysis", "analysis.py",
        old="return weights[..., i, i - period + 1].mean(dim=-1)",
        new="return weights[..., i, i - period].mean(dim=-1)",
        description="induction_score reads weights[i, i - period] instead of weights[i, i - period + 1].",
        keywords=("offset", "period", "i - period + 1")),
    Bug("attention_maps_train_mode", "analysis", "analysis.py",
        old="    model.eval()\n    try:\n",
        new="    try:\n",
        description="attention_maps runs the model in whatever mode it is in, so dropout stays on.",
        keywords=("eval", "dropout")),
    # ---------------------------------------------------------------- quiz
    Bug("quiz_wrong_answer", "quiz", "quiz.py",
        old='q5="b"',
        new='q5="a"',
        description="Quiz question 5 answered (a) instead of (b).",
        keywords=("q5",)),
    # ---------------------------------------------------------------- crashes
    Bug("hang", "feedforward", "feedforward.py",
        old="        h = self.fc1(x)\n",
        new="        h = self.fc1(x)\n        while True:  # a debugging loop left in\n            pass\n",
        description="FeedForward.forward never returns (an infinite loop).",
        keywords=("timed out", "time limit", "did not return"), crash=True),
    Bug("exit", "positional", "positional.py",
        old="    p = 1 << (n_heads.bit_length() - 1)",
        new="    import os\n    os._exit(3)\n    p = 1 << (n_heads.bit_length() - 1)",
        description="alibi_slopes ends the whole process with os._exit(3).",
        keywords=("exit", "crash", "terminated"), crash=True),
    Bug("syntax_error", "analysis", "analysis.py",
        old="return -plogp.sum(dim=-1).mean(dim=-1)",
        new="return -plogp.sum(dim=-1).mean(dim=-1",
        description="analysis.py does not parse (an unclosed parenthesis).",
        keywords=("syntax",), crash=True),
    Bug("import_time_error", "block", "block.py",
        old="from .feedforward import FeedForward\n",
        new="from .feedforward import FeedForward, PositionwiseFeedForward\n",
        description="block.py imports a name feedforward.py does not define, so importing it fails.",
        keywords=("import",), crash=True),
    Bug("print_flood", "trainer", "trainer.py",
        old="    decay, no_decay = [], []\n",
        new='    print("#" * 100_000_000)  # 100 MB of debugging output\n    decay, no_decay = [], []\n',
        description="param_groups prints 100 MB on every call (its results are still correct).",
        keywords=("output", "print", "truncated"), crash=True),
]

BY_NAME: dict[str, Bug] = {bug.name: bug for bug in BUGS}


def validate(bug: Bug) -> None:
    """Raise ValueError unless the record itself is well formed (name, component, keywords)."""
    if not re.fullmatch(r"[a-z][a-z0-9_]*", bug.name):
        raise ValueError(f"bug name {bug.name!r} is not snake_case")
    if bug.component not in COMPONENTS:
        raise ValueError(f"{bug.name}: component={bug.component!r} is not one of {COMPONENTS}")
    if not 1 <= len(bug.keywords) <= 3 or any(k != k.lower() for k in bug.keywords):
        raise ValueError(f"{bug.name}: keywords must be 1-3 lowercase strings")


def apply(bug: Bug, source: str) -> str:
    """`source` with bug.old replaced by bug.new; raises ValueError unless old occurs exactly once."""
    count = source.count(bug.old)
    if count != 1:
        raise ValueError(f"{bug.name}: `old` occurs {count} times in {bug.file}, expected exactly once")
    return source.replace(bug.old, bug.new)


def materialize(bug: Bug, target_dir: Path | str) -> Path:
    """Copy correct/ to target_dir/<bug.name>/ with the bug applied; returns that directory."""
    validate(bug)
    buggy = apply(bug, (CORRECT / bug.file).read_text())
    dest = Path(target_dir) / bug.name
    shutil.copytree(CORRECT, dest, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (dest / bug.file).write_text(buggy)
    return dest


def materialize_all(target_dir: Path | str) -> list[Path]:
    """materialize() every bug into target_dir; returns the submission directories."""
    return [materialize(bug, target_dir) for bug in BUGS]


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: python {sys.argv[0]} OUT_DIR")
    for path in materialize_all(sys.argv[1]):
        print(path)
