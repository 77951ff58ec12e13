"""UNet-ish net of conv + GroupNorm + SiLU with a nearest upsample and skip cat; expects compile for the group_norm->silu chains."""
import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH, IMAGE, WIDTH, GROUPS = 8, 128, 64, 32
SMALL = {"BATCH": 2, "IMAGE": 16, "WIDTH": 8, "GROUPS": 4}


class ResBlock(nn.Module):
    def __init__(self, c_in, c_out, groups):
        super().__init__()
        self.norm1, self.conv1 = nn.GroupNorm(groups, c_in), nn.Conv2d(c_in, c_out, 3, padding=1)
        self.norm2, self.conv2 = nn.GroupNorm(groups, c_out), nn.Conv2d(c_out, c_out, 3, padding=1)
        self.skip = nn.Conv2d(c_in, c_out, 1) if c_in != c_out else nn.Identity()

    def forward(self, x):
        h = self.conv1(F.silu(self.norm1(x)))
        h = self.conv2(F.silu(self.norm2(h)))
        return h + self.skip(x)


class Model(nn.Module):
    def __init__(self, width, groups):
        super().__init__()
        self.inp = nn.Conv2d(3, width, 3, padding=1)
        self.down1 = ResBlock(width, width, groups)
        self.down2 = ResBlock(width, 2 * width, groups)
        self.mid = ResBlock(2 * width, 2 * width, groups)
        self.up2 = ResBlock(4 * width, width, groups)
        self.up1 = ResBlock(2 * width, width, groups)
        self.out = nn.Sequential(nn.GroupNorm(groups, width), nn.SiLU(), nn.Conv2d(width, 3, 3, padding=1))

    def forward(self, x):
        h1 = self.down1(self.inp(x))
        h2 = self.down2(F.avg_pool2d(h1, 2))
        m = self.mid(F.avg_pool2d(h2, 2))
        u = self.up2(torch.cat([F.interpolate(m, scale_factor=2.0, mode="nearest"), h2], dim=1))
        u = self.up1(torch.cat([F.interpolate(u, scale_factor=2.0, mode="nearest"), h1], dim=1))
        return self.out(u)


def get_init_inputs():
    return [WIDTH, GROUPS]


def get_inputs():
    return [torch.randn(BATCH, 3, IMAGE, IMAGE)]
