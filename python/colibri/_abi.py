"""The C ABI of include/colibri.h as ctypes sees it: the named values (from the generated
:mod:`colibri._constants`, never restated here), the structs, the callback types and the
prototype (``restype``, ``argtypes``) of every exported function. Nothing here loads the
library; :mod:`colibri._lib` applies these declarations to a loaded one."""

from __future__ import annotations

import enum
from ctypes import (
    CFUNCTYPE,
    POINTER,
    Structure,
    c_char,
    c_char_p,
    c_float,
    c_int32,
    c_size_t,
    c_uint8,
    c_uint32,
    c_uint64,
    c_void_p,
)
from typing import Any, Dict, List, Tuple

from . import _constants as C

__all__ = [
    "ABI_VERSION",
    "FAMILIES",
    "FINISH_REASONS",
    "KV_TYPES",
    "MOE_STORAGES",
    "POOLINGS",
    "QUANT_ACTS",
    "ROUTING_MODES",
    "ChatMessage",
    "EmbedParams",
    "GenerateParams",
    "GenerateResult",
    "ModelInfoStruct",
    "ModelParams",
    "MoeParams",
    "ROUTE_ABORT",
    "Params",
    "RouteCallback",
    "SessionParams",
    "Status",
    "TokenCallback",
]

#: The ABI major version this binding was written against (COLIBRI_ABI_VERSION).
ABI_VERSION: int = C.COLIBRI_ABI_VERSION


def named(prefix: str) -> Dict[str, int]:
    """``{suffix in lower case: value}`` of the header's constants ``<prefix><SUFFIX>``, in
    header order: ``named("COLIBRI_KV_")`` is ``{"f32": 0, "f16": 1, "bf16": 2}``."""
    return {k[len(prefix):].lower(): v for k, v in vars(C).items() if k.startswith(prefix)}


#: ``kv_type`` names of a session (``COLIBRI_KV_*``): "f32", "f16", "bf16".
KV_TYPES = named("COLIBRI_KV_")
#: ``routing_mode`` names (``COLIBRI_ROUTING_*``): "topk", "gumbel".
ROUTING_MODES = named("COLIBRI_ROUTING_")
#: ``MoeLayer`` storage names (``COLIBRI_MOE_*``): "f32", "bf16", "q8".
MOE_STORAGES = named("COLIBRI_MOE_")
#: ``quant_act`` names (``COLIBRI_QUANT_ACT_*``): "default", "reduced", "float".
QUANT_ACTS = named("COLIBRI_QUANT_ACT_")
#: ``colibri_embed`` pooling names (``COLIBRI_POOLING_*``): "mean", "last", "cls".
POOLINGS = named("COLIBRI_POOLING_")
#: ``colibri_generate_result.finish_reason`` value -> name (``COLIBRI_FINISH_*``): "length",
#: "stop", "eos", "context_full", "callback".
FINISH_REASONS = {v: k for k, v in named("COLIBRI_FINISH_").items()}
#: ``colibri_model_info.family`` value -> name (``COLIBRI_FAMILY_*``): "mixtral", "qwen2_moe", ...
FAMILIES = {v: k for k, v in named("COLIBRI_FAMILY_").items()}

#: What a route callback returns to fail the call it reports on (``COLIBRI_ROUTE_ABORT``): the
#: call returns ``Status.ABORTED`` and the session is as it was before it.
ROUTE_ABORT: int = C.COLIBRI_ROUTE_ABORT

#: ``colibri_status`` values (``COLIBRI_STATUS_*``, frozen numbers of the C ABI): ``Status.OK``,
#: ``Status.INVALID_ARGUMENT``, ... ``Status.BAD_STRUCT_SIZE``.
Status = enum.IntEnum(  # type: ignore[misc]
    "Status",
    [(k.upper(), v) for k, v in named("COLIBRI_STATUS_").items()],
    module=__name__,
    qualname="Status",
)
Status.__doc__ = "``colibri_status`` values (``COLIBRI_STATUS_*`` of include/colibri.h)."


# ---------------------------------------------------------------------------------------------
# Structs (mirrors of include/colibri.h; the *_init functions set struct_size and defaults)
# ---------------------------------------------------------------------------------------------


class GenerateParams(Structure):
    """``colibri_generate_params``: sampling, limits and stop strings of one generation."""

    _fields_ = [
        ("struct_size", c_uint32),
        ("temperature", c_float),
        ("top_k", c_int32),
        ("top_p", c_float),
        ("min_p", c_float),
        ("repetition_penalty", c_float),
        ("presence_penalty", c_float),
        ("frequency_penalty", c_float),
        ("penalty_last_n", c_int32),
        ("max_tokens", c_int32),
        ("ignore_eos", c_int32),
        ("reserved", c_int32),
        ("seed", c_uint64),
        ("stop", POINTER(c_char_p)),
        ("n_stop", c_size_t),
        ("grammar", c_void_p),
    ]


class GenerateResult(Structure):
    """``colibri_generate_result``: why a generation ended and what it delivered."""

    _fields_ = [
        ("struct_size", c_uint32),
        ("finish_reason", c_int32),
        ("n_tokens", c_size_t),
        ("n_cached", c_size_t),
    ]


class ModelParams(Structure):
    """``colibri_model_params``."""

    _fields_ = [
        ("struct_size", c_uint32),
        ("use_mmap", c_int32),
        ("use_mlock", c_int32),
        ("sigbus_guard", c_int32),
        ("n_threads", c_uint32),
        ("pin_threads", c_int32),
        ("use_hugepages", c_int32),
    ]


class EmbedParams(Structure):
    """``colibri_embed_params``."""

    _fields_ = [
        ("struct_size", c_uint32),
        ("pooling", c_int32),
        ("normalize", c_int32),
        ("quant_act", c_int32),
    ]


class MoeParams(Structure):
    """``colibri_moe_params``."""

    _fields_ = [
        ("struct_size", c_uint32),
        ("storage", c_int32),
        ("n_threads", c_uint32),
    ]


class ModelInfoStruct(Structure):
    """``colibri_model_info``."""

    _fields_ = [
        ("struct_size", c_uint32),
        ("family", c_int32),
        ("vocab_size", c_uint32),
        ("n_ctx_train", c_uint32),
        ("hidden_size", c_uint32),
        ("n_layers", c_uint32),
        ("n_experts", c_uint32),
        ("top_k", c_uint32),
        ("n_params", c_uint64),
        ("n_active_params", c_uint64),
        ("bos_token", c_int32),
        ("eos_token", c_int32),
        ("n_recurrent_layers", c_uint32),
        ("n_attention_layers", c_uint32),
        ("session_state_bytes", c_uint64),
    ]


class SessionParams(Structure):
    """``colibri_session_params``."""

    _fields_ = [
        ("struct_size", c_uint32),
        ("n_ctx", c_uint32),
        ("kv_type", c_int32),
        ("all_logits", c_int32),
        ("routing_mode", c_int32),
        ("moe_top_k", c_int32),
        ("routing_seed", c_uint64),
        ("quant_act", c_int32),
        ("reserved", c_int32),
    ]


class Params(Structure):
    """``colibri_params`` (for ``colibri_init``)."""

    _fields_ = [
        ("struct_size", c_uint32),
        ("use_mmap", c_int32),
        ("use_mlock", c_int32),
        ("n_ctx", c_uint32),
        ("kv_type", c_int32),
        ("all_logits", c_int32),
        ("routing_mode", c_int32),
        ("moe_top_k", c_int32),
        ("routing_seed", c_uint64),
        ("quant_act", c_int32),
        ("reserved", c_int32),
        ("n_threads", c_uint32),
        ("pin_threads", c_int32),
        ("use_hugepages", c_int32),
        ("reserved2", c_int32),
    ]


class ChatMessage(Structure):
    """``colibri_chat_message`` (two NUL-terminated UTF-8 strings)."""

    _fields_ = [("role", c_char_p), ("content", c_char_p)]


#: ``colibri_token_callback``: (userdata, token, text, text_len) -> int, 0 to continue and
#: non-zero to stop. ``text`` is declared as a void pointer because it is not NUL-terminated
#: (read it with ctypes.string_at(text, len)).
TokenCallback = CFUNCTYPE(c_int32, c_void_p, c_int32, c_void_p, c_size_t)

#: ``colibri_route_callback``: (userdata, layer, position, experts, weights, k) -> int: 0 to go
#: on, positive to skip the call's remaining records, ``ROUTE_ABORT`` to fail and undo the call.
RouteCallback = CFUNCTYPE(c_int32, c_void_p, c_int32, c_int32, POINTER(c_int32), POINTER(c_float), c_size_t)

# Opaque handles travel as void pointers.
_handle = c_void_p
_status = c_int32

#: name -> (restype, argtypes): every exported function of include/colibri.h.
PROTOTYPES: Dict[str, Tuple[Any, List[Any]]] = {
    "colibri_version": (c_char_p, []),
    "colibri_abi_version": (c_uint32, []),
    "colibri_embed_params_init": (None, [POINTER(EmbedParams)]),
    "colibri_embed_params_init_sized": (_status, [POINTER(EmbedParams), c_size_t]),
    "colibri_embed": (
        _status,
        [_handle, POINTER(c_int32), c_size_t, POINTER(EmbedParams), POINTER(c_float), c_size_t, POINTER(c_size_t)],
    ),
    "colibri_generate_params_init": (None, [POINTER(GenerateParams)]),
    "colibri_generate_params_init_sized": (_status, [POINTER(GenerateParams), c_size_t]),
    "colibri_generate_result_init": (None, [POINTER(GenerateResult)]),
    "colibri_generate_result_init_sized": (_status, [POINTER(GenerateResult), c_size_t]),
    "colibri_generate": (
        _status,
        [_handle, POINTER(c_int32), c_size_t, POINTER(GenerateParams), TokenCallback, c_void_p,
         POINTER(c_int32), c_size_t, POINTER(GenerateResult)],
    ),
    "colibri_model_params_init": (None, [POINTER(ModelParams)]),
    "colibri_model_params_init_sized": (_status, [POINTER(ModelParams), c_size_t]),
    "colibri_model_info_init": (None, [POINTER(ModelInfoStruct)]),
    "colibri_model_info_init_sized": (_status, [POINTER(ModelInfoStruct), c_size_t]),
    "colibri_model_open": (_status, [c_char_p, POINTER(ModelParams), POINTER(_handle)]),
    "colibri_model_free": (None, [_handle]),
    "colibri_grammar_new": (_status, [_handle, c_int32, c_char_p, c_size_t, POINTER(c_void_p)]),
    "colibri_grammar_free": (None, [_handle]),
    "colibri_model_get_info": (_status, [_handle, POINTER(ModelInfoStruct)]),
    "colibri_model_user_metadata": (_status, [_handle, POINTER(POINTER(c_uint8)), POINTER(c_size_t)]),
    "colibri_moe_init": (
        _status,
        [POINTER(_handle), POINTER(c_float), POINTER(c_int32), c_int32, c_int32, c_int32],
    ),
    "colibri_moe_init_with": (
        _status,
        [POINTER(_handle), POINTER(c_float), POINTER(c_int32), c_int32, c_int32, c_int32, c_int32],
    ),
    "colibri_moe_params_init": (None, [POINTER(MoeParams)]),
    "colibri_moe_params_init_sized": (_status, [POINTER(MoeParams), c_size_t]),
    "colibri_moe_init_params": (
        _status,
        [POINTER(_handle), POINTER(c_float), POINTER(c_int32), c_int32, c_int32, c_int32, POINTER(MoeParams)],
    ),
    "colibri_moe_infer": (_status, [_handle, POINTER(c_float), POINTER(c_float), POINTER(c_float)]),
    "colibri_moe_free": (None, [_handle]),
    "colibri_last_error_message": (c_char_p, []),
    "colibri_last_error_message_copy": (c_size_t, [POINTER(c_char), c_size_t]),
    "colibri_debug_panic": (_status, []),
    "colibri_session_params_init": (None, [POINTER(SessionParams)]),
    "colibri_session_params_init_sized": (_status, [POINTER(SessionParams), c_size_t]),
    "colibri_params_init": (None, [POINTER(Params)]),
    "colibri_params_init_sized": (_status, [POINTER(Params), c_size_t]),
    "colibri_session_new": (_status, [_handle, POINTER(SessionParams), POINTER(_handle)]),
    "colibri_session_free": (None, [_handle]),
    "colibri_init": (_status, [c_char_p, POINTER(Params), POINTER(_handle)]),
    "colibri_infer": (_status, [_handle, POINTER(c_int32), c_size_t, POINTER(c_float), c_size_t]),
    "colibri_infer_batch": (
        _status,
        [_handle, POINTER(_handle), POINTER(POINTER(c_int32)), POINTER(c_size_t), c_size_t, POINTER(c_float),
         c_size_t],
    ),
    "colibri_infer_embeddings": (
        _status,
        [_handle, POINTER(c_float), c_size_t, c_size_t, POINTER(c_float), c_size_t],
    ),
    "colibri_free": (None, [_handle]),
    "colibri_session_reset": (_status, [_handle]),
    "colibri_session_truncate": (_status, [_handle, c_size_t]),
    "colibri_session_copy": (_status, [_handle, _handle]),
    "colibri_session_save_state": (_status, [_handle, c_char_p, POINTER(c_int32), c_size_t]),
    "colibri_session_load_state": (_status, [_handle, c_char_p, POINTER(c_int32), c_size_t, POINTER(c_size_t)]),
    "colibri_session_position": (_status, [_handle, POINTER(c_size_t), POINTER(c_size_t)]),
    "colibri_session_set_routing": (_status, [_handle, c_int32, c_uint64, c_int32]),
    "colibri_session_set_route_callback": (_status, [_handle, RouteCallback, c_void_p]),
    "colibri_status_str": (c_char_p, [c_int32]),
    "colibri_tokenize": (
        _status,
        [_handle, c_void_p, c_size_t, c_int32, POINTER(c_int32), c_size_t, POINTER(c_size_t)],
    ),
    "colibri_detokenize": (
        _status,
        [_handle, POINTER(c_int32), c_size_t, c_int32, POINTER(c_char), c_size_t, POINTER(c_size_t)],
    ),
    "colibri_chat_render": (
        _status,
        [_handle, POINTER(ChatMessage), c_size_t, c_int32, POINTER(c_char), c_size_t, POINTER(c_size_t)],
    ),
    "colibri_chat_tokenize": (
        _status,
        [_handle, POINTER(ChatMessage), c_size_t, c_int32, POINTER(c_int32), c_size_t, POINTER(c_size_t)],
    ),
}
