"""inr: learn an image as a function of its pixel coordinates."""

__version__ = "0.1.0"
