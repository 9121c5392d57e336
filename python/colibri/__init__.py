"""colibri: Mixture-of-Experts LLM inference on CPU — Python binding (pure ctypes).

    import colibri
    with colibri.Model("model.colibri") as model, model.session() as s:
        for piece in s.generate("Once upon a time", max_tokens=32, temperature=0, stop=["\n\n"]):
            print(piece, end="", flush=True)
        print(s.last_result.finish_reason)  # "length", "stop", "eos", "context_full" or "callback"

    # llama-cpp-python's shape: OpenAI-style dicts, whole or streamed
    llm = colibri.Colibri("model.colibri", n_threads=4)
    print(llm.create_completion("Once upon a time", max_tokens=32, stop=["\n"])["choices"][0]["text"])
    for chunk in llm.create_chat_completion([{"role": "user", "content": "Hi"}], stream=True):
        print(chunk["choices"][0]["delta"].get("content", ""), end="")

The library (``libcolibri.so.1``: C ABI version 1) is found through ``$COLIBRI_LIB_PATH`` (a file
or a directory), then the package directory (where ``pip install ./python`` puts the one it
builds), then the system (see :func:`load_library`).
"""

from __future__ import annotations

from ._abi import FINISH_REASONS, KV_TYPES, MOE_STORAGES, QUANT_ACTS, ROUTING_MODES
from ._constants import COLIBRI_SEED_RANDOM as SEED_RANDOM
from ._lib import (
    ABI_VERSION,
    ColibriError,
    Library,
    LibraryNotFoundError,
    Status,
    get_library,
    load_library,
    status_name,
)
from .completions import Colibri
from .grammar import Grammar
from .model import FAMILIES, Model, ModelInfo
from .moe import MoeLayer
from .session import GenerationResult, Session

__all__ = [
    "ABI_VERSION",
    "FAMILIES",
    "FINISH_REASONS",
    "KV_TYPES",
    "MOE_STORAGES",
    "QUANT_ACTS",
    "ROUTING_MODES",
    "SEED_RANDOM",
    "Colibri",
    "ColibriError",
    "GenerationResult",
    "Library",
    "LibraryNotFoundError",
    "Model",
    "ModelInfo",
    "MoeLayer",
    "Session",
    "Grammar",
    "Status",
    "abi_version",
    "debug_panic",
    "get_library",
    "library_path",
    "load_library",
    "status_name",
    "status_str",
    "version",
]

__version__ = "0.1.0"


def version() -> str:
    """The loaded library's version (``colibri_version()``), e.g. "0.1.0"."""
    return get_library().version


def abi_version() -> int:
    """The loaded library's ABI version (``colibri_abi_version()``)."""
    return get_library().abi_version


def library_path() -> str:
    """The path libcolibri was loaded from."""
    return get_library().path


def status_str(status: int) -> str:
    """The library's static description of a status value (``colibri_status_str``)."""
    return get_library().status_str(status)


def debug_panic() -> None:
    """Call ``colibri_debug_panic``, which panics inside the library: the panic boundary turns it
    into ``ColibriError`` with status PANIC and the process carries on. For tests."""
    lib = get_library()
    lib.check(lib.colibri_debug_panic())
