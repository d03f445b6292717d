"""A Hugging Face config.json to a Rope: the same mapping as client/hf_config.cc (what
`posenc-client --hf-config` reads), in HF's order of precedence:
  theta: rope_theta | rotary_emb_base | rope_parameters.rope_theta; default 10000.
  head_dim: qk_rope_head_dim | head_dim | hidden_size // num_attention_heads.
  rotary_dim: rotary_dim | int(head_dim * partial_rotary_factor) | int(head_dim * rotary_pct).
  style: GPTJ for model_type gptj/codegen/deepseek_v2/deepseek_v3 or rope_interleave.
  rope_scaling (or rope_parameters): rope_type or legacy type: default, linear, dynamic, yarn,
  llama3, longrope (su); mrope is the default rotation for text positions.
Errors are PosencError INVALID_ARGUMENT naming the file and key (NOT_FOUND: no such file).
"""
import json
import math

import grpc

from posenc.errors import PosencError, invalid
from posenc.schemes import Rope, RopeScaling

_SCALING_TYPES = {"default": "none", "none": "none", "mrope": "none", "linear": "linear",
                  "dynamic": "dynamic", "yarn": "yarn", "llama3": "llama3",
                  "longrope": "longrope", "su": "longrope"}


class _Reader:
    """Optional values of one JSON object; absent keys and null read alike (HF writes both)."""

    def __init__(self, obj, source, prefix=""):
        self.obj, self.source, self.prefix = obj, source, prefix

    def name(self, key):
        return self.prefix + key

    def has(self, key):
        return self.obj.get(key) is not None

    def _type_error(self, key, expected):
        text = json.dumps(self.obj[key])
        if len(text) > 60:
            text = text[:57] + "..."
        return invalid("%s: %s is %s; expected %s" % (self.source, self.name(key), text, expected))

    def number(self, key):
        value = self.obj.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self._type_error(key, "a number")
        return float(value)

    def int(self, key):
        value = self.number(key)
        if value is None:
            return None
        if value != math.floor(value) or abs(value) > 9.0e15:
            raise self._type_error(key, "an integer")
        return int(value)

    def bool(self, key):
        value = self.obj.get(key)
        if value is not None and not isinstance(value, bool):
            raise self._type_error(key, "true or false")
        return value

    def string(self, key):
        value = self.obj.get(key)
        if value is not None and not isinstance(value, str):
            raise self._type_error(key, "a string")
        return value

    def number_list(self, key):
        value = self.obj.get(key)
        if value is None:
            return []
        if not isinstance(value, list) or any(
                isinstance(v, bool) or not isinstance(v, (int, float)) for v in value):
            raise self._type_error(key, "a list of numbers")
        return [float(v) for v in value]

    def missing(self, key, why):
        return invalid("%s: %s is required %s" % (self.source, self.name(key), why))


def _scaling_type(scaling, top):
    """The scaling type name ("none", "linear", ...) or None when there is none."""
    name, key = scaling.string("rope_type"), scaling.name("rope_type")
    if name is None:
        name, key = scaling.string("type"), scaling.name("type")
    if name is None:
        return None
    if name.lower() not in _SCALING_TYPES:
        raise invalid("%s: %s '%s' is not supported; expected default, linear, dynamic, yarn, "
                      "llama3, longrope or su" % (top.source, key, name))
    return _SCALING_TYPES[name.lower()]


def _yarn(s, top, factor, original, max_pos, out):
    orig = original if original is not None else max_pos
    if factor is None and orig is not None and max_pos is not None and orig > 0:
        factor = max_pos / orig
    if factor is None:
        raise s.missing("factor", "for yarn scaling")
    out.update(factor=factor, original_max_position_embeddings=orig,
               max_position_embeddings=max_pos, beta_fast=s.number("beta_fast"),
               beta_slow=s.number("beta_slow"), mscale=s.number("mscale"),
               mscale_all_dim=s.number("mscale_all_dim"), truncate=s.bool("truncate"))


def _longrope(s, top, factor, original, max_pos, rotary_dim, top_original, out):
    short, long_ = s.number_list("short_factor"), s.number_list("long_factor")
    half = rotary_dim // 2
    if len(short) != half or len(long_) != half:
        raise invalid("%s: %s and %s have %d and %d entries; rotary_dim %d needs %d each"
                      % (top.source, s.name("short_factor"), s.name("long_factor"),
                         len(short), len(long_), rotary_dim, half))
    out.update(short_factor=short, long_factor=long_)
    # HF (Phi-3): a top-level original length wins, and the factor is then max / original.
    if top_original is not None:
        out["original_max_position_embeddings"] = top_original
        if max_pos is not None and top_original > 0:
            factor = max_pos / top_original
    elif original is not None:
        out["original_max_position_embeddings"] = original
    elif max_pos is not None:
        out["original_max_position_embeddings"] = max_pos
    else:
        raise s.missing("original_max_position_embeddings", "for longrope scaling")
    out.update(max_position_embeddings=max_pos, factor=factor)


def _scaling(obj, top, key, type_required, rotary_dim):
    """A RopeScaling from HF's rope_scaling (or rope_parameters) object, or None."""
    if not isinstance(obj, dict):
        raise invalid("%s: %s is %s; expected an object" % (top.source, key, json.dumps(obj)))
    s = _Reader(obj, top.source, key + ".")
    kind = _scaling_type(s, top)
    if kind is None and type_required:
        raise s.missing("rope_type", "(or the legacy \"type\")")
    if kind in (None, "none"):
        return None
    factor, original = s.number("factor"), s.int("original_max_position_embeddings")
    top_original = top.int("original_max_position_embeddings")
    max_pos = top.int("max_position_embeddings")
    out = {"attention_factor": s.number("attention_factor")}
    if kind in ("linear", "dynamic", "llama3") and factor is None:
        raise s.missing("factor", "for %s scaling" % kind)
    if kind == "linear":
        out["factor"] = factor
    elif kind == "dynamic":
        if max_pos is None:
            raise top.missing("max_position_embeddings", "for dynamic scaling")
        out.update(factor=factor, max_position_embeddings=max_pos,
                   original_max_position_embeddings=original)
    elif kind == "yarn":
        _yarn(s, top, factor, original, max_pos, out)
    elif kind == "llama3":
        if original is None:
            raise s.missing("original_max_position_embeddings", "for llama3 scaling")
        out.update(factor=factor, original_max_position_embeddings=original,
                   low_freq_factor=s.number("low_freq_factor"),
                   high_freq_factor=s.number("high_freq_factor"))
    else:
        _longrope(s, top, factor, original, max_pos, rotary_dim, top_original, out)
    if out.get("factor") is not None and not out["factor"] > 0:
        raise invalid("%s: %s is %s; it must be > 0" % (top.source, s.name("factor"), out["factor"]))
    return RopeScaling(kind, **out)


def _head_and_rotary_dim(top, heads, hidden):
    head_dim = top.int("qk_rope_head_dim")  # DeepSeek MLA rotates only this part
    if head_dim is None:
        head_dim = top.int("head_dim")
    if head_dim is None:
        if hidden is None or not heads or heads <= 0:
            raise top.missing("head_dim", "(or hidden_size and num_attention_heads)")
        head_dim = hidden // heads
    if head_dim < 2:
        raise invalid("%s: head_dim is %d; it must be >= 2" % (top.source, head_dim))
    rotary_dim, key = top.int("rotary_dim"), "rotary_dim"
    if rotary_dim is None:
        fraction, key = top.number("partial_rotary_factor"), "partial_rotary_factor"
        if fraction is None:
            fraction, key = top.number("rotary_pct"), "rotary_pct"
        if fraction is not None and not 0 < fraction <= 1:
            raise invalid("%s: %s is %s; it must be in (0, 1]" % (top.source, key, fraction))
        rotary_dim = int(head_dim * (1.0 if fraction is None else fraction))  # int() as HF
    if rotary_dim < 2 or rotary_dim > head_dim or rotary_dim % 2:
        raise invalid("%s: %s gives rotary_dim %d for head_dim %d; it must be even and in "
                      "[2, head_dim]" % (top.source, key, rotary_dim, head_dim))
    return head_dim, rotary_dim


def _first(top, *keys, kind="int"):
    for key in keys:
        value = getattr(top, kind)(key)
        if value is not None:
            return value
    return None


def rope_from_config(config, source="config.json"):
    """A Rope (with model attributes) from a parsed config.json."""
    if not isinstance(config, dict):
        raise invalid("%s: the top level is not a JSON object" % source)
    top = _Reader(config, source)
    heads = _first(top, "num_attention_heads", "n_head")
    hidden = _first(top, "hidden_size", "n_embd")
    max_pos = _first(top, "max_position_embeddings", "n_positions")
    params = config.get("rope_parameters")
    params = params if isinstance(params, dict) else None

    theta = _first(top, "rope_theta", "rotary_emb_base", kind="number")
    if theta is None and params is not None:
        theta = _Reader(params, source, "rope_parameters.").number("rope_theta")
    base = 10000.0 if theta is None else theta
    if not base > 0:
        raise invalid("%s: rope_theta is %s; it must be > 0" % (source, base))
    head_dim, rotary_dim = _head_and_rotary_dim(top, heads, hidden)

    model_type = top.string("model_type") or ""
    interleaved = model_type in ("gptj", "codegen", "deepseek_v2", "deepseek_v3")
    if top.bool("rope_interleave") is not None:
        interleaved = top.bool("rope_interleave")
    if top.has("rope_scaling"):
        scaling = _scaling(config["rope_scaling"], top, "rope_scaling", True, rotary_dim)
    elif params is not None:
        scaling = _scaling(params, top, "rope_parameters", False, rotary_dim)
    else:
        scaling = None

    rope = Rope(base=base, rotary_dim=rotary_dim if rotary_dim != head_dim else None,
                style="gptj" if interleaved else "neox", scaling=scaling)
    rope.head_dim, rope.model_type = head_dim, model_type
    rope.num_attention_heads = heads or 0
    kv_heads = top.int("num_key_value_heads")
    rope.num_key_value_heads = rope.num_attention_heads if kv_heads is None else kv_heads
    rope.max_position_embeddings = max_pos or 0
    return rope


def rope_from_hf_config(config, source=None):
    """rope_from_config for a path (read as JSON) or an already parsed dict."""
    if isinstance(config, dict):
        return rope_from_config(config, source or "config.json")
    path = str(config)
    try:
        with open(path, "rb") as f:
            text = f.read()
    except FileNotFoundError as err:
        raise PosencError(grpc.StatusCode.NOT_FOUND, "%s: cannot open: %s" % (path, err.strerror))
    except PermissionError as err:
        raise PosencError(grpc.StatusCode.PERMISSION_DENIED,
                          "%s: cannot open: %s" % (path, err.strerror))
    try:
        parsed = json.loads(text)
    except ValueError:
        raise invalid("%s: not valid JSON" % path) from None
    return rope_from_config(parsed, source or path)
