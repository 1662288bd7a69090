"""A local module the trainer imports (what the reference cache must hash too): the loss."""

from __future__ import annotations

import torch

# the weight of the loss; editing it changes what the job computes (and so its fault-free reference)
LOSS_WEIGHT = 1.0


def loss_of(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Weighted mean squared error."""
    return LOSS_WEIGHT * torch.mean((pred - target) ** 2)
