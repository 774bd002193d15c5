"""The GPU sections and the GPU check (CUDA only; issue 41): ``gpu`` (ours against HF
``generate`` on Gemma 3 4B's shape), ``gpu_profile`` (one decode step's kernel time by
kind), ``gpu_levers`` (each kernel variant side by side) and ``gpu_check`` (the luggage a
bare GPU machine needs, ``gpu_image_packages.txt``, and ``bench/gpu_check.sh``'s JSON).

Imports :mod:`experiments.bench.core`, :mod:`experiments.bench.decode` and
:mod:`experiments.bench.reporting`.
"""
