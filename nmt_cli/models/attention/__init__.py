"""Attention mechanisms: RNN score functions, local windows, multi-head softmax and linear attention."""
