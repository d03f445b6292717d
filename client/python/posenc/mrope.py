"""Positions.mrope_segments from what an HF Qwen-VL processor returns.

    inputs = processor(text=[prompt], images=images, videos=videos, return_tensors="np")
    segments = posenc.mrope_segments(inputs["input_ids"], inputs.get("image_grid_thw"),
                                     inputs.get("video_grid_thw"),
                                     inputs.get("second_per_grid_ts"), config=model_config)
    q = client.encode(q, posenc.Rope.from_hf_config(model_config),
                      positions={"mrope_segments": segments})

The prompt is walked as HF's get_rope_index walks it (modeling_qwen2_vl.py,
modeling_qwen2_5_vl.py, modeling_qwen3_vl.py): each vision_start token followed by the image
or video token opens the next grid of image_grid_thw / video_grid_thw, in prompt order; the
tokens between grids are text runs. Per family:
  qwen2_vl   images and videos: frame group t at temporal position s + t (temporal_scale 1).
  qwen2_5_vl images: every frame group at s (second_per_grid_t = 0, the IMAGE default);
             videos: s + floor(t * second_per_grid_t * tokens_per_second), second_per_grid_t
             from second_per_grid_ts (default 1.0), tokens_per_second from the vision config.
  qwen3_vl   as qwen2_vl, with each video split into one grid per frame (grid_t 1), the
             timestamp text between frames being text runs.
Grids are divided by spatial_merge_size (the LLM's merged grid). One prompt per call: a batch
whose rows differ needs one request per row (Positions.mrope_segments is shared by all rows).
Needs only numpy-like sequences; errors are PosencError INVALID_ARGUMENT.
"""
import numpy as np

from posenc.errors import invalid
from posenc.schemes import MropeSegment

_FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")


def _config_value(config, key, nested=None):
    """config[key], else config[nested][key] (text_config / vision_config), else None."""
    if not isinstance(config, dict):
        return None
    if config.get(key) is not None:
        return config[key]
    for name in ([nested] if nested else []) + ["text_config"]:
        inner = config.get(name)
        if isinstance(inner, dict) and inner.get(key) is not None:
            return inner[key]
    return None


def _settings(config, overrides):
    """The family, token ids, merge size and tokens_per_second: given, else from config."""
    keys = {"model_type": None, "image_token_id": None, "video_token_id": None,
            "vision_start_token_id": None, "spatial_merge_size": "vision_config",
            "tokens_per_second": "vision_config"}
    out = {}
    for key, nested in keys.items():
        value = overrides.get(key)
        out[key] = value if value is not None else _config_value(config, key, nested)
    family = out["model_type"]
    if family not in _FAMILIES:
        raise invalid("mrope_segments: model_type is %r; expected one of %s"
                      % (family, ", ".join(_FAMILIES)))
    for key in ("image_token_id", "video_token_id", "vision_start_token_id",
                "spatial_merge_size"):
        if out[key] is None:
            raise invalid("mrope_segments: %s is not given and not in the config" % key)
    return out


def _tokens(input_ids):
    ids = np.asarray(input_ids)
    if ids.ndim == 2 and ids.shape[0] == 1:
        ids = ids[0]
    if ids.ndim != 1:
        raise invalid("mrope_segments: input_ids has shape %s; give one prompt ([seq] or "
                      "[1, seq]); a batch whose prompts differ needs one request per row"
                      % (ids.shape,))
    return [int(t) for t in ids]


def _grids(grid_thw):
    if grid_thw is None:
        return []
    grids = np.asarray(grid_thw).reshape(-1, 3)
    return [tuple(int(v) for v in row) for row in grids]


def _video_grids(video_grid_thw, second_per_grid_ts, family):
    """(grid, second_per_grid_t) per video grid; Qwen3-VL's split into single frames."""
    videos = _grids(video_grid_thw)
    seconds = ([1.0] * len(videos) if second_per_grid_ts is None
               else [float(v) for v in np.asarray(second_per_grid_ts).reshape(-1)])
    if len(seconds) != len(videos):
        raise invalid("mrope_segments: second_per_grid_ts has %d entries for %d videos"
                      % (len(seconds), len(videos)))
    if family == "qwen3_vl":
        return [((1, h, w), s) for (t, h, w), s in zip(videos, seconds) for _ in range(t)]
    return list(zip(videos, seconds))


def _grid_segment(grid, kind, family, second_per_grid_t, s):
    t, h, w = grid
    m = s["spatial_merge_size"]
    segment = {"grid_t": t, "grid_h": h // m, "grid_w": w // m, "kind": kind}
    if family != "qwen2_5_vl":
        segment["temporal_scale"] = 1.0
    elif kind == "video":
        if s["tokens_per_second"] is None:
            raise invalid("mrope_segments: a qwen2_5_vl video needs tokens_per_second, which is "
                          "not given and not in the config's vision_config")
        segment["temporal_scale"] = second_per_grid_t * s["tokens_per_second"]
    return segment


def mrope_segments(input_ids, image_grid_thw=None, video_grid_thw=None,
                   second_per_grid_ts=None, *, config=None, **settings):
    """The prompt's MropeSegments (a list of MropeSegment) as HF's get_rope_index lays it
    out. `config`: the model's config.json as a dict (model_type, image_token_id,
    video_token_id, vision_start_token_id, vision_config.spatial_merge_size and
    tokens_per_second); keyword arguments of the same names override it."""
    s = _settings(config, settings)
    family = s["model_type"]
    tokens = _tokens(input_ids)
    images = _grids(image_grid_thw)
    videos = _video_grids(video_grid_thw, second_per_grid_ts, family)
    starts = [i for i, t in enumerate(tokens[:-1]) if t == s["vision_start_token_id"]]
    opened = [tokens[i + 1] for i in starts]
    remain = {kind: opened.count(s["%s_token_id" % kind]) for kind in ("image", "video")}
    if remain["image"] > len(images) or remain["video"] > len(videos):
        raise invalid("mrope_segments: the prompt opens %d images and %d videos; "
                      "image_grid_thw has %d and video_grid_thw %d"
                      % (remain["image"], remain["video"], len(images), len(videos)))
    out, st, used = [], 0, {"image": 0, "video": 0}
    for _ in range(remain["image"] + remain["video"]):
        ends = {}
        for kind in ("image", "video"):
            token = s["%s_token_id" % kind]
            ends[kind] = (tokens.index(token, st) if remain[kind] > 0 and token in tokens[st:]
                          else len(tokens) + 1)
        kind = "image" if ends["image"] < ends["video"] else "video"
        grid, seconds = ((images[used[kind]], 0.0) if kind == "image" else videos[used[kind]])
        used[kind] += 1
        remain[kind] -= 1
        if ends[kind] > st:
            out.append({"text_length": ends[kind] - st})
        segment = _grid_segment(grid, kind, family, seconds, s)
        out.append(segment)
        st = ends[kind] + segment["grid_t"] * segment["grid_h"] * segment["grid_w"]
    if st < len(tokens):
        out.append({"text_length": len(tokens) - st})
    return [MropeSegment(**seg) for seg in out]
