"""``steer-eval bench`` (``make bench``): what the Phase 5 workload costs, measured side by side.

Every comparison runs in one process, on the same model, rows (prompt, seed, direction,
strength) and token counts, and reports the median over repeats; the machine and its load
average are recorded with the numbers, because on a shared machine the ratios matter more
than absolute times.

One module per job (``--only``/``--skip`` pick the sections), in sub-packages that import
one way (``core`` <- ``decode``, ``llamacpp``, ``reporting`` <- ``gpu``; none imports
this top level):

- ``core``: ``options``, ``measure`` and ``workload``, what every section stands on;
- ``decode``: ``batched``: our batched generation against one HF ``generate`` per sample
  (a); ``dtype``: the same rows in bf16 and whether Δ per strength moves; ``peers``: HF
  ``generate`` on the whole batch with a per-row hook, and every other peer on the same
  rows; ``roofline``: the decode loop's FLOPs over the measured time, against the CPU's
  peak; ``profile``: one decode step under the torch profiler, by part; ``head``: the
  output head as one product or in blocks of vocabulary rows (speed, bits); ``tuning``:
  torch threads and batch size; ``scaling``: generation time against concepts and
  ``max_new_tokens``; ``load``: the same generation quiet and beside a busy process;
- ``llamacpp``: the llama.cpp peer (b): ``llama``, ``llama_batch`` and ``gguf_f32``;
- ``reporting``: ``report`` and ``gpu_report``, the results as plain tables;
- ``gpu`` (CUDA only): ``gpu`` (section ``gpu``): ours against HF ``generate`` on Gemma 3
  4B's shape with random weights; ``gpu_profile``: one decode step's kernel time by kind;
  ``gpu_levers``: our decode under each kernel variant, side by side; ``gpu_check``: the
  luggage a bare GPU machine needs and the one JSON of ``bench/gpu_check.sh`` (issue 41);
- here: ``e2e``: the whole ``make run`` in a subprocess, wall time by stage, peak memory
  (c, d); ``runner``: ``run_bench``, which ties them.

Targets (measured, never asserted; ``options.TARGETS``): batched >= 10x per-sample,
ours >= 2x HF ``generate`` on the batch with a hook, >= 4x llama.cpp single stream, the
decode loop at >= 50% of the fp32 peak, ``make run`` under 90 s warm, peak memory
under 3 GB.

This package never imports typer or rich, and importing it imports nothing heavy.
"""
