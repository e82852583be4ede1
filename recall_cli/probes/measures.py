"""What a probe measures, as pure functions on tensors: CKA, drift, Spearman, mean pooling.

Everything is computed in float64: CKA of a few hundred sentences is a ratio of sums of squares of
Gram entries, where float32 loses digits that the retained-skill comparisons are about.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor


def mean_pool(hidden: Tensor, attention_mask: Tensor) -> Tensor:
    """Each sentence's token vectors averaged over its non-padding tokens: (B, T, H) -> (B, H)."""
    mask = attention_mask.to(hidden.dtype).unsqueeze(-1)
    return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)


def linear_cka(x: Tensor, y: Tensor) -> float:
    """Linear CKA (Kornblith et al. 2019) of two representations of the same n examples.

    x is (n, p), y is (n, q). With column-centred X and Y:
    CKA = ||Yᵀ X||_F² / (||Xᵀ X||_F · ||Yᵀ Y||_F), which equals HSIC(K, L) / sqrt(HSIC(K, K) HSIC(L, L))
    for the linear kernels K = XXᵀ, L = YYᵀ. 1 for the same representation up to an orthogonal map
    and an isotropic scale; NaN when either side is constant."""
    x = _centred(x)
    y = _centred(y)
    cross = torch.linalg.matrix_norm(y.T @ x) ** 2
    norm = torch.linalg.matrix_norm(x.T @ x) * torch.linalg.matrix_norm(y.T @ y)
    return float(cross / norm) if norm > 0 else math.nan


def unbiased_hsic(k: Tensor, l: Tensor) -> float:
    """The unbiased HSIC estimator of Song et al. (2012), eq. 5, for Gram matrices k and l (n >= 4).

    With K̃, L̃ the Gram matrices with zeroed diagonals and 1 the ones vector:
    [tr(K̃L̃) + 1ᵀK̃1 · 1ᵀL̃1 / ((n-1)(n-2)) - 2/(n-2) · 1ᵀK̃L̃1] / (n(n-3))."""
    n = k.shape[0]
    if n < 4:
        raise ValueError(f"the unbiased HSIC needs at least 4 examples, got {n}")
    k = k.to(torch.float64).clone()
    l = l.to(torch.float64).clone()
    k.fill_diagonal_(0.0)
    l.fill_diagonal_(0.0)
    trace = (k * l).sum()  # tr(K̃L̃) for symmetric matrices
    sums = k.sum() * l.sum() / ((n - 1) * (n - 2))
    cross = 2.0 / (n - 2) * (k.sum(dim=0) @ l.sum(dim=1))
    return float((trace + sums - cross) / (n * (n - 3)))


def debiased_cka(x: Tensor, y: Tensor) -> float:
    """Linear CKA with the unbiased HSIC in place of the biased one (Kornblith et al. 2019, sec. 3;
    Song et al. 2012): less optimistic than ``linear_cka`` when examples are few next to the width.
    NaN when a self-similarity estimate is not positive (too few, or constant, examples)."""
    x = x.to(torch.float64)
    y = y.to(torch.float64)
    k, l = x @ x.T, y @ y.T
    kk, ll = unbiased_hsic(k, k), unbiased_hsic(l, l)
    if kk <= 0 or ll <= 0:
        return math.nan
    return unbiased_hsic(k, l) / math.sqrt(kk * ll)


def drift(theta: Tensor, star: Tensor) -> float:
    """Feature drift: the mean over examples of 1 - cos(e_θ(x), e_θ*(x)), rows being examples."""
    cos = torch.nn.functional.cosine_similarity(theta.to(torch.float64), star.to(torch.float64), dim=1)
    return float((1.0 - cos).clamp(min=0.0).mean())  # rounding can put cos a hair above 1


def pair_cosines(first: Tensor, second: Tensor) -> np.ndarray:
    """The cosine of each pair's two embeddings (cosine of L2-normalised vectors is the same)."""
    return torch.nn.functional.cosine_similarity(first.to(torch.float64), second.to(torch.float64), dim=1).numpy()


def spearman(predicted: np.ndarray, gold: np.ndarray) -> float:
    from scipy.stats import spearmanr

    if np.ptp(predicted) == 0 or np.ptp(gold) == 0:
        return math.nan  # a constant ranking has no correlation; scipy would warn and return nan
    return float(spearmanr(predicted, gold).statistic)


def _centred(x: Tensor) -> Tensor:
    x = x.to(torch.float64)
    return x - x.mean(dim=0, keepdim=True)
