"""DCGAN-like ConvTranspose2d decoder (BatchNorm + ReLU, 4x4 -> 64x64); expects channels_last to be judged (it can slow this down) and compile."""
import torch
import torch.nn as nn

BATCH, LATENT, WIDTH = 128, 128, 64
SMALL = {"BATCH": 2, "LATENT": 16, "WIDTH": 4}


def up(c_in, c_out):
    return [nn.ConvTranspose2d(c_in, c_out, 4, 2, 1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU()]


class Model(nn.Module):
    def __init__(self, latent, width):
        super().__init__()
        self.net = nn.Sequential(
            nn.ConvTranspose2d(latent, 8 * width, 4, 1, 0, bias=False), nn.BatchNorm2d(8 * width), nn.ReLU(),
            *up(8 * width, 4 * width), *up(4 * width, 2 * width), *up(2 * width, width),
            nn.ConvTranspose2d(width, 3, 4, 2, 1), nn.Tanh())

    def forward(self, z):
        return self.net(z)


def get_init_inputs():
    return [LATENT, WIDTH]


def get_inputs():
    return [torch.randn(BATCH, LATENT, 1, 1)]
