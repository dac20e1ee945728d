"""Measuring a model's quality on a text, as llama.cpp's tools do: `llama perplexity`
(llama-perplexity: perplexity, KL divergence against a base model's stored distributions)
and `llama imatrix` (llama-imatrix: the importance matrix that guides quantization).

Modules: chunks (cutting a text into chunks, running them through the batched prefill),
logprobs (per-position statistics with llama.cpp's arithmetic), kld_file (the base file),
kld (the KL-divergence statistics), perplexity (the passes), imatrix (the collector and its
pass), imatrix_stats (--show-statistics), task_files and choices (the HellaSwag, Winogrande
and multiple-choice benchmarks of llama-perplexity).
"""
