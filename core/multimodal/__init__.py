"""Multimodal input: media decoding and encoders, as llama.cpp's tools/mtmd."""
