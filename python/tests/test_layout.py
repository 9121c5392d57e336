"""The package's shape: imports go one way (model -> session -> generation, never back), no
module is over 600 lines, every public name stays importable from the package, and the ctypes
structs lay out exactly the fields of include/colibri.h's structs."""

from __future__ import annotations

import ast
import ctypes
import re
import subprocess
import sys
from typing import Dict, List, Set, Tuple

import colibri
from colibri import _abi
from conftest import PYTHON_DIR, REPO

PACKAGE = PYTHON_DIR / "colibri"


def _runtime_imports(module: str) -> Set[str]:
    """The package modules `module` imports at run time (imports under `if TYPE_CHECKING:` are
    for annotations only and do not count)."""
    tree = ast.parse((PACKAGE / f"{module}.py").read_text(encoding="utf-8"))
    skip: Set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for b in node.body for n in ast.walk(b))
    out: Set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip or not isinstance(node, ast.ImportFrom) or node.level != 1:
            continue
        if node.module:
            out.add(node.module.split(".")[0])
        else:
            out.update(a.name for a in node.names)
    return out


def test_imports_go_one_way() -> None:
    graph: Dict[str, Set[str]] = {p.stem: _runtime_imports(p.stem) for p in PACKAGE.glob("*.py")}
    assert "session" in graph["model"]
    assert "model" not in graph["session"] and "model" not in graph["generation"]
    assert "session" not in graph["generation"]

    # No cycle anywhere in the package (function-local imports included).
    def visit(m: str, path: List[str]) -> None:
        assert m not in path, " -> ".join(path + [m])
        for n in graph.get(m, ()):
            if n in graph and n != "__init__":
                visit(n, path + [m])

    for m in graph:
        if m != "__init__":
            visit(m, [])


def test_session_imports_without_model() -> None:
    """colibri.session can be imported on its own: it does not need colibri.model."""
    code = (
        "import sys, types, importlib\n"
        f"pkg = types.ModuleType('colibri'); pkg.__path__ = [{str(PACKAGE)!r}]; sys.modules['colibri'] = pkg\n"
        "importlib.import_module('colibri.session')\n"
        "assert 'colibri.model' not in sys.modules, sorted(sys.modules)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_no_module_over_600_lines() -> None:
    for p in sorted(PACKAGE.glob("*.py")):
        n = len(p.read_text(encoding="utf-8").splitlines())
        assert n <= 600, f"{p.name} has {n} lines"


def test_public_names_are_importable_from_the_package() -> None:
    for name in colibri.__all__:
        assert hasattr(colibri, name), name
    from colibri.model import FAMILIES, Model, ModelInfo, infer_batch  # noqa: F401
    from colibri.session import GenerationResult, Logits, Session  # noqa: F401
    from colibri._lib import ColibriError, Library, SessionParams, Status, get_library, load_library  # noqa: F401

    assert colibri.Session is Session and colibri.Model is Model


# -- struct layouts ------------------------------------------------------------------------------

#: C field types of the header -> size in bytes (the colibri_* enum typedefs are int32_t).
_C_SIZES = {
    "uint32_t": 4, "int32_t": 4, "float": 4, "uint64_t": 8, "size_t": ctypes.sizeof(ctypes.c_size_t),
    "colibri_kv_type": 4, "colibri_routing_mode": 4, "colibri_quant_act": 4, "colibri_family": 4,
    "colibri_finish_reason": 4, "colibri_moe_storage": 4, "colibri_pooling": 4,
}


def _header_structs() -> Dict[str, List[Tuple[str, int]]]:
    """``typedef struct { ... } name;`` of the header -> [(field, size)] in order."""
    text = re.sub(r"/\*.*?\*/", "", (REPO / "include" / "colibri.h").read_text(encoding="utf-8"), flags=re.S)
    out: Dict[str, List[Tuple[str, int]]] = {}
    for body, name in re.findall(r"typedef struct \{(.*?)\} (colibri_\w+);", text, re.S):
        fields = []
        for decl in body.split(";"):
            decl = " ".join(decl.split())
            if not decl:
                continue
            ctype, field = decl.rsplit(" ", 1)
            size = ctypes.sizeof(ctypes.c_void_p) if "*" in decl else _C_SIZES[ctype]
            fields.append((field.lstrip("*"), size))
        out[name] = fields
    return out


def test_structs_mirror_the_header() -> None:
    mirrors = {
        "colibri_generate_params": _abi.GenerateParams,
        "colibri_generate_result": _abi.GenerateResult,
        "colibri_model_params": _abi.ModelParams,
        "colibri_moe_params": _abi.MoeParams,
        "colibri_model_info": _abi.ModelInfoStruct,
        "colibri_session_params": _abi.SessionParams,
        "colibri_params": _abi.Params,
        "colibri_chat_message": _abi.ChatMessage,
        "colibri_embed_params": _abi.EmbedParams,
    }
    structs = _header_structs()
    assert set(structs) == set(mirrors), set(structs) ^ set(mirrors)
    for cname, cls in mirrors.items():
        got = [(f[0], ctypes.sizeof(f[1])) for f in cls._fields_]
        assert got == structs[cname], cname
