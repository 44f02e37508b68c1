"""Synthetic sequence tasks, generated on the fly (nothing is downloaded).

Every task lays a sequence out as [prompt, SEP, answer] (induction: [prompt, prompt]) and is
trained as next-token prediction: x = seq[:-1], y = seq[1:], with y = -100 (ignored) everywhere
but the answer. Tokens 0..n_symbols-1 are symbols; n_symbols is SEP.
"""
from collections.abc import Iterator
from dataclasses import dataclass

import torch

IGNORE = -100


def _mode(prompt: torch.Tensor, n_symbols: int) -> torch.Tensor:
    counts = torch.nn.functional.one_hot(prompt, n_symbols).sum(dim=1)
    return counts.argmax(dim=1, keepdim=True)


def _has_unique_mode(prompt: torch.Tensor, n_symbols: int) -> torch.Tensor:
    counts = torch.nn.functional.one_hot(prompt, n_symbols).sum(dim=1)
    top2 = counts.topk(2, dim=1).values
    return top2[:, 0] > top2[:, 1]


ANSWERS = {
    "copy": lambda prompt, n: prompt,
    "reverse": lambda prompt, n: prompt.flip(1),
    "sort": lambda prompt, n: prompt.sort(dim=1).values,
    "majority": _mode,
    "induction": lambda prompt, n: prompt,
}
"""What each task asks for, given the prompt (B, L): copy, reverse and sort need positions
(absolute or relative); majority (the most frequent symbol, unique by construction) does not."""


@dataclass(frozen=True)
class Task:
    """A task by name, with its prompt length and number of symbols."""

    name: str
    length: int = 8
    n_symbols: int = 10

    def __post_init__(self) -> None:
        if self.name not in ANSWERS:
            raise ValueError(f"task={self.name!r} must be one of {sorted(ANSWERS)}")

    @property
    def sep(self) -> int:
        return self.n_symbols

    @property
    def vocab_size(self) -> int:
        return self.n_symbols + 1

    def sequences(self, batch_size: int, generator: torch.Generator) -> tuple[torch.Tensor, int]:
        """(B, S) int64 full sequences and the index where the answer starts."""
        prompt = torch.randint(self.n_symbols, (batch_size, self.length), generator=generator)
        if self.name == "majority":
            while not (ok := _has_unique_mode(prompt, self.n_symbols)).all():
                redraw = torch.randint(self.n_symbols, prompt.shape, generator=generator)
                prompt = torch.where(ok[:, None], prompt, redraw)
        answer = ANSWERS[self.name](prompt, self.n_symbols)
        if self.name == "induction":
            return torch.cat([prompt, answer], dim=1), self.length
        sep = torch.full((batch_size, 1), self.sep)
        return torch.cat([prompt, sep, answer], dim=1), self.length + 1

    def batch(self, batch_size: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """One (x, y) batch of int64 (B, S - 1); y is IGNORE outside the answer."""
        seq, answer_start = self.sequences(batch_size, generator)
        x, y = seq[:, :-1], seq[:, 1:].clone()
        # y[:, t] is token t + 1; score only the tokens of the answer. Induction's first
        # answer token repeats nothing seen yet in order, so it is scored from its second.
        first_scored = answer_start - 1 + (self.name == "induction")
        y[:, :first_scored] = IGNORE
        return x, y

    def batches(self, batch_size: int, seed: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """An endless, seeded stream of batches."""
        generator = torch.Generator().manual_seed(seed)
        while True:
            yield self.batch(batch_size, generator)
