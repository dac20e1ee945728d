"""Multimodal input (llama.cpp's tools/mtmd): projector files, media decoding and preprocessing,
the vision encoders by projector type, and the prompt as chunks of text and media embeddings.

`audio/` holds the audio front end and encoders."""
