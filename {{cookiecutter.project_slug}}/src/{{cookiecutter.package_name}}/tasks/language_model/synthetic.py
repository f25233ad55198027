"""A seeded synthetic language whose best possible loss is known: a first-order Markov chain over the tokenizer's
vocabulary, with documents that end in end-of-text.

Each token is followed by one of a few successors, with probabilities drawn once from the seed; end-of-text is one
possible successor of every token, and a document starts with one of a few start tokens. No model predicts the next
token better than the chain's own probabilities, so the loss of a perfect model is the chain's entropy rate: each
token's successor entropy, averaged over how often the token occurs (the stationary distribution). That is `floor`.
"""

from __future__ import annotations

import numpy as np

SUCCESSORS = 4  # per token: few enough that a small model learns the table in minutes, enough to leave entropy
MEAN_DOCUMENT = 200  # tokens: end-of-text follows any token with probability 1/200
STREAMS = 1024  # documents are drawn this many at a time, side by side


class MarkovLanguage:
    def __init__(self, vocab_size: int, eot: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.vocab_size, self.eot = vocab_size, eot
        words = np.array([t for t in range(vocab_size) if t != eot])
        # next[t]: t's successors (the last is end-of-text), prob[t]: their probabilities. The end-of-text row holds
        # the start tokens of a document, equally likely.
        self.next = np.empty((vocab_size, SUCCESSORS + 1), dtype=np.int64)
        self.prob = np.empty((vocab_size, SUCCESSORS + 1))
        for token in range(vocab_size):
            if token == eot:
                self.next[token] = rng.choice(words, SUCCESSORS + 1, replace=False)
                self.prob[token] = 1.0 / (SUCCESSORS + 1)
            else:
                self.next[token] = np.append(rng.choice(words, SUCCESSORS, replace=False), eot)
                words_prob = rng.dirichlet(np.ones(SUCCESSORS)) * (1 - 1 / MEAN_DOCUMENT)
                self.prob[token] = np.append(words_prob, 1 / MEAN_DOCUMENT)
        self.cumulative = np.cumsum(self.prob, axis=1)
        self.cumulative[:, -1] = 1.0

    @property
    def floor(self) -> float:
        """The entropy rate in nats per token: the loss of a model that knows the chain."""
        stationary = np.full(self.vocab_size, 1.0 / self.vocab_size)
        for _ in range(100_000):
            updated = np.zeros(self.vocab_size)
            np.add.at(updated, self.next.ravel(), (stationary[:, None] * self.prob).ravel())
            converged = np.abs(updated - stationary).sum() < 1e-14
            stationary = updated
            if converged:
                break
        row_entropy = -(self.prob * np.log(self.prob)).sum(axis=1)
        return float(stationary @ row_entropy)

    def sample(self, tokens: int, seed: int) -> np.ndarray:
        """At least `tokens` tokens of whole documents, each ending in end-of-text, as uint16 (uint32 past 65,536)."""
        rng = np.random.default_rng(seed)
        steps = max(4 * MEAN_DOCUMENT, 2 * tokens // STREAMS)  # each stream then holds several whole documents
        streams = np.empty((STREAMS, steps), dtype=np.int64)
        state = np.full(STREAMS, self.eot)
        rows = np.arange(STREAMS)
        for step in range(steps):
            choice = (rng.random(STREAMS)[:, None] > self.cumulative[state]).sum(axis=1)
            state = self.next[state, choice]
            streams[rows, step] = state
        parts = []
        for stream in streams:  # cut after each stream's last end-of-text, so every document is whole
            ends = np.flatnonzero(stream == self.eot)
            if len(ends):
                parts.append(stream[: ends[-1] + 1])
        whole = np.concatenate(parts)
        end = np.flatnonzero(whole[tokens - 1 :] == self.eot)  # the end of the document that reaches `tokens`
        whole = whole[: tokens + int(end[0])] if len(end) else whole
        return whole.astype(np.uint16 if self.vocab_size <= 1 << 16 else np.uint32)
