"""A small CNN on synthetic images, in sizes from a CPU smoke test to a 50-500 ms GPU step."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

NUM_CLASSES = 10


@dataclass(frozen=True)
class Size:
    image: int      # pixels per side of the (square, 3-channel) input
    width: int      # channels of the first block; doubled at each of the two downsamplings
    batch: int      # starting batch size (the GPU calibration scales it to a step time)


# gpu: ~58 GFLOP per image for forward + backward, so batch 256 is ~15 TFLOP a step: about
# 100-300 ms on an H100/H200-class GPU; `--target-step-ms` then fixes the batch on the spot.
SIZES = {
    "tiny": Size(image=32, width=8, batch=8),      # CPU smoke tests: a few ms a step
    "small": Size(image=64, width=16, batch=32),   # CPU demos: tens of ms a step
    "gpu": Size(image=128, width=128, batch=256),
}


def _block(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
        nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    )


class SmallCNN(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.features = nn.Sequential(
            _block(3, width), nn.MaxPool2d(2),
            _block(width, 2 * width), nn.MaxPool2d(2),
            _block(2 * width, 4 * width), nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Linear(4 * width, NUM_CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(self.features(x), 1))


def to_input(images_u8: torch.Tensor, device: torch.device) -> torch.Tensor:
    """uint8 NCHW images (as loaders ship them: 4x less to copy) to float on the device."""
    return images_u8.to(device, non_blocking=True).float().div_(255.0)
