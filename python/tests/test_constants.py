"""The binding's named values come from include/colibri.h: colibri/_constants.py is exactly what
tools/gen_constants.py makes of the current header (like the Rust side's header-freshness test),
and every table the binding builds from it covers the header's whole family of constants."""

from __future__ import annotations

import ast
import importlib.util
import re
import subprocess
import sys
from types import ModuleType

import colibri
from colibri import _constants
from conftest import PYTHON_DIR, REPO

HEADER = REPO / "include" / "colibri.h"
TOOL = PYTHON_DIR / "tools" / "gen_constants.py"


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_constants", TOOL)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_committed_constants_are_what_the_generator_makes_of_the_header() -> None:
    fresh = _tool().render(HEADER.read_text(encoding="utf-8"))
    committed = (PYTHON_DIR / "colibri" / "_constants.py").read_text(encoding="utf-8")
    assert fresh == committed, "python/colibri/_constants.py is stale: run python3 python/tools/gen_constants.py"


def test_generator_check_mode_agrees() -> None:
    out = subprocess.run([sys.executable, str(TOOL), "--check"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_every_integer_macro_is_there_with_its_value() -> None:
    header = HEADER.read_text(encoding="utf-8")
    macros = dict(re.findall(r"^#define (COLIBRI_\w+) (-?\d+)(?:ull)?$", header, re.M))
    assert len(macros) >= 30 and "COLIBRI_ABI_VERSION" in macros
    got = {k: v for k, v in vars(_constants).items() if k.startswith("COLIBRI_")}
    assert got == {k: int(v) for k, v in macros.items()}


def test_generator_reads_docs_and_refuses_duplicates() -> None:
    tool = _tool()
    text = "/**\n * The answer.\n */\n#define COLIBRI_X_A 42\n\n#define COLIBRI_X_B -1\n#define OTHER 3\n#define COLIBRI_X_C 7ull\n"
    assert tool.extract(text) == [("COLIBRI_X_A", 42, "The answer."), ("COLIBRI_X_B", -1, None), ("COLIBRI_X_C", 7, None)]
    try:
        tool.extract("#define COLIBRI_X 1\n#define COLIBRI_X 2\n")
    except ValueError as e:
        assert "COLIBRI_X" in str(e)
    else:
        raise AssertionError("a duplicate macro was accepted")


def _family(prefix: str) -> dict:
    return {k[len(prefix):]: v for k, v in vars(_constants).items() if k.startswith(prefix)}


def test_tables_cover_every_constant_of_their_family() -> None:
    assert {s.name: s.value for s in colibri.Status} == _family("COLIBRI_STATUS_")
    assert colibri.KV_TYPES == {k.lower(): v for k, v in _family("COLIBRI_KV_").items()}
    assert colibri.ROUTING_MODES == {k.lower(): v for k, v in _family("COLIBRI_ROUTING_").items()}
    assert colibri.QUANT_ACTS == {k.lower(): v for k, v in _family("COLIBRI_QUANT_ACT_").items()}
    assert colibri.FINISH_REASONS == {v: k.lower() for k, v in _family("COLIBRI_FINISH_").items()}
    assert colibri.FAMILIES == {v: k.lower() for k, v in _family("COLIBRI_FAMILY_").items()}
    assert colibri.ABI_VERSION == _constants.COLIBRI_ABI_VERSION
    # The names the binding documents.
    assert set(colibri.FINISH_REASONS.values()) == {"length", "stop", "eos", "context_full", "callback"}
    assert set(colibri.QUANT_ACTS) == {"default", "reduced", "float"}


def test_no_binding_module_restates_a_constant_by_hand() -> None:
    """Outside the generated module, no code binds a name of a header constant's families to a
    literal number, nor builds a table between names and literal numbers (docstrings may quote
    them)."""
    families = ("KV_", "ROUTING_", "QUANT_ACT_", "FINISH_", "FAMILY_", "STATUS_", "ABI_")

    def literal(node: ast.AST, kind: type) -> bool:
        return isinstance(node, ast.Constant) and type(node.value) is kind

    for path in sorted((PYTHON_DIR / "colibri").glob("*.py")):
        if path.name == "_constants.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Assign) and literal(node.value, int):
                for t in node.targets:
                    name = ast.unparse(t).split(".")[-1].upper()
                    assert not name.startswith(families) and name != "OK", f"{path.name}:{node.lineno}"
            if isinstance(node, ast.Dict) and node.keys:
                pairs = list(zip(node.keys, node.values))
                assert not all(
                    (literal(k, str) and literal(v, int)) or (literal(k, int) and literal(v, str))
                    for k, v in pairs
                    if k is not None
                ), f"{path.name}:{node.lineno} has a table of literal numbers"
