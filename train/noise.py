"""BART's denoising objective: sentence permutation + text infilling (Poisson span lengths, one mask each)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .batching import Batch, Sample, collate


@dataclass(frozen=True)
class NoiseOptions:
    mask_ratio: float = 0.3  # share of tokens inside masked spans
    poisson_lambda: float = 3.0  # mean span length
    permute_sentences: bool = True


def corrupt(segment: np.ndarray, rng: np.random.Generator, mask_id: int, options: NoiseOptions) -> list[int]:
    """A packed segment (sentences separated by -1) -> noised token ids."""
    sentences = np.split(segment, np.flatnonzero(segment == -1))
    sentences = [s[s != -1] for s in sentences]
    if options.permute_sentences and len(sentences) > 1:
        sentences = [sentences[i] for i in rng.permutation(len(sentences))]
    tokens = np.concatenate(sentences).tolist()
    budget = int(round(len(tokens) * options.mask_ratio))
    out, i = [], 0
    starts = set(rng.choice(len(tokens), size=min(len(tokens), max(1, budget // 3)), replace=False).tolist())
    while i < len(tokens):
        if i in starts and budget > 0:
            span = min(int(rng.poisson(options.poisson_lambda)), budget)
            out.append(mask_id)  # a zero-length span inserts a mask
            i += span
            budget -= span
        else:
            out.append(tokens[i])
            i += 1
    return out


class DenoisingSet:
    """Segments of the training documents, noised afresh for every (epoch, index), reproducibly."""

    def __init__(self, segments: list[np.ndarray], bos: int, eos: int, mask_id: int, seed: int,
                 options: NoiseOptions = NoiseOptions()):
        self.segments, self.bos, self.eos, self.mask_id = segments, bos, eos, mask_id
        self.seed, self.options = seed, options

    def __len__(self) -> int:
        return len(self.segments)

    def collate(self, samples: list[Sample], pad: int, decoder_start: int) -> Batch:
        return collate(samples, pad, decoder_start)

    def get(self, index: int, epoch: int = 0) -> Sample:
        rng = np.random.default_rng([self.seed, epoch, index])
        segment = self.segments[index]
        source = [self.bos] + corrupt(segment, rng, self.mask_id, self.options) + [self.eos]
        return Sample([source], segment[segment != -1].tolist() + [self.eos])
