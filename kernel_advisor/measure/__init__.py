"""Measured advice: actions gated against eager and timed interleaved in the real model."""
