"""An fp32 GGUF for the llama.cpp peer: the quantized GGUF with every tensor dequantized.

The embedded model ships as a Q4_K_M GGUF, and our fp32 model is that file dequantized
(``steering.assets``). llama.cpp on the Q4_K_M file computes with 4-bit weights, a
different and lighter workload than ours; issue 17 compares against llama.cpp in fp32.
Dequantizing the same file gives llama.cpp exactly our weights, in fp32.

llama.cpp's own converter (``convert_hf_to_gguf.py``) is not on PyPI; the ``gguf``
package (which transformers already needs to read GGUF) reads, dequantizes and writes,
and this module only copies the metadata across (as its ``gguf_new_metadata`` script does).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

F32_SUFFIX = "-dequantized-f32.gguf"


def f32_path(src: Path) -> Path:
    return src.with_name(src.stem + F32_SUFFIX)


def f32_gguf(src: Path, say: Callable[[str], None] = lambda _m: None) -> Path:
    """The fp32 copy of ``src`` next to it, made once (atomically) and reused."""
    dst = f32_path(src)
    if dst.is_file() and dst.stat().st_mtime >= src.stat().st_mtime:
        return dst
    import numpy as np
    from gguf import GGUFReader, GGUFValueType, GGUFWriter, LlamaFileType
    from gguf.constants import Keys
    from gguf.quants import dequantize

    say(f"llama: writing an fp32 copy of {src.name} (once)")
    reader = GGUFReader(src)
    arch_field = reader.get_field(Keys.General.ARCHITECTURE)
    if arch_field is None:
        raise ValueError(f"{src} has no {Keys.General.ARCHITECTURE} field")
    tmp = dst.with_name(dst.name + f".tmp{os.getpid()}")
    writer = GGUFWriter(tmp, arch=arch_field.contents())
    for field in reader.fields.values():
        if field.name == Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        value = field.contents()
        if field.name == Keys.General.FILE_TYPE:
            value = int(LlamaFileType.ALL_F32)
        vtype = field.types[0]
        sub_type = field.types[-1] if vtype == GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, value, vtype, sub_type=sub_type)
    for tensor in reader.tensors:
        data = dequantize(tensor.data, tensor.tensor_type).astype(np.float32, copy=False)
        writer.add_tensor(tensor.name, data)
    try:
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        tmp.replace(dst)
    finally:
        tmp.unlink(missing_ok=True)
    return dst
