#!/usr/bin/python3
"""RoPE of today's models against a real posenc-server: multimodal M-RoPE (Qwen2-VL,
Qwen2.5-VL, Qwen3-VL), axial vision RoPE, xPos and proportional RoPE (Gemma 4), and the HF
config import of those families, through the Python package and posenc-client.

Every reference below is an independent float64 re-implementation, in torch, of the code it
names (HF transformers' modeling_qwen2_vl.py, modeling_qwen2_5_vl.py, modeling_qwen3_vl.py,
modeling_rope_utils.py; FlashAttention's flash_attn/layers/rotary.py), written from that code.

Tolerances: float32 inputs are rotated in float32 from cos/sin rounded once from float64, so
outputs of N(0, 1) inputs are within F32_ATOL of the float64 reference; bfloat16 outputs within
one bfloat16 rounding of it (BF16_RTOL relative, BF16_ATOL absolute).

Environment: POSENC_TARGET (host:port of the server), POSENC_CLIENT (posenc-client),
POSENC_SOURCE_DIR (the source tree, for the fixtures).
"""
import glob
import json
import os
import subprocess
import tempfile
import unittest

import grpc
import numpy as np
import torch

import posenc

TARGET = os.environ.get("POSENC_TARGET", "127.0.0.1:50051")
SOURCE_DIR = os.environ.get("POSENC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
FIXTURES = os.path.join(SOURCE_DIR, "tests", "fixtures", "hf_configs")
F32_ATOL = 2e-5
BF16_RTOL, BF16_ATOL = 1.0 / 64, 1.0 / 64
torch.set_default_dtype(torch.float64)


# -- HF's rotary pieces, float64 ------------------------------------------------------------
def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def inv_freq_default(base, dim):
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).double() / dim))


def mrope_cos_sin(position_ids, inv_freq):
    """Qwen2VLRotaryEmbedding.forward: position_ids [3, bs, seq] -> cos, sin [3, bs, seq, dim]."""
    inv = inv_freq[None, None, :, None].expand(3, position_ids.shape[1], -1, 1)
    freqs = (inv @ position_ids[:, :, None, :].double()).transpose(2, 3)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def apply_multimodal_rotary_pos_emb(q, k, cos, sin, mrope_section, unsqueeze_dim=1):
    """modeling_qwen2_vl.apply_multimodal_rotary_pos_emb (q, k: [bs, heads, seq, dim])."""
    mrope_section = mrope_section * 2
    cos = torch.cat([m[i % 3] for i, m in enumerate(cos.split(mrope_section, dim=-1))],
                    dim=-1).unsqueeze(unsqueeze_dim)
    sin = torch.cat([m[i % 3] for i, m in enumerate(sin.split(mrope_section, dim=-1))],
                    dim=-1).unsqueeze(unsqueeze_dim)
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


def apply_interleaved_mrope(freqs, mrope_section):
    """Qwen3VLTextRotaryEmbedding.apply_interleaved_mrope: freqs [3, bs, seq, dim/2]."""
    freqs_t = freqs[0].clone()
    for dim, offset in enumerate((1, 2), start=1):
        length = mrope_section[dim] * 3
        idx = slice(offset, length, 3)
        freqs_t[..., idx] = freqs[dim, ..., idx]
    return freqs_t


def qwen3_vl_rotate(q, k, position_ids, base, mrope_section):
    """Qwen3VLTextRotaryEmbedding.forward, then apply_rotary_pos_emb (q, k: [bs, h, s, d])."""
    inv = inv_freq_default(base, q.shape[-1])
    inv_e = inv[None, None, :, None].expand(3, position_ids.shape[1], -1, 1)
    freqs = (inv_e @ position_ids[:, :, None, :].double()).transpose(2, 3)
    freqs = apply_interleaved_mrope(freqs, mrope_section)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos()[:, None], emb.sin()[:, None]
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


def get_rope_index(input_ids, image_grid_thw, video_grid_thw, second_per_grid_ts=None,
                   spatial_merge_size=2, image_token_id=151655, video_token_id=151656,
                   vision_start_token_id=151652, tokens_per_second=None):
    """Qwen2-VL / Qwen2.5-VL get_rope_index (no attention mask): [3, bs, seq] and deltas.
    With tokens_per_second (Qwen2.5-VL) video time indices are scaled by
    second_per_grid_t * tokens_per_second and truncated."""
    position_ids = torch.ones(3, input_ids.shape[0], input_ids.shape[1], dtype=torch.long)
    deltas = []
    image_index, video_index = 0, 0
    for i, ids in enumerate(input_ids):
        vision_start_indices = torch.argwhere(ids == vision_start_token_id).squeeze(1)
        vision_tokens = ids[vision_start_indices + 1]
        image_nums = int((vision_tokens == image_token_id).sum())
        video_nums = int((vision_tokens == video_token_id).sum())
        input_tokens = ids.tolist()
        llm_pos_ids_list = []
        st = 0
        remain_images, remain_videos = image_nums, video_nums
        for _ in range(image_nums + video_nums):
            ed_image = input_tokens.index(image_token_id, st) \
                if image_token_id in input_tokens[st:] and remain_images > 0 else len(input_tokens) + 1
            ed_video = input_tokens.index(video_token_id, st) \
                if video_token_id in input_tokens[st:] and remain_videos > 0 else len(input_tokens) + 1
            if ed_image < ed_video:
                t, h, w = image_grid_thw[image_index].tolist()
                second_per_grid_t = 0.0
                image_index += 1
                remain_images -= 1
                ed = ed_image
            else:
                t, h, w = video_grid_thw[video_index].tolist()
                second_per_grid_t = (second_per_grid_ts[video_index]
                                     if second_per_grid_ts is not None else 1.0)
                video_index += 1
                remain_videos -= 1
                ed = ed_video
            llm_grid_t, llm_grid_h, llm_grid_w = t, h // spatial_merge_size, w // spatial_merge_size
            text_len = ed - st
            st_idx = llm_pos_ids_list[-1].max() + 1 if llm_pos_ids_list else 0
            llm_pos_ids_list.append(torch.arange(text_len).view(1, -1).expand(3, -1) + st_idx)
            if tokens_per_second is None:
                t_index = torch.arange(llm_grid_t).view(-1, 1).expand(
                    -1, llm_grid_h * llm_grid_w).flatten()
            else:
                range_tensor = torch.arange(llm_grid_t).view(-1, 1)
                expanded = range_tensor.expand(-1, llm_grid_h * llm_grid_w)
                t_index = (expanded * second_per_grid_t * tokens_per_second).long().flatten()
            h_index = torch.arange(llm_grid_h).view(1, -1, 1).expand(llm_grid_t, -1, llm_grid_w).flatten()
            w_index = torch.arange(llm_grid_w).view(1, 1, -1).expand(llm_grid_t, llm_grid_h, -1).flatten()
            llm_pos_ids_list.append(torch.stack([t_index, h_index, w_index]) + text_len + st_idx)
            st = ed + llm_grid_t * llm_grid_h * llm_grid_w
        if st < len(input_tokens):
            st_idx = llm_pos_ids_list[-1].max() + 1 if llm_pos_ids_list else 0
            text_len = len(input_tokens) - st
            llm_pos_ids_list.append(torch.arange(text_len).view(1, -1).expand(3, -1) + st_idx)
        llm_positions = torch.cat(llm_pos_ids_list, dim=1).reshape(3, -1)
        position_ids[..., i, :] = llm_positions
        deltas.append(int(llm_positions.max()) + 1 - len(input_tokens))
    return position_ids, deltas


def vision_rot_pos_pairs(grid_thw, spatial_merge_size=2):
    """Qwen2VisionTransformerPretrainedModel.rot_pos_emb's pos_ids: [tokens, 2] (h, w)."""
    pos_ids = []
    for t, h, w in grid_thw:
        hpos = torch.arange(h).unsqueeze(1).expand(-1, w)
        hpos = hpos.reshape(h // spatial_merge_size, spatial_merge_size,
                            w // spatial_merge_size, spatial_merge_size).permute(0, 2, 1, 3).flatten()
        wpos = torch.arange(w).unsqueeze(0).expand(h, -1)
        wpos = wpos.reshape(h // spatial_merge_size, spatial_merge_size,
                            w // spatial_merge_size, spatial_merge_size).permute(0, 2, 1, 3).flatten()
        pos_ids.append(torch.stack([hpos, wpos], dim=-1).repeat(t, 1))
    return torch.cat(pos_ids, dim=0)


def vision_rotate(q, pos_ids, head_dim, theta=10000.0):
    """VisionRotaryEmbedding(head_dim // 2) + rot_pos_emb + apply_rotary_pos_emb_vision
    (q: [tokens, heads, head_dim])."""
    dim = head_dim // 2
    inv = 1.0 / (theta ** (torch.arange(0, dim, 2).double() / dim))
    max_grid = int(pos_ids.max()) + 1
    full = torch.outer(torch.arange(max_grid).double(), inv)
    rotary_pos_emb = full[pos_ids].flatten(1)  # [tokens, head_dim / 2]
    emb = torch.cat((rotary_pos_emb, rotary_pos_emb), dim=-1)
    cos, sin = emb.cos().unsqueeze(-2), emb.sin().unsqueeze(-2)
    return (q * cos) + (rotate_half(q) * sin)


def xpos_rotate(q, k, positions, rotary_dim, base, scale_base, center=None):
    """FlashAttention RotaryEmbedding(dim, base, scale_base, interleaved=False) in float64:
    _update_cos_sin_cache for seqlen = max position + 1, then apply_rotary_emb_torch on q with
    (cos, sin) and on k with (cos_k, sin_k). q, k: [bs, seq, heads, head_dim]."""
    seqlen = int(max(positions)) + 1
    inv = 1.0 / (base ** (torch.arange(0, rotary_dim, 2).double() / rotary_dim))
    scale = (torch.arange(0, rotary_dim, 2).double() + 0.4 * rotary_dim) / (1.4 * rotary_dim)
    t = torch.arange(seqlen).double()
    freqs = torch.outer(t, inv)
    c = seqlen // 2 if center is None else center
    power = (t - c) / scale_base
    s = scale ** power[:, None]
    cos, sin = torch.cos(freqs) * s, torch.sin(freqs) * s
    cos_k, sin_k = torch.cos(freqs) / s, torch.sin(freqs) / s
    idx = torch.as_tensor(positions)

    def apply(x, cos, sin):
        cos = torch.cat([cos, cos], -1)[idx][None, :, None, :]
        sin = torch.cat([sin, sin], -1)[idx][None, :, None, :]
        ro = x[..., :rotary_dim]
        return torch.cat([ro * cos + rotate_half(ro) * sin, x[..., rotary_dim:]], dim=-1)

    return apply(q, cos, sin), apply(k, cos_k, sin_k)


def proportional_inv_freq(base, head_dim, rope_proportion, factor=1.0):
    """modeling_rope_utils._compute_proportional_rope_parameters, float64."""
    rope_angles = int(rope_proportion * head_dim // 2)
    inv_rot = 1.0 / (base ** (torch.arange(0, 2 * rope_angles, 2).double() / head_dim))
    nope = head_dim // 2 - rope_angles
    inv = torch.cat((inv_rot, torch.zeros(nope))) if nope > 0 else inv_rot
    return inv / factor


def rope_apply(x, positions, inv_freq, style="neox", attention_factor=1.0):
    """apply_rotary_pos_emb on [bs, seq, heads, d] with angles positions x inv_freq over the
    first 2 * len(inv_freq) features; style gptj pairs (2i, 2i+1) (GLM, Llama 4)."""
    pos = torch.as_tensor(positions).double()
    freqs = pos[..., None] * inv_freq  # [seq, r/2] or [bs, seq, r/2]
    while freqs.dim() < 3:
        freqs = freqs[None]
    r = 2 * inv_freq.shape[0]
    ro, rest = x[..., :r], x[..., r:]
    if style == "neox":
        emb = torch.cat((freqs, freqs), dim=-1)[:, :, None, :]
        out = ro * emb.cos() * attention_factor + rotate_half(ro) * emb.sin() * attention_factor
    else:
        cos = freqs.cos().repeat_interleave(2, dim=-1)[:, :, None, :] * attention_factor
        sin = freqs.sin().repeat_interleave(2, dim=-1)[:, :, None, :] * attention_factor
        x1, x2 = ro[..., 0::2], ro[..., 1::2]
        rot = torch.stack((-x2, x1), dim=-1).flatten(-2)
        out = ro * cos + rot * sin
    return torch.cat([out, rest], dim=-1)


def hf_llama3_inv_freq(base, dim, factor, low, high, original):
    inv = inv_freq_default(base, dim)
    wavelen = 2 * np.pi / inv
    low_w, high_w = original / low, original / high
    llama = torch.where(wavelen > low_w, inv / factor, inv)
    smooth = (original / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * llama / factor + smooth * llama
    medium = ~(wavelen < high_w) * ~(wavelen > low_w)
    return torch.where(medium, smoothed, llama)


def cast(x, dtype):
    """x (float32) as the wire dtype's array: bfloat16 travels as uint16."""
    if dtype == "bfloat16":
        return posenc.to_bfloat16(x)
    return x.astype(np.float16) if dtype == "float16" else x


def t(x):
    return torch.from_numpy(np.asarray(x, dtype=np.float64))


class RopeModelsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.client = posenc.Client(TARGET)
        cls.rng = np.random.default_rng(23)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()

    def randn(self, *shape):
        return self.rng.standard_normal(shape).astype(np.float32)

    def close(self, got, want, what, atol=F32_ATOL):
        want = want.numpy() if isinstance(want, torch.Tensor) else want
        np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=0, atol=atol,
                                   err_msg=what)

    # -- Qwen2-VL: chunked M-RoPE ---------------------------------------------------------
    def test_qwen2_vl_mrope_chunked_matches_hf(self):
        section = [16, 24, 24]
        bs, seq, heads, kv_heads, d = 2, 24, 4, 2, 128
        q, k = self.randn(bs, seq, heads, d), self.randn(bs, seq, kv_heads, d)
        ids = self.rng.integers(0, 3000, size=(3, bs, seq))
        rope = posenc.Rope(base=1e6, mrope_section=section)
        qo, ko = self.client.encode(q, rope, positions={"axis_ids": ids}, key=k)
        cos, sin = mrope_cos_sin(torch.from_numpy(ids), inv_freq_default(1e6, d))
        rq, rk = apply_multimodal_rotary_pos_emb(t(q).transpose(1, 2), t(k).transpose(1, 2),
                                                 cos, sin, section)
        self.close(qo, rq.transpose(1, 2), "queries")
        self.close(ko, rk.transpose(1, 2), "GQA keys")

    def test_qwen3_vl_interleaved_matches_hf(self):
        section = [24, 20, 20]
        bs, seq, heads, d = 1, 20, 4, 128
        q, k = self.randn(bs, seq, heads, d), self.randn(bs, seq, 2, d)
        ids = self.rng.integers(0, 5000, size=(3, 1, seq))
        rope = posenc.Rope(base=5e6, mrope_section=section, mrope_interleaved=True)
        qo, ko = self.client.encode(q, rope, positions={"axis_ids": ids}, key=k)
        rq, rk = qwen3_vl_rotate(t(q).transpose(1, 2), t(k).transpose(1, 2),
                                 torch.from_numpy(ids), 5e6, section)
        self.close(qo, rq.transpose(1, 2), "queries")
        self.close(ko, rk.transpose(1, 2), "keys")

    def check_segments(self, tokens, image_grids, video_grids, segments, section=(16, 24, 24),
                       interleaved=False, second_per_grid_ts=None, tokens_per_second=None):
        """The server's rotation for `segments` equals HF's for the prompt `tokens`."""
        input_ids = torch.tensor([tokens])
        ids, deltas = get_rope_index(
            input_ids, torch.tensor(image_grids) if image_grids else None,
            torch.tensor(video_grids) if video_grids else None,
            second_per_grid_ts=second_per_grid_ts, tokens_per_second=tokens_per_second)
        seq, d = len(tokens), 128
        q, k = self.randn(1, seq, 4, d), self.randn(1, seq, 1, d)
        rope = posenc.Rope(base=1e6, mrope_section=list(section), mrope_interleaved=interleaved)
        qo, ko = self.client.encode(q, rope, positions={"mrope_segments": segments}, key=k)
        if interleaved:
            rq, rk = qwen3_vl_rotate(t(q).transpose(1, 2), t(k).transpose(1, 2), ids, 1e6,
                                     list(section))
        else:
            cos, sin = mrope_cos_sin(ids, inv_freq_default(1e6, d))
            rq, rk = apply_multimodal_rotary_pos_emb(t(q).transpose(1, 2), t(k).transpose(1, 2),
                                                     cos, sin, list(section))
        self.close(qo, rq.transpose(1, 2), "queries")
        self.close(ko, rk.transpose(1, 2), "keys")
        # A decode step: HF's cache_position + rope_deltas on every axis = an offset.
        step_q = self.randn(1, 1, 4, d)
        pos = seq + deltas[0]
        got = self.client.encode(step_q, rope, positions=pos)
        want = rope_apply(t(step_q), [pos], inv_freq_default(1e6, d))
        self.close(got, want, "decode step")

    def test_get_rope_index_text_image_video(self):
        V, I, VID = 151652, 151655, 151656
        # text(3) <vs> image 1x4x4 (merged 1x2x2) text(2) <vs> video 2x4x6 (merged 2x2x3) text(3)
        tokens = [1, 2, 3, V] + [I] * 4 + [5, V] + [VID] * 12 + [6, 7, 8]
        segments = [{"text_length": 4}, {"grid_t": 1, "grid_h": 2, "grid_w": 2},
                    {"text_length": 2}, {"grid_t": 2, "grid_h": 2, "grid_w": 3},
                    {"text_length": 3}]
        self.check_segments(tokens, [[1, 4, 4]], [[2, 4, 6]], segments)
        self.check_segments(tokens, [[1, 4, 4]], [[2, 4, 6]], segments, section=(24, 20, 20),
                            interleaved=True)

    def test_get_rope_index_image_first_and_two_grids_in_a_row(self):
        V, I = 151652, 151655
        # An image at the very start (HF needs its vision_start token; here it is the first
        # token of the prompt, a text run of 1), then two images back to back.
        tokens = [V] + [I] * 6 + [V] + [I] * 4 + [9, 9]
        segments = [{"text_length": 1}, {"grid_t": 1, "grid_h": 2, "grid_w": 3},
                    {"text_length": 1}, {"grid_t": 1, "grid_h": 2, "grid_w": 2},
                    {"text_length": 2}]
        self.check_segments(tokens, [[1, 4, 6], [1, 4, 4]], [], segments)
        # Grids separated only by their vision_start tokens.
        input_ids = torch.tensor([[V] + [I] * 4 + [V] + [I] * 4])
        ids, _ = get_rope_index(input_ids, torch.tensor([[1, 4, 4], [1, 4, 4]]), None)
        q = self.randn(1, 10, 2, 64)
        rope = posenc.Rope(mrope_section=[8, 12, 12])
        got = self.client.encode(q, rope, positions={"mrope_segments": [
            {"text_length": 1}, {"grid_t": 1, "grid_h": 2, "grid_w": 2},
            {"text_length": 1}, {"grid_t": 1, "grid_h": 2, "grid_w": 2}]})
        cos, sin = mrope_cos_sin(ids, inv_freq_default(10000.0, 64))
        want, _ = apply_multimodal_rotary_pos_emb(t(q).transpose(1, 2), t(q).transpose(1, 2),
                                                  cos, sin, [8, 12, 12])
        self.close(got, want.transpose(1, 2), "two grids")

    def test_qwen2_5_vl_temporal_scale(self):
        V, VID = 151652, 151656
        tokens = [1, V] + [VID] * 8 + [2, 3]
        # second_per_grid_t 0.5 s, tokens_per_second 2 -> temporal_scale 1; 1.25 s -> 2.5.
        for spg in (0.5, 1.25, 0.3):
            segments = [{"text_length": 2},
                        {"grid_t": 4, "grid_h": 1, "grid_w": 2, "temporal_scale": spg * 2},
                        {"text_length": 2}]
            self.check_segments(tokens, [], [[4, 2, 4]], segments,
                                second_per_grid_ts=[spg], tokens_per_second=2)

    def test_vision_tower_axial_rope(self):
        grid = [[1, 4, 6], [2, 2, 2]]
        pos = vision_rot_pos_pairs(grid)  # [tokens, 2]
        tokens, heads, head_dim = pos.shape[0], 4, 80
        q = self.randn(tokens, heads, head_dim)
        rope = posenc.Rope(axial_axes=2, layout="thd")
        got = self.client.encode(q, rope, positions={"axis_ids": pos.T.numpy()})
        self.close(got, vision_rotate(t(q), pos, head_dim), "vision q")
        # One axis is plain RoPE, and takes axis_ids of one row.
        ids = np.arange(tokens)[None] * 3
        one = self.client.encode(q, posenc.Rope(axial_axes=1, layout="thd"), positions={"axis_ids": ids})
        np.testing.assert_array_equal(one, self.client.encode(
            q, posenc.Rope(layout="thd"), positions={"ids": ids[0]}))
        one = self.client.encode(q, posenc.Rope(mrope_section=[head_dim // 2], layout="thd"),
                                 positions={"axis_ids": ids})
        np.testing.assert_array_equal(one, self.client.encode(
            q, posenc.Rope(layout="thd"), positions={"ids": ids[0]}))

    def test_xpos_queries_and_keys(self):
        bs, seq, heads, d, rotary = 1, 40, 2, 32, 24
        q, k = self.randn(bs, seq, heads, d), self.randn(bs, seq, heads, d)
        positions = list(range(seq))
        rope = posenc.Rope(rotary_dim=rotary, xpos_scale_base=512)
        qo, ko = self.client.encode(q, rope, key=k)
        rq, rk = xpos_rotate(t(q), t(k), positions, rotary, 10000.0, 512)
        self.close(qo, rq, "xPos queries")
        self.close(ko, rk, "xPos keys")
        # A decode step with the prompt's centre given explicitly.
        rope = posenc.Rope(rotary_dim=rotary, xpos_scale_base=512, xpos_center=20)
        qo, ko = self.client.encode(q[:, :1], rope, positions=45, key=k[:, :1])
        rq, rk = xpos_rotate(t(q[:, :1]), t(k[:, :1]), [45], rotary, 10000.0, 512, center=20)
        self.close(qo, rq, "xPos step queries")
        self.close(ko, rk, "xPos step keys")

    def test_proportional_gemma4(self):
        head_dim = 512
        q = self.randn(1, 6, 2, head_dim)
        positions = [0, 1, 2, 100, 4096, 70000]
        for proportion, factor in ((0.25, None), (0.5, 2.0), (1.0, None), (0.0, None)):
            scaling = {"type": "proportional", "rope_proportion": proportion}
            if factor:
                scaling["factor"] = factor
            rope = posenc.Rope(base=1e6, scaling=scaling)
            got = self.client.encode(q, rope, positions={"ids": positions})
            inv = proportional_inv_freq(1e6, head_dim, proportion, factor or 1.0)
            self.close(got, rope_apply(t(q), positions, inv), "proportion %s" % proportion)

    def test_tables_axial_and_xpos(self):
        # An axial table row repeats each axis's frequencies; xPos has no single table.
        rows = self.client.table(posenc.Rope(axial_axes=2), length=5, dim=16)
        inv = inv_freq_default(10000.0, 8).numpy()
        angles = np.arange(5)[:, None] * np.concatenate([inv, inv])[None]
        np.testing.assert_allclose(rows[:, 0], np.cos(angles), atol=1e-7)
        np.testing.assert_allclose(rows[:, 1], np.sin(angles), atol=1e-7)
        with self.assertRaises(posenc.PosencError) as err:
            self.client.table(posenc.Rope(xpos_scale_base=512), length=5, dim=16)
        self.assertEqual(err.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("rope.xpos_scale_base", err.exception.details)

    # -- text-only M-RoPE is plain RoPE, bit for bit -----------------------------------------
    def test_text_only_mrope_equals_plain_rope_bit_for_bit(self):
        for layout, shape in (("bshd", (2, 9, 3, 64)), ("bhsd", (2, 3, 9, 64)), ("thd", (9, 3, 64))):
            for style in ("neox", "gptj"):
                for dtype in ("float32", "bfloat16", "float16"):
                    for rotary_dim in (None, 48):
                        q = self.randn(*shape)
                        sect = [4, 10, 10] if rotary_dim else [8, 12, 12]
                        plain = posenc.Rope(base=1e6, rotary_dim=rotary_dim, style=style, layout=layout)
                        multi = posenc.Rope(base=1e6, rotary_dim=rotary_dim, style=style, layout=layout,
                                            mrope_section=sect)
                        x = cast(q, dtype)
                        what = "%s %s %s %s" % (layout, style, dtype, rotary_dim)
                        for positions in (None, 77):
                            a = self.client.encode(x, plain, positions=positions)
                            b = self.client.encode(x, multi, positions=positions)
                            np.testing.assert_array_equal(a, b, err_msg=what)
                        # Segments that are one text run, and axis_ids equal on every axis.
                        seq = shape[0] if layout == "thd" else shape[1 if layout == "bshd" else 2]
                        a = self.client.encode(x, plain)
                        b = self.client.encode(x, multi,
                                               positions={"mrope_segments": [{"text_length": seq}]})
                        np.testing.assert_array_equal(a, b, err_msg=what + " segments")
                        same = np.tile(np.arange(seq), (3, 1))
                        b = self.client.encode(x, multi, positions={"axis_ids": same})
                        np.testing.assert_array_equal(a, b, err_msg=what + " axis_ids")

    def test_mrope_layouts_styles_partial_dtypes(self):
        section = [4, 6, 6]
        ids = self.rng.integers(0, 400, size=(3, 2, 7))
        inv = inv_freq_default(10000.0, 32)
        for style in ("neox", "gptj"):
            q = self.randn(2, 7, 3, 48)  # partial rotary: 32 of 48
            # Reference: per-slot angles from the slot's axis, HF chunked layout.
            axis = np.repeat(np.arange(3), section)
            angles = np.stack([ids[axis[f]] for f in range(16)], -1) * inv.numpy()  # [bs, seq, 16]
            ref = rope_angles(t(q), torch.from_numpy(angles), style)
            for layout in ("bshd", "bhsd"):
                x = q if layout == "bshd" else np.ascontiguousarray(q.transpose(0, 2, 1, 3))
                rope = posenc.Rope(rotary_dim=32, style=style, layout=layout, mrope_section=section)
                for dtype in ("float32", "bfloat16"):
                    got = self.client.encode(cast(x, dtype), rope, positions={"axis_ids": ids})
                    got = posenc.from_bfloat16(got) if dtype == "bfloat16" else np.asarray(got)
                    if layout == "bhsd":
                        got = got.transpose(0, 2, 1, 3)
                    if dtype == "float32":
                        self.close(got, ref, "%s %s" % (style, layout))
                    else:
                        # The reference from the bfloat16-rounded inputs.
                        xr = posenc.from_bfloat16(posenc.to_bfloat16(q))
                        ref16 = rope_angles(t(xr), torch.from_numpy(angles), style)
                        np.testing.assert_allclose(got, ref16.numpy(), rtol=BF16_RTOL, atol=BF16_ATOL,
                                                   err_msg="%s %s bf16" % (style, layout))
        # THD: one row of tokens, offsets added to every axis.
        q = self.randn(7, 2, 32)
        rope = posenc.Rope(layout="thd", mrope_section=[4, 6, 6])
        got = self.client.encode(q, rope, positions={"axis_ids": ids[:, :1], "offsets": [1000]})
        axis = np.repeat(np.arange(3), section)
        angles = np.stack([ids[axis[f], 0] + 1000 for f in range(16)], -1) * inv.numpy()
        self.close(got, rope_angles(t(q)[None], torch.from_numpy(angles)[None], "neox")[0], "thd")

    def test_far_positions_take_the_sparse_path(self):
        # Positions far past any dense table: rows computed for the tokens present.
        ids = np.stack([np.arange(5) + 2**39, np.arange(5) * 3 + 2**38, np.arange(5) + 7])[:, None]
        q = self.randn(1, 5, 2, 16)
        got = self.client.encode(q, posenc.Rope(mrope_section=[2, 3, 3]), positions={"axis_ids": ids})
        cos, sin = mrope_cos_sin(torch.from_numpy(ids), inv_freq_default(10000.0, 16))
        want, _ = apply_multimodal_rotary_pos_emb(t(q).transpose(1, 2), t(q).transpose(1, 2),
                                                  cos, sin, [2, 3, 3])
        self.close(got, want.transpose(1, 2), "far positions", atol=1e-4)

    def test_mrope_through_shared_memory_and_streams(self):
        # The server of this test runs with --shm: queries and keys travel by reference and
        # are rotated in place; EncodeStream answers each request as Encode does.
        section = [16, 24, 24]
        ids = self.rng.integers(0, 700, size=(3, 1, 8))
        q, k = self.randn(1, 8, 4, 128), self.randn(1, 8, 2, 128)
        rope = posenc.Rope(base=1e6, mrope_section=section)
        want_q, want_k = self.client.encode(q, rope, positions={"axis_ids": ids}, key=k)
        with posenc.SharedMemoryRegion(1 << 16) as region:
            self.client.register_shared_memory("mrope-r0", region)
            qs = region.write(q)
            ks = region.write(k, offset=q.nbytes)
            got_q, got_k = self.client.encode(qs, rope, positions={"axis_ids": ids}, key=ks)
            np.testing.assert_array_equal(got_q, want_q)
            np.testing.assert_array_equal(got_k, want_k)
            del got_q, got_k, qs, ks
            self.client.unregister_shared_memory("mrope-r0")
        segments = [{"text_length": 2}, {"grid_t": 1, "grid_h": 2, "grid_w": 2}, {"text_length": 2}]
        results = list(self.client.encode_stream(
            [(q, rope, {"axis_ids": ids}), (q, rope, {"mrope_segments": segments})]))
        np.testing.assert_array_equal(results[0], want_q)
        np.testing.assert_array_equal(results[1], self.client.encode(
            q, rope, positions={"mrope_segments": segments}))

    # -- bad input ----------------------------------------------------------------------------
    def expect_invalid(self, what, call, field):
        with self.assertRaises(posenc.PosencError, msg=what) as err:
            call()
        self.assertEqual(err.exception.code, grpc.StatusCode.INVALID_ARGUMENT, what)
        self.assertIn(field, err.exception.details, what)

    def test_bad_input_names_the_field(self):
        q = self.randn(1, 4, 2, 16)
        enc = self.client.encode
        self.expect_invalid("sections", lambda: enc(q, posenc.Rope(mrope_section=[2, 2, 2])),
                            "rope.mrope_section sums to 6")
        self.expect_invalid("interleaved 2", lambda: enc(q, posenc.Rope(mrope_section=[4, 4],
                                                                        mrope_interleaved=True)),
                            "rope.mrope_section")
        self.expect_invalid("axis_ids size", lambda: enc(q, posenc.Rope(mrope_section=[2, 3, 3]),
                                                         positions={"axis_ids": np.zeros((3, 5), np.int64)}),
                            "positions.axis_ids has 15 entries")
        self.expect_invalid("negative", lambda: enc(q, posenc.Rope(mrope_section=[2, 3, 3]),
                                                    positions={"axis_ids": -np.ones((3, 4), np.int64)}),
                            "positions.axis_ids[0]")
        self.expect_invalid("segments total", lambda: enc(q, posenc.Rope(mrope_section=[2, 3, 3]),
                            positions={"mrope_segments": [{"text_length": 2},
                                                          {"grid_t": 1, "grid_h": 1, "grid_w": 1}]}),
                            "positions.mrope_segments cover 3 tokens")
        self.expect_invalid("segment shape", lambda: enc(q, posenc.Rope(mrope_section=[2, 3, 3]),
                            positions={"mrope_segments": [{"text_length": 2, "grid_t": 1,
                                                           "grid_h": 1, "grid_w": 2}]}),
                            "positions.mrope_segments[0]")
        self.expect_invalid("axial scaling", lambda: enc(q, posenc.Rope(
            axial_axes=2, scaling={"type": "linear", "factor": 2})), "rope.scaling.type")
        self.expect_invalid("axial width", lambda: enc(self.randn(1, 4, 2, 14), posenc.Rope(axial_axes=2)),
                            "rope.axial_axes")
        self.expect_invalid("xpos centre alone", lambda: enc(q, posenc.Rope(xpos_center=3)),
                            "rope.xpos_scale_base is unset")
        self.expect_invalid("xpos base", lambda: enc(q, posenc.Rope(xpos_scale_base=-1.0)),
                            "rope.xpos_scale_base")
        self.expect_invalid("axis ids, one axis", lambda: enc(q, posenc.Rope(),
                            positions={"axis_ids": np.zeros((1, 4), np.int64)}), "positions.axis_ids")
        self.expect_invalid("ids and axis ids", lambda: enc(q, posenc.Rope(mrope_section=[2, 3, 3]),
                            positions={"ids": [0, 1, 2, 3], "axis_ids": np.zeros((3, 4), np.int64)}),
                            "positions.ids")
        self.expect_invalid("proportion", lambda: enc(q, posenc.Rope(
            scaling={"type": "proportional", "rope_proportion": 1.5})), "rope.scaling.rope_proportion")
        self.expect_invalid("sinusoidal axis ids", lambda: enc(self.randn(1, 4, 16), posenc.Sinusoidal(),
                            positions={"axis_ids": np.zeros((3, 4), np.int64)}), "positions.axis_ids")
        # The server still answers correctly afterwards.
        y = enc(q, posenc.Rope(mrope_section=[2, 3, 3]))
        np.testing.assert_array_equal(y, enc(q, posenc.Rope()))

    def test_random_multi_axis_requests_are_answered_or_refused(self):
        # Odd combinations of sections, axial axes, xPos, proportional scaling, axis_ids and
        # segments: each is OK or INVALID_ARGUMENT, and the server keeps answering.
        rng = np.random.default_rng(7)
        for _ in range(300):
            layout = str(rng.choice(["bshd", "bhsd", "thd"]))
            hd, b, sq = int(rng.choice([2, 4, 6, 8, 16, 18])), int(rng.integers(1, 3)), int(rng.integers(0, 6))
            shape = (sq, 2, hd) if layout == "thd" else (b, sq, 2, hd)
            q = rng.standard_normal(shape).astype(np.float32)
            kw = {}
            if rng.random() < 0.5:
                kw["mrope_section"] = [int(x) for x in rng.integers(0, hd // 2 + 1, size=int(rng.integers(1, 4)))]
                kw["mrope_interleaved"] = bool(rng.random() < 0.4)
            elif rng.random() < 0.5:
                kw["axial_axes"] = int(rng.integers(0, 5))
            if rng.random() < 0.3:
                kw["xpos_scale_base"] = float(rng.choice([512.0, 1.0, 1e-4]))
            scaling = {"type": "proportional", "rope_proportion": 0.5} if rng.random() < 0.2 else None
            pos = {}
            if rng.random() < 0.5:
                pos["axis_ids"] = rng.integers(0, 50, size=(int(rng.integers(1, 4)), 1, sq))
            elif rng.random() < 0.5:
                pos["mrope_segments"] = [{"text_length": int(rng.integers(0, 3))},
                                         {"grid_t": 1, "grid_h": int(rng.integers(1, 3)), "grid_w": 1}]
            if rng.random() < 0.3:
                pos["offsets"] = [int(rng.integers(0, 1000))]
            try:
                self.client.encode(q, posenc.Rope(layout=layout, scaling=scaling, **kw),
                                   positions=pos or None, key=q if rng.random() < 0.5 else None)
            except posenc.PosencError as err:
                self.assertEqual(err.code, grpc.StatusCode.INVALID_ARGUMENT, err.details)
        q = self.randn(1, 4, 2, 16)
        np.testing.assert_array_equal(self.client.encode(q, posenc.Rope(mrope_section=[2, 3, 3])),
                                      self.client.encode(q, posenc.Rope()))

    # -- HF configs of today's models --------------------------------------------------------
    def test_fixture_configs_parse_and_match_the_reference(self):
        cases = {
            "qwen2-vl-7b-instruct.json": (1e6, 128, 28, 4, [16, 24, 24], False),
            "qwen2.5-vl-7b-instruct.json": (1e6, 128, 28, 4, [16, 24, 24], False),
            "qwen3-vl-8b-instruct.json": (5e6, 128, 32, 8, [24, 20, 20], True),
        }
        for name, (base, head_dim, heads, kv, section, inter) in cases.items():
            rope = posenc.Rope.from_hf_config(os.path.join(FIXTURES, name))
            p = rope.proto()
            self.assertEqual((p.base, rope.head_dim, rope.num_attention_heads,
                              rope.num_key_value_heads, list(p.mrope_section), p.mrope_interleaved),
                             (base, head_dim, heads, kv, section, inter), name)
            ids = self.rng.integers(0, 9000, size=(3, 1, 6))
            q, k = self.randn(1, 6, heads, head_dim), self.randn(1, 6, kv, head_dim)
            qo, ko = self.client.encode(q, rope, positions={"axis_ids": ids}, key=k)
            if inter:
                rq, rk = qwen3_vl_rotate(t(q).transpose(1, 2), t(k).transpose(1, 2),
                                         torch.from_numpy(ids), base, section)
            else:
                cos, sin = mrope_cos_sin(torch.from_numpy(ids), inv_freq_default(base, head_dim))
                rq, rk = apply_multimodal_rotary_pos_emb(t(q).transpose(1, 2), t(k).transpose(1, 2),
                                                         cos, sin, section)
            self.close(qo, rq.transpose(1, 2), name)
            self.close(ko, rk.transpose(1, 2), name + " keys")

        positions = [0, 5, 1000, 9000]
        plain = {
            # name, layer_type: (base, head_dim, heads, kv, rotary_dim, style, inv_freq)
            ("gemma-3-4b-it.json", "full_attention"): (1e6, 256, 8, 4, None, "neox",
                                                       inv_freq_default(1e6, 256) / 8.0),
            ("gemma-3-4b-it.json", "sliding_attention"): (1e4, 256, 8, 4, None, "neox",
                                                          inv_freq_default(1e4, 256)),
            ("gemma-4-e2b-it.json", "full_attention"): (1e6, 512, 8, 1, None, "neox",
                                                        proportional_inv_freq(1e6, 512, 0.25)),
            ("gemma-4-e2b-it.json", "sliding_attention"): (1e4, 256, 8, 1, None, "neox",
                                                           inv_freq_default(1e4, 256)),
            ("llama-4-scout-17b-16e.json", None): (5e5, 128, 40, 8, None, "gptj",
                                                   hf_llama3_inv_freq(5e5, 128, 16.0, 1.0, 1.0, 8192)),
            ("glm-4-9b-chat-hf.json", None): (1e4, 128, 32, 2, 64, "gptj", inv_freq_default(1e4, 64)),
        }
        for (name, layer), (base, head_dim, heads, kv, rotary_dim, style, inv) in plain.items():
            rope = posenc.Rope.from_hf_config(os.path.join(FIXTURES, name), layer_type=layer)
            p = rope.proto()
            what = "%s %s" % (name, layer)
            self.assertEqual((p.base, rope.head_dim, rope.num_attention_heads, rope.num_key_value_heads,
                              p.rotary_dim or None, posenc.pb.RopeStyle.Name(p.style).lower()),
                             (base, head_dim, heads, kv, rotary_dim, style), what)
            q, k = self.randn(1, 4, heads, head_dim), self.randn(1, 4, kv, head_dim)
            qo, ko = self.client.encode(q, rope, positions={"ids": positions}, key=k)
            self.close(qo, rope_apply(t(q), positions, inv, style), what)
            self.close(ko, rope_apply(t(k), positions, inv, style), what + " keys")

    def test_fixture_configs_cli_equals_python(self):
        cli = os.environ.get("POSENC_CLIENT")
        if not cli:
            self.skipTest("POSENC_CLIENT (build/client/posenc-client) not set")
        paths = sorted(glob.glob(os.path.join(FIXTURES, "*.json")))
        with tempfile.TemporaryDirectory() as tmp:
            for path in paths:
                layers = [None]
                if os.path.basename(path).startswith("gemma-"):
                    layers = ["full_attention", "sliding_attention"]
                for layer in layers:
                    rope = posenc.Rope.from_hf_config(path, layer_type=layer)
                    q = self.randn(1, 6, 2, rope.head_dim)
                    np.save(os.path.join(tmp, "q.npy"), q)
                    args = [cli, "encode", "--target=" + TARGET, "--hf-config=" + path,
                            "--input=" + os.path.join(tmp, "q.npy"), "--output=" + os.path.join(tmp, "y.npy")]
                    positions = 300
                    if layer:
                        args.append("--layer-type=" + layer)
                    if rope.proto().mrope_section:
                        # A prompt of text, one 1x2x2 grid and text; and the same as axis_ids.
                        args.append("--mrope-segments=1,1x2x2,1")
                        positions = {"mrope_segments": [{"text_length": 1},
                                                        {"grid_t": 1, "grid_h": 2, "grid_w": 2},
                                                        {"text_length": 1}]}
                    else:
                        args.append("--offsets=300")
                    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
                    want = np.load(os.path.join(tmp, "y.npy"))
                    got = self.client.encode(q, rope, positions=positions)
                    np.testing.assert_array_equal(got, want, err_msg="%s %s" % (path, layer))
                    if rope.proto().mrope_section:
                        ids = np.array([[0, 1, 1, 1, 1, 3], [0, 1, 1, 2, 2, 3], [0, 1, 2, 1, 2, 3]])
                        np.save(os.path.join(tmp, "a.npy"), ids)
                        args[-1] = "--axis-ids=" + os.path.join(tmp, "a.npy")
                        subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
                        np.testing.assert_array_equal(np.load(os.path.join(tmp, "y.npy")), want,
                                                      err_msg=path + " axis ids")

    def test_gemma_defaults_fill_what_the_config_leaves_out(self):
        rope = posenc.Rope.from_hf_config({"model_type": "gemma3", "text_config": {
            "hidden_size": 2560, "model_type": "gemma3_text",
            "rope_scaling": {"factor": 8.0, "rope_type": "linear"}}})
        self.assertEqual((rope.head_dim, rope.num_attention_heads, rope.proto().base),
                         (256, 8, 1e6))
        sliding = posenc.Rope.from_hf_config({"model_type": "gemma3"}, layer_type="sliding_attention")
        self.assertEqual((sliding.proto().base, sliding.proto().HasField("scaling")), (1e4, False))
        g4 = posenc.Rope.from_hf_config({"model_type": "gemma4_text"})
        self.assertEqual((g4.head_dim, g4.proto().scaling.type), (512, posenc.pb.PROPORTIONAL))

    def test_hf_config_drops_keys_of_another_type(self):
        rope = posenc.Rope.from_hf_config({"head_dim": 64, "rope_scaling": {
            "type": "linear", "factor": 2, "attention_factor": 1.5, "beta_fast": 32}})
        self.assertEqual(rope.proto().scaling, posenc.pb.RopeScaling(type=posenc.pb.LINEAR,
                                                                     factor=2))
        v4 = posenc.Rope.from_hf_config({"model_type": "qwen2_5_vl", "head_dim": 128,
                                         "text_config": {"rope_scaling": None},
                                         "rope_scaling": {"type": "mrope",
                                                          "mrope_section": [16, 24, 24]}})
        self.assertEqual(list(v4.proto().mrope_section), [16, 24, 24])

    def test_hf_config_family_errors(self):
        with open(os.path.join(FIXTURES, "qwen2.5-vl-7b-instruct.json")) as f:
            base = json.load(f)
        del base["rope_scaling"]["mrope_section"]
        with self.assertRaises(posenc.PosencError) as err:
            posenc.Rope.from_hf_config(base)
        self.assertIn("model_type qwen2_5_vl needs mrope_section", err.exception.details)
        self.assertIn("rope_scaling.mrope_section (transformers 4)", err.exception.details)
        self.assertIn("rope_parameters.mrope_section (transformers 5)", err.exception.details)
        with self.assertRaises(posenc.PosencError) as err:
            posenc.Rope.from_hf_config(os.path.join(FIXTURES, "gemma-3-4b-it.json"),
                                       layer_type="local")
        self.assertIn("layer_type 'local' is unknown", err.exception.details)
        with self.assertRaises(posenc.PosencError) as err:
            posenc.Rope.from_hf_config(os.path.join(FIXTURES, "llama-3.1-8b.json"),
                                       layer_type="sliding_attention")
        self.assertIn("has no per-layer RoPE", err.exception.details)


def rope_angles(x, angles, style):
    """Rotation of the first 2 * angles.shape[-1] features of x [bs, seq, heads, d] by explicit
    per-slot angles [bs, seq, r/2] (NeoX: pairs (f, f + r/2); GPT-J: (2f, 2f + 1))."""
    r = 2 * angles.shape[-1]
    ro, rest = x[..., :r], x[..., r:]
    a = angles[:, :, None, :]
    if style == "neox":
        emb = torch.cat((a, a), dim=-1)
        out = ro * emb.cos() + rotate_half(ro) * emb.sin()
    else:
        cos, sin = a.cos().repeat_interleave(2, -1), a.sin().repeat_interleave(2, -1)
        x1, x2 = ro[..., 0::2], ro[..., 1::2]
        out = ro * cos + torch.stack((-x2, x1), dim=-1).flatten(-2) * sin
    return torch.cat([out, rest], dim=-1)


if __name__ == "__main__":
    unittest.main()
