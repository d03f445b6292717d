#!/usr/bin/python3
"""The call a user writes: each reference implementation's own function, called with its
defaults, against posenc called with only the corresponding fields set, from a real
posenc-server (tests/reference_defaults_test.sh starts it and sets POSENC_TARGET).

References, transcribed into this file from their sources (transformers is not installed):
- HF transformers models/deberta_v2/modeling_deberta_v2.py: build_relative_position and
  make_log_bucket_position (torch, as HF runs them: int64 positions, float32 log and ceil);
- tensor2tensor layers/common_attention.py: _generate_relative_positions_matrix (cache=False),
  in numpy;
- HF transformers models/t5/modeling_t5.py: T5Attention._relative_position_bucket and
  compute_bias, and the decode step's slice position_bias[:, :, -query_length:, :];
- HF transformers get_rope_index of models/qwen2_vl/modeling_qwen2_vl.py,
  models/qwen2_5_vl/modeling_qwen2_5_vl.py (second_per_grid_t = 0 for images,
  arange * second_per_grid_t * tokens_per_second for videos) and
  models/qwen3_vl/modeling_qwen3_vl.py (video_grid_thw split into single frames first), for
  one unpadded prompt, in torch.
The multimodal positions are compared through the rotation: posenc's output for the prompt's
mrope_segments must equal, bit for bit, its output for HF's position_ids sent as axis_ids, and
both must match a float64 rotation by HF's position_ids.
"""
import math
import os
import unittest

import numpy as np
import torch

import posenc

TARGET = os.environ.get("POSENC_TARGET", "127.0.0.1:50051")


# -- HF modeling_deberta_v2.py ----------------------------------------------------------------
def make_log_bucket_position(relative_pos, bucket_size, max_position):
    sign = torch.sign(relative_pos)
    mid = bucket_size // 2
    abs_pos = torch.where(
        (relative_pos < mid) & (relative_pos > -mid),
        torch.tensor(mid - 1).type_as(relative_pos),
        torch.abs(relative_pos),
    )
    log_pos = (
        torch.ceil(torch.log(abs_pos / mid) / torch.log(torch.tensor((max_position - 1) / mid)) * (mid - 1))
        + mid
    )
    bucket_pos = torch.where(abs_pos <= mid, relative_pos.type_as(log_pos), log_pos * sign)
    return bucket_pos


def build_relative_position(query_layer, key_layer, bucket_size=-1, max_position=-1):
    query_size = query_layer.size(-2)
    key_size = key_layer.size(-2)
    q_ids = torch.arange(query_size, dtype=torch.long, device=query_layer.device)
    k_ids = torch.arange(key_size, dtype=torch.long, device=key_layer.device)
    rel_pos_ids = q_ids[:, None] - k_ids[None, :]
    if bucket_size > 0 and max_position > 0:
        rel_pos_ids = make_log_bucket_position(rel_pos_ids, bucket_size, max_position)
    rel_pos_ids = rel_pos_ids.to(torch.long)
    rel_pos_ids = rel_pos_ids[:query_size, :]
    rel_pos_ids = rel_pos_ids.unsqueeze(0)
    return rel_pos_ids


# -- tensor2tensor common_attention.py ------------------------------------------------------
def _generate_relative_positions_matrix(length_q, length_k, max_relative_position,
                                        cache=False):
    if not cache:
        if length_q == length_k:
            range_vec_q = range_vec_k = np.arange(length_q)
        else:
            range_vec_k = np.arange(length_k)
            range_vec_q = range_vec_k[-length_q:]
        distance_mat = range_vec_k[None, :] - range_vec_q[:, None]
    else:
        distance_mat = np.expand_dims(np.arange(-length_k + 1, 1, 1), 0)
    distance_mat_clipped = np.clip(distance_mat, -max_relative_position, max_relative_position)
    final_mat = distance_mat_clipped + max_relative_position
    return final_mat


# -- HF modeling_t5.py ----------------------------------------------------------------------
def _relative_position_bucket(relative_position, bidirectional=True, num_buckets=32,
                              max_distance=128):
    relative_buckets = 0
    if bidirectional:
        num_buckets //= 2
        relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
        relative_position = torch.abs(relative_position)
    else:
        relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    relative_position_if_large = max_exact + (
        torch.log(relative_position.float() / max_exact)
        / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)
    ).to(torch.long)
    relative_position_if_large = torch.min(
        relative_position_if_large, torch.full_like(relative_position_if_large, num_buckets - 1)
    )
    relative_buckets += torch.where(is_small, relative_position, relative_position_if_large)
    return relative_buckets


def t5_decode_buckets(query_length, key_length, bidirectional):
    """compute_bias(real_seq_length = key_length, key_length)'s buckets, sliced to the last
    query_length rows as T5Attention.forward does with a cache."""
    context_position = torch.arange(key_length, dtype=torch.long)[:, None]
    memory_position = torch.arange(key_length, dtype=torch.long)[None, :]
    relative_position = memory_position - context_position
    buckets = _relative_position_bucket(relative_position, bidirectional=bidirectional)
    return buckets[-query_length:, :]


# -- HF get_rope_index, one prompt -----------------------------------------------------------
IMAGE, VIDEO, START, END = 151655, 151656, 151652, 151653
MERGE, TOKENS_PER_SECOND = 2, 2


def get_rope_index(family, input_ids, image_grid_thw=None, video_grid_thw=None,
                   second_per_grid_ts=None):
    if family == "qwen3_vl" and video_grid_thw is not None:
        video_grid_thw = torch.repeat_interleave(video_grid_thw, video_grid_thw[:, 0], dim=0)
        video_grid_thw[:, 0] = 1
    input_tokens = input_ids.tolist()
    vision_start_indices = torch.argwhere(input_ids == START).squeeze(1)
    vision_tokens = input_ids[vision_start_indices + 1]
    image_nums = int((vision_tokens == IMAGE).sum())
    video_nums = int((vision_tokens == VIDEO).sum())
    llm_pos_ids_list, st = [], 0
    image_index, video_index = 0, 0
    remain_images, remain_videos = image_nums, video_nums
    for _ in range(image_nums + video_nums):
        ed_image = (input_tokens.index(IMAGE, st) if IMAGE in input_tokens and remain_images > 0
                    else len(input_tokens) + 1)
        ed_video = (input_tokens.index(VIDEO, st) if VIDEO in input_tokens and remain_videos > 0
                    else len(input_tokens) + 1)
        if ed_image < ed_video:
            t, h, w = image_grid_thw[image_index]
            second_per_grid_t = 0
            image_index += 1
            remain_images -= 1
            ed = ed_image
        else:
            t, h, w = video_grid_thw[video_index]
            second_per_grid_t = (second_per_grid_ts[video_index]
                                 if second_per_grid_ts is not None else 1.0)
            video_index += 1
            remain_videos -= 1
            ed = ed_video
        llm_grid_t, llm_grid_h, llm_grid_w = t.item(), h.item() // MERGE, w.item() // MERGE
        text_len = ed - st
        st_idx = llm_pos_ids_list[-1].max() + 1 if len(llm_pos_ids_list) > 0 else 0
        llm_pos_ids_list.append(torch.arange(text_len).view(1, -1).expand(3, -1) + st_idx)
        if family == "qwen2_5_vl":
            range_tensor = torch.arange(llm_grid_t).view(-1, 1)
            expanded_range = range_tensor.expand(-1, llm_grid_h * llm_grid_w)
            time_tensor = expanded_range * second_per_grid_t * TOKENS_PER_SECOND
            t_index = time_tensor.long().flatten()
        else:  # Qwen2-VL, Qwen3-VL
            t_index = torch.arange(llm_grid_t).view(-1, 1).expand(-1, llm_grid_h * llm_grid_w).flatten()
        h_index = torch.arange(llm_grid_h).view(1, -1, 1).expand(llm_grid_t, -1, llm_grid_w).flatten()
        w_index = torch.arange(llm_grid_w).view(1, 1, -1).expand(llm_grid_t, llm_grid_h, -1).flatten()
        llm_pos_ids_list.append(torch.stack([t_index, h_index, w_index]) + text_len + st_idx)
        st = ed + llm_grid_t * llm_grid_h * llm_grid_w
    if st < len(input_tokens):
        st_idx = llm_pos_ids_list[-1].max() + 1 if len(llm_pos_ids_list) > 0 else 0
        text_len = len(input_tokens) - st
        llm_pos_ids_list.append(torch.arange(text_len).view(1, -1).expand(3, -1) + st_idx)
    return torch.cat(llm_pos_ids_list, dim=1).reshape(3, 1, -1)


# -- prompts as the Qwen-VL processors write them ------------------------------------------
def text(n, seed):
    return list(np.random.default_rng(seed).integers(100, 1000, size=n))


def vision(token, grid):
    t, h, w = grid
    return [START] + [token] * (t * h * w // MERGE ** 2) + [END]


def qwen3_video(grid, seed):
    """Qwen3-VL: each frame after its own timestamp text ("<t seconds>")."""
    out = []
    for frame in range(grid[0]):
        out += text(3, seed + frame) + vision(VIDEO, (1, grid[1], grid[2]))
    return out


def prompt(family, parts):
    """parts: ("text", n) | ("image", grid) | ("video", grid) -> input_ids, grids."""
    ids, images, videos = [], [], []
    for i, (kind, value) in enumerate(parts):
        if kind == "text":
            ids += text(value, i)
        elif kind == "image":
            ids += vision(IMAGE, value)
            images.append(value)
        elif family == "qwen3_vl":
            ids += qwen3_video(value, 100 * i)
            videos.append(value)
        else:
            ids += vision(VIDEO, value)
            videos.append(value)
    return (np.array(ids, np.int64), np.array(images, np.int64).reshape(-1, 3),
            np.array(videos, np.int64).reshape(-1, 3))


PROMPTS = {
    "images": [("text", 5), ("image", (1, 4, 6)), ("text", 3), ("image", (2, 4, 4)),
               ("text", 2)],
    "videos": [("text", 4), ("video", (3, 4, 4)), ("text", 6)],
    "mixed": [("text", 3), ("video", (2, 2, 4)), ("text", 2), ("image", (1, 6, 4)),
              ("video", (3, 4, 2)), ("text", 4)],
}
SECTIONS = {"qwen2_vl": [2, 3, 3], "qwen2_5_vl": [2, 3, 3], "qwen3_vl": [4, 2, 2]}
BASE = 1e6


def rope_f64(x, positions, sections, interleaved):
    """float64 NEOX rotation of x [1, seq, heads, 16] by per-axis positions [3, 1, seq]."""
    half = x.shape[-1] // 2
    inv_freq = BASE ** (-np.arange(0, 2 * half, 2, dtype=np.float64) / (2 * half))
    if interleaved:
        axis = [f % 3 if f % 3 and f < 3 * sections[f % 3] else 0 for f in range(half)]
    else:
        axis = np.repeat(np.arange(3), sections).tolist()
    pos = positions[:, 0, :].astype(np.float64)  # [3, seq]
    angles = np.stack([pos[axis[f]] * inv_freq[f] for f in range(half)], axis=-1)  # [seq, half]
    cos, sin = np.cos(angles)[None, :, None, :], np.sin(angles)[None, :, None, :]
    x = x.astype(np.float64)
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


class ReferenceDefaults(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.client = posenc.Client(TARGET)

    def test_deberta_is_hfs_build_relative_position(self):
        for q, k in ((300, 500), (500, 300), (7, 3), (1, 9), (64, 64)):
            query, key = torch.zeros(1, q, 1), torch.zeros(1, k, 1)
            for buckets, max_pos in ((256, 512), (-1, -1)):
                want = build_relative_position(query, key, buckets, max_pos)[0].numpy()
                scheme = posenc.Deberta() if buckets > 0 else posenc.Deberta(-1, -1)
                got = self.client.attention_bias(scheme, q, k)
                self.assertEqual(got.shape, (q, k))
                np.testing.assert_array_equal(got, want, "deberta q=%d k=%d" % (q, k))
        row0 = self.client.attention_bias(posenc.Deberta(-1, -1), 300, 500)[0, :4]
        np.testing.assert_array_equal(row0, [0, -1, -2, -3])
        # An explicit offset still counts, 0 included.
        shifted = self.client.attention_bias(posenc.Deberta(-1, -1), 2, 5, query_offset=3)
        np.testing.assert_array_equal(shifted[0], [3, 2, 1, 0, -1])
        zero = self.client.attention_bias(posenc.Deberta(-1, -1), 2, 5, query_offset=0)
        np.testing.assert_array_equal(zero[1], [1, 0, -1, -2, -3])

    def test_shaw_is_tensor2tensors_matrix(self):
        for q, k, kmax in ((3, 7, 2), (1, 16, 4), (5, 5, 3), (6, 40, 8)):
            want = _generate_relative_positions_matrix(q, k, kmax)
            got = self.client.attention_bias(posenc.Shaw(kmax), q, k)
            np.testing.assert_array_equal(got, want, "shaw q=%d k=%d" % (q, k))

    def test_t5_is_hfs_decode_slice(self):
        for q, k in ((1, 300), (1, 7), (4, 50)):
            for bidirectional in (False, True):
                want = t5_decode_buckets(q, k, bidirectional).numpy()
                got = self.client.attention_bias(posenc.T5(bidirectional=bidirectional), q, k)
                np.testing.assert_array_equal(got, want, "t5 q=%d k=%d" % (q, k))

    def test_decode_default_says_what_to_set_when_the_query_is_longer(self):
        for scheme in (posenc.T5(), posenc.Shaw(2), posenc.Alibi(num_heads=2)):
            with self.assertRaises(posenc.PosencError) as err:
                self.client.attention_bias(scheme, 5, 3)
            self.assertIn("query_length (5) is more than key_length (3); %s places the queries "
                          "at the end of the keys by default" % scheme.oneof, err.exception.details)
            self.assertIn("set query_offset >= 0", err.exception.details)
            self.assertEqual(self.client.attention_bias(scheme, 5, 3, query_offset=0).shape[-2:],
                             (5, 3))

    def check_family(self, family, parts, seconds=None):
        ids, images, videos = prompt(family, parts)
        hf = get_rope_index(family, torch.tensor(ids),
                            torch.tensor(images) if len(images) else None,
                            torch.tensor(videos) if len(videos) else None, seconds).numpy()
        config = {"model_type": family, "image_token_id": IMAGE, "video_token_id": VIDEO,
                  "vision_start_token_id": START,
                  "vision_config": {"spatial_merge_size": MERGE,
                                    "tokens_per_second": TOKENS_PER_SECOND}}
        segments = posenc.mrope_segments(ids, images if len(images) else None,
                                         videos if len(videos) else None, seconds, config=config)
        x = np.random.default_rng(len(ids)).standard_normal((1, len(ids), 2, 16)).astype(np.float32)
        rope = posenc.Rope(base=BASE, mrope_section=SECTIONS[family],
                           mrope_interleaved=family == "qwen3_vl")
        by_segments = self.client.encode(x, rope, positions={"mrope_segments": segments})
        by_ids = self.client.encode(x, rope, positions={"axis_ids": hf})
        np.testing.assert_array_equal(by_segments, by_ids, "%s %s" % (family, parts))
        want = rope_f64(x, hf, SECTIONS[family], family == "qwen3_vl")
        np.testing.assert_allclose(by_ids, want, rtol=0, atol=2e-5)
        return segments

    def test_get_rope_index_of_every_family(self):
        for family in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl"):
            for name, parts in PROMPTS.items():
                with self.subTest(family=family, prompt=name):
                    self.check_family(family, parts)
        with self.subTest("qwen2_5_vl second_per_grid_ts"):
            self.check_family("qwen2_5_vl", PROMPTS["mixed"], seconds=[1.0, 2.0])

    def test_qwen25_image_needs_only_its_kind(self):
        # An image grid with grid_t 2: HF Qwen2.5-VL puts every frame at temporal position s.
        ids, images, _ = prompt("qwen2_5_vl", [("text", 2), ("image", (2, 4, 4)), ("text", 1)])
        hf = get_rope_index("qwen2_5_vl", torch.tensor(ids), torch.tensor(images)).numpy()
        segments = [{"text_length": 3}, {"kind": "image", "grid_t": 2, "grid_h": 2, "grid_w": 2},
                    {"text_length": 2}]
        x = np.random.default_rng(7).standard_normal((1, len(ids), 1, 16)).astype(np.float32)
        rope = posenc.Rope(base=BASE, mrope_section=SECTIONS["qwen2_5_vl"])
        np.testing.assert_array_equal(
            self.client.encode(x, rope, positions={"mrope_segments": segments}),
            self.client.encode(x, rope, positions={"axis_ids": hf}))
        # A video grid of the same shape with its scale, and one without a kind (scale 1).
        video = [{"text_length": 3}, {"kind": "video", "grid_t": 2, "grid_h": 2, "grid_w": 2,
                                      "temporal_scale": 2.0}, {"text_length": 2}]
        legacy = [{"text_length": 3}, {"grid_t": 2, "grid_h": 2, "grid_w": 2}, {"text_length": 2}]
        a = self.client.encode(x, rope, positions={"mrope_segments": video})
        b = self.client.encode(x, rope, positions={"mrope_segments": legacy})
        self.assertFalse(np.array_equal(a, b))

    def test_segment_kind_errors(self):
        x = np.zeros((1, 4, 1, 16), np.float32)
        rope = posenc.Rope(mrope_section=[2, 3, 3])
        for segs, words in (
                ([{"kind": "text", "grid_t": 1, "grid_h": 2, "grid_w": 2}],
                 "kind is TEXT, which is a text run"),
                ([{"kind": "image", "text_length": 4}], "kind is IMAGE, which is a grid"),
                ([{"kind": "text", "text_length": 4, "temporal_scale": 2.0}],
                 "temporal_scale is set on a TEXT segment")):
            with self.assertRaises(posenc.PosencError) as err:
                self.client.encode(x, rope, positions={"mrope_segments": segs})
            self.assertIn(words, err.exception.details)


if __name__ == "__main__":
    unittest.main()
