"""A Hugging Face config.json to Rope fields: the same mapping as client/hf_config.cc (what
`posenc-client --hf-config` reads), in HF's order of precedence:
  theta: rope_theta | rotary_emb_base | rope_parameters.rope_theta; default 10000.
  head_dim: qk_rope_head_dim | head_dim | hidden_size // num_attention_heads.
  rotary_dim: rotary_dim | int(head_dim * partial_rotary_factor) | int(head_dim * rotary_pct).
  style: GPTJ for model_type gptj/codegen/deepseek_v2/deepseek_v3 or rope_interleave.
  rope_scaling (or rope_parameters): rope_type or legacy type: default, linear, dynamic, yarn,
  llama3, longrope (su), proportional; mrope is the default rotation.
Families by model_type (a nested text_config's keys win over the top level's): qwen2_vl and
qwen2_5_vl (mrope_section), qwen3_vl (interleaved), gemma3 (layer_type sliding_attention:
rope_local_base_freq, no scaling; full_attention: rope_theta and rope_scaling), gemma4
(rope_parameters per layer type; full-attention heads global_head_dim wide, proportional),
llama4, glm, glm4 (interleaved pairs). layer_type defaults to full_attention.
Only the keys the scaling type reads are kept (a config's keys for another type are
dropped, as the server refuses them). Errors are PosencError INVALID_ARGUMENT naming the file
and key (NOT_FOUND: no such file). Plain data out (posenc.schemes.Rope.from_hf_config builds
the Rope), so this module does not import posenc.schemes.
"""
import json
import math

import grpc

from posenc.errors import PosencError, invalid

_SCALING_TYPES = {"default": "none", "none": "none", "mrope": "none", "linear": "linear",
                  "dynamic": "dynamic", "yarn": "yarn", "llama3": "llama3",
                  "longrope": "longrope", "su": "longrope", "proportional": "proportional"}


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
                      "llama3, longrope, su or proportional" % (top.source, key, name))
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


def _mrope(s, mrope):
    """Qwen2-VL's mrope_section and Qwen3-VL's mrope_interleaved into `mrope`."""
    sections = s.number_list("mrope_section")
    for v in sections:
        if v != math.floor(v) or v < 0 or v > 1e6:
            raise invalid("%s: %s holds %s; expected integers >= 0"
                          % (s.source, s.name("mrope_section"), v))
    if sections:
        mrope["mrope_section"] = [int(v) for v in sections]
    if s.bool("mrope_interleaved") is not None:
        mrope["mrope_interleaved"] = s.bool("mrope_interleaved")


def _scaling(obj, top, key, type_required, rotary_dim, mrope):
    """RopeScaling fields (a dict, type first) from HF's rope_scaling (or rope_parameters)
    object, or None; only the fields the type reads."""
    if not isinstance(obj, dict):
        raise invalid("%s: %s is %s; expected an object" % (top.source, key, json.dumps(obj)))
    s = _Reader(obj, top.source, key + ".")
    _mrope(s, mrope)
    kind = _scaling_type(s, top)
    if kind is None and type_required:
        raise s.missing("rope_type", "(or the legacy \"type\")")
    if kind in (None, "none"):
        return None
    factor, original = s.number("factor"), s.int("original_max_position_embeddings")
    top_original = top.int("original_max_position_embeddings")
    max_pos = top.int("max_position_embeddings")
    out = {}
    if kind in ("yarn", "longrope"):  # the types that read it
        out["attention_factor"] = s.number("attention_factor")
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
    elif kind == "proportional":
        out.update(factor=factor, rope_proportion=s.number("partial_rotary_factor"))
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
    return dict(type=kind, **{k: v for k, v in out.items() if v is not None})


def _head_and_rotary_dim(top, heads, hidden, params=None, global_head=False):
    head_dim = top.int("qk_rope_head_dim")  # DeepSeek MLA rotates only this part
    if head_dim is None:
        head_dim = top.int("head_dim")
    if head_dim is None:
        if hidden is None or not heads or heads <= 0:
            raise top.missing("head_dim", "(or hidden_size and num_attention_heads)")
        head_dim = hidden // heads
    if head_dim < 2:
        raise invalid("%s: head_dim is %d; it must be >= 2" % (top.source, head_dim))
    if global_head and top.int("global_head_dim") is not None:
        head_dim = top.int("global_head_dim")  # Gemma 4's full-attention heads
    rotary_dim, key = top.int("rotary_dim"), "rotary_dim"
    if rotary_dim is None:
        fraction, key = top.number("partial_rotary_factor"), "partial_rotary_factor"
        if fraction is None:
            fraction, key = top.number("rotary_pct"), "rotary_pct"
        if fraction is None and params is not None:
            fraction, key = params.number("partial_rotary_factor"), params.name("partial_rotary_factor")
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


# Gemma3TextConfig's and Gemma4TextConfig's defaults for the keys RoPE reads: the published
# Gemma configs leave most of them out.
_FAMILY_DEFAULTS = {
    "gemma3": {"head_dim": 256, "num_attention_heads": 8, "num_key_value_heads": 4,
               "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
               "max_position_embeddings": 131072},
    "gemma4": {"head_dim": 256, "global_head_dim": 512, "num_attention_heads": 8,
               "num_key_value_heads": 4, "max_position_embeddings": 131072,
               "rope_parameters": {
                   "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                   "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                      "rope_theta": 1000000.0}}},
}


def _family(model_type):
    """model_type without a "_text" suffix (gemma3_text is gemma3's language tower)."""
    if model_type.endswith("_text") and len(model_type) > len("_text"):
        return model_type[:-len("_text")]
    return model_type


def _layer_type(source, family, params, asked):
    keyed = params is not None and "full_attention" in params
    if family not in ("gemma3", "gemma4") and not keyed:
        if not asked:
            return ""
        raise invalid("%s: layer_type '%s' is given, but model_type '%s' has no per-layer RoPE "
                      "(gemma3 and gemma4 have)" % (source, asked, family))
    layer = asked or "full_attention"
    if layer not in ("full_attention", "sliding_attention"):
        raise invalid("%s: layer_type '%s' is unknown; expected full_attention or "
                      "sliding_attention" % (source, layer))
    return layer


def _merged(original):
    """The config with a text_config merged over it (its keys win; a null there keeps the
    top-level value), then the family's defaults where config.json is silent."""
    config = dict(original)
    text = original.get("text_config")
    if isinstance(text, dict):
        for key, value in text.items():
            if value is None and key in config:
                continue
            if key != "model_type" or not isinstance(original.get("model_type"), str):
                config[key] = value
    if isinstance(config.get("model_type"), str):
        for key, value in _FAMILY_DEFAULTS.get(_family(config["model_type"]), {}).items():
            if config.get(key) is None:
                config[key] = value
    return config


def _rope_parameters(config, source, family, layer_type):
    """transformers 5's rope_parameters (per layer type for Gemma): (object or None, its
    key, the layer type)."""
    params = config.get("rope_parameters")
    params = params if isinstance(params, dict) else None
    params_key = "rope_parameters"
    layer = _layer_type(source, family, params, layer_type)
    if params is not None and layer and layer in params:
        params, params_key = params[layer], "rope_parameters." + layer
        if not isinstance(params, dict):
            raise invalid("%s: %s is not an object" % (source, params_key))
    return params, params_key, layer


def _layer_base(top, family, layer, params, params_key):
    """rope theta of the layer type: Gemma 3's sliding layers turn at rope_local_base_freq."""
    sliding = layer == "sliding_attention"
    local_base = top.number("rope_local_base_freq") if sliding else None
    if local_base is not None:
        base, key = local_base, "rope_local_base_freq"
    elif sliding and family == "gemma3" and params is None:
        base, key = 10000.0, "rope_local_base_freq"  # Gemma3TextConfig's default
    else:
        theta = None
        if params is not None and params_key != "rope_parameters":
            theta = _Reader(params, top.source, params_key + ".").number("rope_theta")
        if theta is None:
            theta = _first(top, "rope_theta", "rotary_emb_base", kind="number")
        if theta is None and params is not None and params_key == "rope_parameters":
            theta = _Reader(params, top.source, "rope_parameters.").number("rope_theta")
        base, key = (10000.0 if theta is None else theta), "rope_theta"
    if not base > 0:
        raise invalid("%s: %s is %s; it must be > 0" % (top.source, key, base))
    return base


def _scaling_and_mrope(config, top, family, layer, params, params_key, rotary_dim):
    """(scaling dict or None, mrope fields): rope_scaling (transformers 4) else
    rope_parameters (transformers 5); the Qwen-VL families need mrope_section from either."""
    mrope = {}
    if layer == "sliding_attention" and family == "gemma3" and top.has("rope_scaling"):
        scaling = None  # HF Gemma 3: rope_scaling is the global layers'
    elif top.has("rope_scaling"):
        scaling = _scaling(config["rope_scaling"], top, "rope_scaling", True, rotary_dim, mrope)
    elif params is not None:
        scaling = _scaling(params, top, params_key, False, rotary_dim, mrope)
    else:
        scaling = None
    if family == "qwen3_vl" and mrope.get("mrope_section"):
        mrope["mrope_interleaved"] = True
    if family in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl") and not mrope.get("mrope_section"):
        raise invalid(
            "%s: model_type %s needs mrope_section, and neither rope_scaling.mrope_section "
            "(transformers 4) nor %s.mrope_section (transformers 5) is there; add the model's "
            "sections (e.g. \"rope_scaling\": {\"type\": \"mrope\", \"mrope_section\": "
            "[16, 24, 24]} for Qwen2-VL and Qwen2.5-VL 7B) to its config.json"
            % (top.source, top.string("model_type"), params_key))
    return scaling, mrope


def rope_from_config(original, source="config.json", layer_type=None):
    """(Rope keyword arguments, model attributes) from a parsed config.json."""
    if not isinstance(original, dict):
        raise invalid("%s: the top level is not a JSON object" % source)
    config = _merged(original)
    top = _Reader(config, source)
    model_type = top.string("model_type") or ""
    family = _family(model_type)
    heads = _first(top, "num_attention_heads", "n_head")
    hidden = _first(top, "hidden_size", "n_embd")
    params, params_key, layer = _rope_parameters(config, source, family, layer_type)
    base = _layer_base(top, family, layer, params, params_key)
    params_reader = None
    if params is not None:
        params_reader = _Reader(params, source, params_key + ".")
        kind = params_reader.string("rope_type")
        if kind is not None and kind.lower() == "proportional":
            params_reader = None  # proportional reads partial_rotary_factor itself
    head_dim, rotary_dim = _head_and_rotary_dim(
        top, heads, hidden, params_reader,
        global_head=family == "gemma4" and layer == "full_attention")
    interleaved = family in ("gptj", "codegen", "deepseek_v2", "deepseek_v3", "llama4", "glm",
                             "glm4")
    if top.bool("rope_interleave") is not None:
        interleaved = top.bool("rope_interleave")
    scaling, mrope = _scaling_and_mrope(config, top, family, layer, params, params_key, rotary_dim)
    fields = dict(base=base, rotary_dim=rotary_dim if rotary_dim != head_dim else None,
                  style="gptj" if interleaved else "neox", scaling=scaling, **mrope)
    kv_heads = top.int("num_key_value_heads")
    attrs = dict(head_dim=head_dim, model_type=model_type, layer_type=layer,
                 num_attention_heads=heads or 0,
                 num_key_value_heads=(heads or 0) if kv_heads is None else kv_heads,
                 max_position_embeddings=_first(top, "max_position_embeddings", "n_positions") or 0)
    return fields, attrs


def rope_from_hf_config(config, source=None, layer_type=None):
    """rope_from_config for a path (read as JSON) or an already parsed dict."""
    if isinstance(config, dict):
        return rope_from_config(config, source or "config.json", layer_type)
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
    return rope_from_config(parsed, source or path, layer_type)
