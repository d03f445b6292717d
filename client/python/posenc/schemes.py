"""Scheme helpers: small builders of the posenc.v1 scheme messages.

Enum arguments take the proto's value names in any case ("concatenated", "GPTJ", "causal")
or the proto's numbers; unset arguments take the server's defaults. Every helper has
.proto() (the message) and .oneof (its field name in the request's `scheme` oneof).
"""
import numpy as np

from posenc import hf_config
from posenc.errors import invalid
from posenc.v1 import posenc_pb2 as pb


def _enum(enum_type, value, field):
    if isinstance(value, str):
        name = value.upper()
        if name not in enum_type.keys():
            raise invalid("%s '%s' is not one of %s"
                          % (field, value, ", ".join(k.lower() for k in enum_type.keys())))
        return enum_type.Value(name)
    return int(value)


class _Message:
    """Fields by name; None means unset (the server's default)."""
    _message = None
    _enums = {}
    oneof = None

    def __init__(self, **fields):
        self.fields = {k: v for k, v in fields.items() if v is not None}

    def proto(self):
        msg = self._message()
        try:
            for name, value in self.fields.items():
                self._set(msg, name, value)
        except (TypeError, ValueError) as err:
            raise invalid("%s: %s" % (type(self).__name__, err)) from None
        return msg

    def _set(self, msg, name, value):
        if name in self._enums:
            setattr(msg, name, _enum(self._enums[name], value, name))
        elif isinstance(value, _Message):
            getattr(msg, name).CopyFrom(value.proto())
        elif isinstance(value, (list, tuple, np.ndarray)):
            field = getattr(msg, name)
            for item in value:
                if isinstance(item, _Message):
                    field.add().CopyFrom(item.proto())
                else:
                    field.append(item.item() if isinstance(item, np.generic) else item)
        else:
            setattr(msg, name, value.item() if isinstance(value, np.generic) else value)

    def __repr__(self):
        args = ", ".join("%s=%r" % kv for kv in self.fields.items())
        return "posenc.%s(%s)" % (type(self).__name__, args)

    def __eq__(self, other):
        return type(self) is type(other) and self.proto() == other.proto()


class Sinusoidal(_Message):
    """The paper's sinusoidal encoding added to (or concatenated with) the embeddings."""
    _message = pb.Sinusoidal
    _enums = {"layout": pb.SinusoidalLayout, "timescale": pb.Timescale, "fusion": pb.Fusion}
    oneof = "sinusoidal"

    def __init__(self, base=None, layout=None, timescale=None, input_scale=None,
                 pe_scale=None, fusion=None, pe_dim=None):
        super().__init__(base=base, layout=layout, timescale=timescale,
                         input_scale=input_scale, pe_scale=pe_scale, fusion=fusion,
                         pe_dim=pe_dim)


class Learned(_Message):
    """Rows of a table the server loaded with --table NAME=..."""
    _message = pb.Learned
    _enums = {"overflow": pb.Overflow, "fusion": pb.Fusion}
    oneof = "learned"

    def __init__(self, table, overflow=None, input_scale=None, pe_scale=None, fusion=None):
        super().__init__(table=table, overflow=overflow, input_scale=input_scale,
                         pe_scale=pe_scale, fusion=fusion)


class RopeScaling(_Message):
    """HF's rope_scaling: type linear|dynamic|yarn|llama3|longrope and its parameters."""
    _message = pb.RopeScaling
    _enums = {"type": pb.RopeScalingType}

    def __init__(self, type, **params):  # pylint: disable=redefined-builtin
        unknown = set(params) - set(pb.RopeScaling.DESCRIPTOR.fields_by_name)
        if unknown:
            raise invalid("RopeScaling has no field %s" % ", ".join(sorted(unknown)))
        super().__init__(type=type, **params)


class Rope(_Message):
    """Rotary embedding of queries (and keys). `scaling` is a RopeScaling or a dict of its
    fields. Multimodal RoPE: mrope_section (and mrope_interleaved, Qwen3-VL); axial RoPE:
    axial_axes; xPos: xpos_scale_base (and xpos_center). Rope.from_hf_config reads a model's
    config.json as posenc-client --hf-config."""
    _message = pb.Rope
    _enums = {"style": pb.RopeStyle, "layout": pb.RopeLayout}
    oneof = "rope"

    def __init__(self, base=None, rotary_dim=None, style=None, layout=None, scaling=None,
                 mrope_section=None, mrope_interleaved=None, axial_axes=None,
                 xpos_scale_base=None, xpos_center=None):
        if isinstance(scaling, dict):
            scaling = RopeScaling(**scaling)
        super().__init__(base=base, rotary_dim=rotary_dim, style=style, layout=layout,
                         scaling=scaling,
                         mrope_section=list(mrope_section) if mrope_section else None,
                         mrope_interleaved=mrope_interleaved or None,
                         axial_axes=axial_axes or None, xpos_scale_base=xpos_scale_base,
                         xpos_center=xpos_center)
        # Filled by from_hf_config; 0 or "" when unknown.
        self.head_dim = self.num_attention_heads = self.num_key_value_heads = 0
        self.max_position_embeddings = 0
        self.model_type = self.layer_type = ""

    @classmethod
    def from_hf_config(cls, config, source=None, layer_type=None):
        """A Rope from an HF config.json path (or an already parsed dict), with the model's
        head_dim, num_attention_heads, num_key_value_heads, max_position_embeddings,
        model_type and layer_type as attributes. layer_type ("full_attention" or
        "sliding_attention") picks the layer kind of Gemma 3 / Gemma 4 (default full)."""
        fields, attrs = hf_config.rope_from_hf_config(config, source, layer_type=layer_type)
        rope = cls(**fields)
        for name, value in attrs.items():
            setattr(rope, name, value)
        return rope


class Level(_Message):
    """One level of a hierarchical position: ids per token, its base and scale."""
    _message = pb.Level

    def __init__(self, ids, base=None, scale=None):
        super().__init__(ids=list(ids), base=base, scale=scale)


class Hierarchical(_Message):
    """Sum over levels of scale * sinusoidal(ids); levels are Level or (ids, base, scale)."""
    _message = pb.Hierarchical
    oneof = "hierarchical"

    def __init__(self, levels):
        levels = [lv if isinstance(lv, Level) else Level(*lv) for lv in levels]
        super().__init__(levels=levels)


class Continuous(_Message):
    """Sinusoidal encoding of real-valued positions (positions={"values": [...]})."""
    _message = pb.Continuous
    _enums = {"layout": pb.SinusoidalLayout, "timescale": pb.Timescale}
    oneof = "continuous"

    def __init__(self, base=None, value_scale=None, layout=None, timescale=None):
        super().__init__(base=base, value_scale=value_scale, layout=layout,
                         timescale=timescale)


class Sinusoidal2D(_Message):
    """ViT/MAE 2D sin-cos of a grid_height x grid_width patch grid (MAE's
    get_2d_sincos_pos_embed); with cls_token a zero row comes first. Takes no positions."""
    _message = pb.Sinusoidal2D
    _enums = {"fusion": pb.Fusion}
    oneof = "sinusoidal_2d"

    def __init__(self, grid_height, grid_width, cls_token=None, base=None, input_scale=None,
                 pe_scale=None, fusion=None):
        super().__init__(grid_height=grid_height, grid_width=grid_width, cls_token=cls_token,
                         base=base, input_scale=input_scale, pe_scale=pe_scale, fusion=fusion)


class Fourier(_Message):
    """Fourier features [cos(2 pi B v), sin(2 pi B v)] with B [F, num_axes]: `frequencies`
    (an array of shape [F] or [F, num_axes]) or a named table `frequencies_table`. v comes
    from positions={"values": [...]} (num_axes per token) or integer positions."""
    _message = pb.Fourier
    _enums = {"fusion": pb.Fusion}
    oneof = "fourier"

    def __init__(self, frequencies=None, frequencies_table=None, num_axes=None,
                 input_scale=None, pe_scale=None, fusion=None):
        if frequencies is not None:
            b = np.asarray(frequencies, dtype=np.float64)
            if b.ndim == 2 and num_axes is None:
                num_axes = b.shape[1]
            frequencies = b.reshape(-1)
        super().__init__(frequencies=frequencies, frequencies_table=frequencies_table,
                         num_axes=num_axes, input_scale=input_scale, pe_scale=pe_scale,
                         fusion=fusion)


class Alibi(_Message):
    """ALiBi bias for attention_bias: num_heads, mode symmetric|causal, max_bias."""
    _message = pb.Alibi
    _enums = {"mode": pb.AlibiMode}
    oneof = "alibi"

    def __init__(self, num_heads, mode=None, max_bias=None):
        super().__init__(num_heads=num_heads, mode=mode, max_bias=max_bias)


class T5(_Message):
    """T5 relative buckets for attention_bias; with `table` the bias, else INT32 bucket ids."""
    _message = pb.T5Bias
    oneof = "t5"

    def __init__(self, num_buckets=None, max_distance=None, bidirectional=None, table=None):
        super().__init__(num_buckets=num_buckets, max_distance=max_distance,
                         bidirectional=bidirectional, table=table)


class Shaw(_Message):
    """Shaw et al. relative positions for attention_bias: clamp(key - query, -k, k) + k with
    k = max_relative_position. Without `table` the INT32 indices [q, k]; with a named table
    [2k+1, d] the embeddings [q, k, d], or with attention_bias(query=...) the query term."""
    _message = pb.ShawRelative
    oneof = "shaw"

    def __init__(self, max_relative_position, table=None):
        super().__init__(max_relative_position=max_relative_position, table=table)


class Deberta(_Message):
    """DeBERTa-v2 relative positions (query - key, HF's log buckets) for attention_bias:
    INT32 [q, k]. position_buckets (256) and max_relative_positions (512) <= 0: no buckets."""
    _message = pb.DebertaRelative
    oneof = "deberta"

    def __init__(self, position_buckets=None, max_relative_positions=None):
        super().__init__(position_buckets=position_buckets,
                         max_relative_positions=max_relative_positions)


_RAW_ONEOF = {pb.Sinusoidal: "sinusoidal", pb.Learned: "learned", pb.Rope: "rope",
              pb.Hierarchical: "hierarchical", pb.Continuous: "continuous",
              pb.Sinusoidal2D: "sinusoidal_2d", pb.Fourier: "fourier",
              pb.Alibi: "alibi", pb.T5Bias: "t5", pb.ShawRelative: "shaw",
              pb.DebertaRelative: "deberta"}


def scheme_field(scheme, allowed):
    """(oneof field name, message) of a helper or of a raw posenc.v1 message."""
    if isinstance(scheme, _Message) and scheme.oneof:
        name, msg = scheme.oneof, scheme.proto()
    elif type(scheme) in _RAW_ONEOF:
        name, msg = _RAW_ONEOF[type(scheme)], scheme
    else:
        raise invalid("scheme %r is not a posenc scheme" % (scheme,))
    if name not in allowed:
        raise invalid("scheme %s is not allowed here; expected one of %s"
                      % (name, ", ".join(allowed)))
    return name, msg


class MropeSegment(_Message):
    """One piece of a multimodal prompt: a text run (text_length) or a vision grid (grid_t,
    grid_h, grid_w, the LLM's merged grid). kind "image" or "video" says which; temporal_scale
    defaults to 0 for an image (HF Qwen2.5-VL) and 1 otherwise (Qwen2.5-VL videos:
    second_per_grid_t * tokens_per_second). posenc.mrope_segments builds them from an HF
    processor's output."""
    _message = pb.MropeSegment
    _enums = {"kind": pb.MropeSegmentKind}

    def __init__(self, text_length=None, grid_t=None, grid_h=None, grid_w=None,
                 temporal_scale=None, kind=None):
        super().__init__(text_length=text_length, grid_t=grid_t, grid_h=grid_h,
                         grid_w=grid_w, temporal_scale=temporal_scale, kind=kind)


_POSITION_FIELDS = ("offsets", "ids", "values", "axis_ids", "mrope_segments")


def positions_proto(positions):
    """posenc.v1.Positions from None, an int (offset of every row), a dict with offsets,
    ids, values, axis_ids (a numpy array [num_axes, seq] or [num_axes, batch, seq]) and/or
    mrope_segments (MropeSegment or dicts of its fields), or a Positions message."""
    if positions is None or isinstance(positions, pb.Positions):
        return positions
    if isinstance(positions, (int, np.integer)) and not isinstance(positions, bool):
        return pb.Positions(offsets=[int(positions)])
    if isinstance(positions, dict):
        unknown = set(positions) - set(_POSITION_FIELDS)
        if unknown:
            raise invalid("positions has no field %s; use %s"
                          % (", ".join(sorted(unknown)), ", ".join(_POSITION_FIELDS)))
        out = pb.Positions()
        for name, value in positions.items():
            if name == "mrope_segments":
                for seg in value:
                    seg = seg if isinstance(seg, MropeSegment) else MropeSegment(**seg)
                    out.mrope_segments.add().CopyFrom(seg.proto())
                continue
            array = np.asarray(value)
            if name != "values" and array.size and not np.issubdtype(array.dtype, np.integer):
                raise invalid("positions.%s must hold integers, not %s" % (name, array.dtype))
            getattr(out, name).extend(array.reshape(-1).tolist())
        return out
    raise invalid("positions must be an int offset, a dict of offsets/ids/values or a "
                  "posenc.pb.Positions, not %s" % type(positions).__name__)
