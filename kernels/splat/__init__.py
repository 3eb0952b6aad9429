"""Differentiable Gaussian-splatting rasterizer (DESIGN.md, "Gaussian rasterizer conventions")."""
