"""Structured output: :class:`Grammar`, a response format compiled against a model's vocabulary
(``colibri_grammar_new``). Pass it as ``grammar=`` to ``Session.complete``: the output is then
held to it, and a generation whose finish reason is "eos" is a complete, valid JSON document."""

from __future__ import annotations

import json
from ctypes import byref, c_void_p
from typing import Any, Optional

from ._args import encode_text
from ._constants import COLIBRI_RESPONSE_JSON_OBJECT as RESPONSE_JSON_OBJECT
from ._constants import COLIBRI_RESPONSE_JSON_SCHEMA as RESPONSE_JSON_SCHEMA
from ._handle import OwnedHandle
from ._lib import Status


class Grammar(OwnedHandle):
    """Any JSON object (``json_schema=None``) or JSON valid against ``json_schema`` (a dict or
    bool, dumped as JSON, or the schema's JSON text), for generations on sessions of `model`.
    Raises ColibriError INVALID_ARGUMENT for a schema the grammar engine refuses (the message
    says why), UNSUPPORTED for a model without tokenizer. The first grammar of a model prepares
    its vocabulary (1-2 s for 150k tokens); a grammar can serve any number of generations."""

    _kind = "grammar"

    def __init__(self, model: Any, json_schema: Any = None) -> None:
        lib = model.lib
        if json_schema is None:
            kind, text = RESPONSE_JSON_OBJECT, b""
        else:
            raw = json_schema if isinstance(json_schema, str) else json.dumps(json_schema)
            kind, text = RESPONSE_JSON_SCHEMA, encode_text("json_schema", raw)
        h = c_void_p()
        with model._shared() as mh:
            st = lib.colibri_grammar_new(mh, kind, text, len(text), byref(h))
        if st != Status.OK:
            raise lib.error(st)
        super().__init__(lib, h.value, lib.colibri_grammar_free)  # type: ignore[arg-type]
        self.json_schema: Optional[Any] = json_schema
