"""fastdyn: compiled-kernel simulator of linear self-attention learning dynamics."""
__version__ = "0.1.0"
