"""The llama.cpp peer: ``llama`` (section ``llama``, b: single stream with a control
vector), ``llama_batch`` (several sequences per batch) and ``gguf_f32`` (the fp32 GGUF
it runs on).

Imports only :mod:`experiments.bench.core`.
"""
