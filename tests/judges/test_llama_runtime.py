"""llama.cpp on every CPU: the AMX guard and the crash-isolated first decode.

The embedded GGUF is decoded in a child process, as the judge, the bench and the tests'
shared model do before loading it here; a child that dies natively (what an AMX build did
on an Intel Xeon) becomes a named error instead of the end of the test run.
"""

from __future__ import annotations

import sys

import pytest

from judges.llama_runtime import (
    LlamaCrash,
    amx_compiled,
    extra_buffers_allowed,
    llama_options,
    run_check,
)

AMX_INFO = (
    "CPU : SSE3 = 1 | AVX2 = 1 | AVX512 = 1 | AVX512_VNNI = 1 | AVX512_BF16 = 1 | "
    "AMX_INT8 = 1 | LLAMAFILE = 1 | OPENMP = 1 | REPACK = 1 |"
)
AMD_INFO = "CPU : SSE3 = 1 | AVX2 = 1 | AVX512 = 1 | AVX512_BF16 = 1 | OPENMP = 1 | REPACK = 1 |"


def test_an_amx_build_loads_without_extra_buffers():
    assert amx_compiled(AMX_INFO) and not extra_buffers_allowed(AMX_INFO)
    assert not amx_compiled(AMD_INFO) and extra_buffers_allowed(AMD_INFO)
    assert llama_options(AMX_INFO)["llama_cpp_extra_buffers"] == "off (AMX compiled in)"
    assert llama_options(AMD_INFO)["llama_cpp_extra_buffers"] == "on"


def test_a_native_crash_in_the_child_is_a_named_error(tmp_path):
    crash = (
        "import os, signal\n"
        f"print('system_info: {AMX_INFO}', flush=True)\n"
        "os.kill(os.getpid(), signal.SIGSEGV)\n"
    )
    with pytest.raises(LlamaCrash) as info:
        run_check(tmp_path / "model.gguf", command=[sys.executable, "-c", crash])
    message = str(info.value)
    assert "SIGSEGV" in message
    assert "AMX_INT8 = 1" in message  # the build's features are named
    assert "make setup-judge" in message  # and the fix


def test_a_hung_child_is_a_named_error(tmp_path):
    with pytest.raises(LlamaCrash, match="within 1 s"):
        run_check(
            tmp_path / "model.gguf",
            command=[sys.executable, "-c", "import time; time.sleep(30)"],
            timeout=1,
        )


@pytest.mark.judge
def test_the_embedded_gguf_decodes_in_a_child(record_property):
    pytest.importorskip("llama_cpp")
    from steering.assets import require_embedded_gguf

    check = run_check(require_embedded_gguf())
    record_property("llama_cpp_system_info", check.system_info)  # the CPU flags it built for
    assert check.text.strip(), "the child decoded nothing"
    assert check.system_info.startswith("CPU :")
    # This repository's build leaves AMX out; a build with AMX must not use its buffers.
    assert check.extra_buffers == (not amx_compiled(check.system_info))


@pytest.mark.judge
def test_extra_buffers_off_loads_and_decodes_the_same_text():
    """The guard's path, forced on any CPU: plain CPU buffers give the same greedy text."""
    pytest.importorskip("llama_cpp")
    import llama_cpp.llama_cpp as low

    from judges.llama_runtime import CHECK_PROMPT, _model_defaults, open_llama
    from steering.assets import require_embedded_gguf

    path = require_embedded_gguf()
    original = low.llama_model_default_params
    texts = {}
    for allowed in (True, False):
        with _model_defaults(allowed):
            llm = llama_cpp_llama(path)
        assert bool(llm.model_params.use_extra_bufts) is allowed
        out = llm.create_completion(CHECK_PROMPT, max_tokens=6, temperature=0.0)
        texts[allowed] = out["choices"][0]["text"]
        llm.close()
    assert low.llama_model_default_params is original  # the defaults are restored
    assert texts[True] == texts[False]
    safe = open_llama(path, n_ctx=128, n_threads=1, verbose=False)
    assert bool(safe.model_params.use_extra_bufts) == extra_buffers_allowed(
        llama_options()["llama_cpp_system_info"]
    )
    safe.close()


def llama_cpp_llama(path):
    from llama_cpp import Llama

    return Llama(model_path=str(path), n_ctx=128, n_threads=1, verbose=False)


@pytest.mark.judge
def test_a_judge_whose_model_crashes_llama_cpp_is_skipped_with_the_reason(tmp_path):
    """A GGUF that llama.cpp cannot load kills the child, not the panel: the judge is
    skipped at build time and the reason names the child process."""
    pytest.importorskip("llama_cpp")
    from judges import build_panel
    from steering.assets import require_embedded_gguf

    broken = tmp_path / "truncated.gguf"
    broken.write_bytes(require_embedded_gguf().read_bytes()[: 1 << 20])
    judges, skipped = build_panel([f"llama/{broken}"])
    assert judges == []
    assert "child process" in skipped[f"llama/{broken}"]
