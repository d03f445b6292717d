#!/usr/bin/python3
"""Sinusoidal2D, Fourier features, MULTIPLY fusion and tables in relative order
(Transformer-XL, XLNet) from a real posenc-server, against float64 numpy written here as the
reference code writes it (tests/absolute_references_test.sh starts the server with
--table fourier_b=<B.npy> --table fourier_b64=<float64 B.npy> --table pos=<learned.npy> --shm
and sets POSENC_TARGET, POSENC_SOURCE_DIR, POSENC_LEARNED, POSENC_FOURIER_B and
POSENC_FOURIER_B64).

References:
- MAE's util/pos_embed.py get_2d_sincos_pos_embed (grid_size as (H, W) for non-square grids),
  get_2d_sincos_pos_embed_from_grid and get_1d_sincos_pos_embed_from_grid, verbatim but for
  the (H, W) grid and the base;
- Tancik et al.'s input_mapping: x_proj = (2 pi x) @ B.T, with the contract's order
  [cos(x_proj), sin(x_proj)];
- Transformer-XL's PositionalEmbedding: inv_freq = 1 / (10000 ** (arange(0, d, 2) / d)),
  pos_seq = arange(klen - 1, -1, -1.0), clamped to clamp_len, cat([sin, cos]).
Tolerances: tables are float64 rounded once to float32 (|pe| <= 1: 6e-8, 1.2e-7 allowed);
float32 outputs within 3 ulps of |want| plus 1.2e-7 * |scale|; 16-bit outputs within one ulp
of their dtype of the float64 value (plus the same table term).
"""
import json
import os
import sys
import unittest

import grpc
import numpy as np

import posenc

TARGET = os.environ.get("POSENC_TARGET", "127.0.0.1:50051")
SOURCE_DIR = os.environ.get(
    "POSENC_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
TABLE_ERR = 1.2e-7


# -- MAE (facebookresearch/mae util/pos_embed.py) ------------------------------------------
def get_2d_sincos_pos_embed(embed_dim, grid_size, cls_token=False, base=10000.0):
    """grid_size: int or (H, W). return: [H*W, D] or [1+H*W, D] (w/ or w/o cls_token)."""
    gh, gw = (grid_size, grid_size) if np.isscalar(grid_size) else grid_size
    grid_h = np.arange(gh, dtype=np.float32)
    grid_w = np.arange(gw, dtype=np.float32)
    grid = np.meshgrid(grid_w, grid_h)  # here w goes first
    grid = np.stack(grid, axis=0)
    grid = grid.reshape([2, 1, gh, gw])
    pos_embed = get_2d_sincos_pos_embed_from_grid(embed_dim, grid, base)
    if cls_token:
        pos_embed = np.concatenate([np.zeros([1, embed_dim]), pos_embed], axis=0)
    return pos_embed


def get_2d_sincos_pos_embed_from_grid(embed_dim, grid, base=10000.0):
    assert embed_dim % 2 == 0
    # use half of dimensions to encode grid_h
    emb_h = get_1d_sincos_pos_embed_from_grid(embed_dim // 2, grid[0], base)  # (H*W, D/2)
    emb_w = get_1d_sincos_pos_embed_from_grid(embed_dim // 2, grid[1], base)  # (H*W, D/2)
    emb = np.concatenate([emb_h, emb_w], axis=1)  # (H*W, D)
    return emb


def get_1d_sincos_pos_embed_from_grid(embed_dim, pos, base=10000.0):
    """embed_dim: output dimension for each position; pos: positions (M,); out: (M, D)"""
    assert embed_dim % 2 == 0
    omega = np.arange(embed_dim // 2, dtype=np.float64)
    omega /= embed_dim / 2.
    omega = 1. / base**omega  # (D/2,)
    pos = pos.reshape(-1)  # (M,)
    out = np.einsum('m,d->md', pos, omega)  # (M, D/2), outer product
    emb_sin = np.sin(out)  # (M, D/2)
    emb_cos = np.cos(out)  # (M, D/2)
    emb = np.concatenate([emb_sin, emb_cos], axis=1)  # (M, D)
    return emb


# -- Fourier features (Tancik et al. 2020) --------------------------------------------------
def fourier_features(v, b):
    """v [..., m], b [F, m] -> [..., 2F]: [cos(2 pi v B^T), sin(2 pi v B^T)]."""
    x_proj = (2. * np.pi * np.asarray(v, np.float64)) @ np.asarray(b, np.float64).T
    return np.concatenate([np.cos(x_proj), np.sin(x_proj)], axis=-1)


# -- Transformer-XL (kimiyoung/transformer-xl pytorch/mem_transformer.py) --------------------
class PositionalEmbedding:
    def __init__(self, demb):
        self.demb = demb
        self.inv_freq = 1 / (10000 ** (np.arange(0.0, demb, 2.0) / demb))

    def __call__(self, pos_seq):
        sinusoid_inp = np.outer(pos_seq, self.inv_freq)
        return np.concatenate([np.sin(sinusoid_inp), np.cos(sinusoid_inp)], axis=-1)


def transformer_xl_pos_emb(klen, demb, clamp_len=-1):
    pos_seq = np.arange(klen - 1, -1, -1.0)
    if clamp_len > 0:
        pos_seq = np.minimum(pos_seq, clamp_len)  # pos_seq.clamp_(max=self.clamp_len)
    return PositionalEmbedding(demb)(pos_seq)


def paper_sinusoid(positions, d):
    p = np.asarray(positions, np.float64)[:, None]
    w = 10000.0 ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    pe = np.zeros((p.shape[0], d))
    pe[:, 0::2] = np.sin(p * w)
    pe[:, 1::2] = np.cos(p * w)
    return pe


# -- helpers --------------------------------------------------------------------------------
DTYPES = ("float32", "float16", "bfloat16")


def to_wire(x, dtype):
    """(array to send, the float64 values the server receives)."""
    if dtype == "float32":
        return x.astype(np.float32), x.astype(np.float32).astype(np.float64)
    if dtype == "float16":
        h = x.astype(np.float16)
        return h, h.astype(np.float64)
    bits = posenc.to_bfloat16(x.astype(np.float32))
    return bits, posenc.from_bfloat16(bits).astype(np.float64)


def from_wire(y, dtype):
    return posenc.from_bfloat16(y).astype(np.float64) if dtype == "bfloat16" \
        else np.asarray(y, np.float64)


def assert_matches(test, got, want, dtype, table_term, what):
    test.assertEqual(got.shape, want.shape, what)
    ulp = {"float32": 2.0 ** -23, "float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}[dtype]
    ulps = 3.0 if dtype == "float32" else 1.0
    floor = 2.0 ** -24 if dtype == "float16" else 1e-12
    tol = ulps * ulp * np.abs(want) + table_term + floor
    bad = np.abs(got - want) > tol
    if bad.any():
        i = np.unravel_index(np.argmax(np.abs(got - want) - tol), got.shape)
        test.fail("%s %s: %d values off; at %s got %r want %r" %
                  (what, dtype, int(bad.sum()), i, got[i], want[i]))


def combine(x, pe, fusion, a, b):
    if fusion == "multiply":
        return (x * a) * (pe * b), TABLE_ERR * np.abs(x * a * b)
    return x * a + pe * b, TABLE_ERR * abs(b) * np.ones_like(x)


class AbsoluteReferenceTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.client = posenc.Client(TARGET)
        cls.rng = np.random.default_rng(11)
        cls.learned = np.load(os.environ["POSENC_LEARNED"]).astype(np.float64)
        cls.fourier_b = np.load(os.environ["POSENC_FOURIER_B"]).astype(np.float64)
        cls.fourier_b64 = np.load(os.environ["POSENC_FOURIER_B64"])

    @classmethod
    def tearDownClass(cls):
        cls.client.close()

    def randn(self, *shape):
        return self.rng.standard_normal(shape)

    def expect_error(self, code, field, call):
        with self.assertRaises(posenc.PosencError) as err:
            call()
        self.assertEqual(err.exception.code, code, err.exception.details)
        self.assertIn(field, err.exception.details)

    # -- Sinusoidal2D ---------------------------------------------------------------------
    def test_sinusoidal_2d_matches_mae_square_nonsquare_and_cls(self):
        for (h, w, cls, d) in [(14, 14, True, 64), (4, 4, False, 16), (3, 5, False, 16),
                               (5, 3, True, 32), (1, 6, True, 8), (7, 2, False, 12)]:
            seq = h * w + (1 if cls else 0)
            y = self.client.encode(np.zeros((2, seq, d), np.float32),
                                   posenc.Sinusoidal2D(h, w, cls_token=cls))
            want = get_2d_sincos_pos_embed(d, (h, w), cls_token=cls)
            for row in y:
                self.assertLessEqual(float(np.max(np.abs(row - want))), TABLE_ERR,
                                     "%dx%d cls=%s d=%d" % (h, w, cls, d))
        # A base other than MAE's 10000.
        y = self.client.encode(np.zeros((6, 8), np.float32), posenc.Sinusoidal2D(2, 3, base=100.0))
        self.assertLessEqual(float(np.max(np.abs(y - get_2d_sincos_pos_embed(8, (2, 3), base=100.0)))),
                             TABLE_ERR)

    def test_sinusoidal_2d_every_fusion_and_dtype(self):
        h, w, d = 3, 5, 24
        pe = get_2d_sincos_pos_embed(d, (h, w), cls_token=True)
        for dtype in DTYPES:
            for fusion in ("add", "multiply", "concat"):
                sent, x = to_wire(self.randn(2, h * w + 1, d), dtype)
                y = self.client.encode(sent, posenc.Sinusoidal2D(
                    h, w, cls_token=True, input_scale=1.5, pe_scale=0.5, fusion=fusion))
                got = from_wire(y, dtype)
                if fusion == "concat":
                    want = np.concatenate([x * 1.5, np.broadcast_to(pe * 0.5, x.shape)], -1)
                    term = TABLE_ERR * np.ones_like(want)
                else:
                    want, term = combine(x, pe[None], fusion, 1.5, 0.5)
                assert_matches(self, got, want, dtype, term, "sinusoidal_2d " + fusion)

    def test_sinusoidal_2d_bad_input(self):
        x = np.zeros((1, 16, 16), np.float32)
        INV, RE = grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED
        self.expect_error(INV, "multiple of 4", lambda: self.client.encode(
            np.zeros((1, 16, 18), np.float32), posenc.Sinusoidal2D(4, 4)))
        self.expect_error(INV, "seq", lambda: self.client.encode(x, posenc.Sinusoidal2D(4, 5)))
        self.expect_error(INV, "grid_height", lambda: self.client.encode(
            x, posenc.Sinusoidal2D(0, 4)))
        self.expect_error(INV, "grid_width", lambda: self.client.encode(
            x, posenc.Sinusoidal2D(4, -2)))
        self.expect_error(RE, "grid_height", lambda: self.client.encode(
            x, posenc.Sinusoidal2D(1 << 40, 1)))
        self.expect_error(INV, "base", lambda: self.client.encode(
            x, posenc.Sinusoidal2D(4, 4, base=-1.0)))
        self.expect_error(INV, "positions", lambda: self.client.encode(
            x, posenc.Sinusoidal2D(4, 4), positions=3))
        self.expect_error(INV, "fusion", lambda: self.client.encode(
            x, posenc.Sinusoidal2D(4, 4, fusion=7)))

    # -- Fourier ----------------------------------------------------------------------------
    def test_fourier_single_axis_integer_positions_and_values(self):
        b = self.rng.normal(0, 0.05, size=(16, 1))  # Tancik et al.: B ~ N(0, sigma^2)
        y = self.client.encode(np.zeros((2, 9, 32), np.float32), posenc.Fourier(b),
                               positions={"offsets": [0, 1000]})
        for row, start in zip(y, (0, 1000)):
            want = fourier_features(np.arange(start, start + 9, dtype=np.float64)[:, None], b)
            self.assertLessEqual(float(np.max(np.abs(row - want))), TABLE_ERR)
        t = self.rng.uniform(0, 100, size=9)  # timestamps, shared by the batch
        y = self.client.encode(np.zeros((2, 9, 32), np.float32), posenc.Fourier(b),
                               positions={"values": t})
        self.assertLessEqual(float(np.max(np.abs(y - fourier_features(t[:, None], b)[None]))),
                             TABLE_ERR)

    def test_fourier_multi_axis_per_batch_every_fusion_and_dtype(self):
        m, f = 3, 10
        b = self.rng.normal(0, 2.0, size=(f, m))
        v = self.rng.uniform(-1, 1, size=(2, 7, m))  # NeRF-style coordinates, per batch row
        pe = fourier_features(v, b)
        for dtype in DTYPES:
            for fusion in ("add", "multiply", "concat"):
                d = 6 if fusion == "concat" else 2 * f
                sent, x = to_wire(self.randn(2, 7, d), dtype)
                y = self.client.encode(sent, posenc.Fourier(b, input_scale=0.5, pe_scale=2.0,
                                                            fusion=fusion),
                                       positions={"values": v.reshape(-1)})
                got = from_wire(y, dtype)
                if fusion == "concat":
                    want = np.concatenate([x * 0.5, pe * 2.0], -1)
                    term = 2 * TABLE_ERR * np.ones_like(want)
                else:
                    want, term = combine(x, pe, fusion, 0.5, 2.0)
                assert_matches(self, got, want, dtype, term, "fourier %s" % fusion)

    def test_fourier_named_frequencies_table(self):
        b = self.fourier_b  # [F, 2], float32 values in the file
        v = self.rng.uniform(0, 1, size=(5, 2))
        y = self.client.encode(np.zeros((5, 2 * b.shape[0]), np.float32),
                               posenc.Fourier(frequencies_table="fourier_b", num_axes=2),
                               positions={"values": v.reshape(-1)})
        self.assertLessEqual(float(np.max(np.abs(y - fourier_features(v, b)))), TABLE_ERR)

    def test_fourier_float64_frequencies_table_keeps_its_digits(self):
        # |2 pi B v| reaches about 1e4 here: B rounded to float32 would be off by up to 3e-4.
        b = self.fourier_b64  # [F, 1], float64 in the file
        self.assertEqual(b.dtype, np.float64)
        v = self.rng.uniform(0, 50, size=(9, 1))
        y = self.client.encode(np.zeros((9, 2 * b.shape[0]), np.float32),
                               posenc.Fourier(frequencies_table="fourier_b64"),
                               positions={"values": v.reshape(-1)})
        self.assertLessEqual(float(np.max(np.abs(y - fourier_features(v, b)))), TABLE_ERR)
        tables = {t["name"]: t for t in self.client.list_schemes().tables}
        self.assertEqual(tables["fourier_b64"]["shape"], [b.shape[0], 1])
        self.assertEqual(tables["fourier_b64"]["dtype"], "FLOAT32")  # as it is held

    def test_fourier_bad_input(self):
        INV, RE = grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED
        x = np.zeros((1, 4, 8), np.float32)
        b4 = [1.0, 2.0, 3.0, 4.0]
        enc = self.client.encode
        self.expect_error(INV, "2F", lambda: enc(np.zeros((1, 4, 6), np.float32),
                                                 posenc.Fourier(b4)))
        self.expect_error(INV, "fourier.frequencies", lambda: enc(x, posenc.Fourier(b4, num_axes=3)))
        self.expect_error(INV, "fourier.num_axes", lambda: enc(x, posenc.Fourier(b4, num_axes=0)))
        self.expect_error(RE, "fourier.num_axes", lambda: enc(x, posenc.Fourier(b4, num_axes=1000)))
        self.expect_error(RE, "fourier.frequencies", lambda: enc(
            np.zeros((1, 1, 2), np.float32), posenc.Fourier(np.ones(40000), fusion="concat")))
        self.expect_error(INV, "fourier.frequencies[2]", lambda: enc(
            x, posenc.Fourier([1.0, 2.0, float("nan"), 4.0])))
        self.expect_error(INV, "frequencies", lambda: enc(x, posenc.Fourier()))
        self.expect_error(INV, "frequencies", lambda: enc(
            x, posenc.Fourier(b4, frequencies_table="fourier_b")))
        self.expect_error(grpc.StatusCode.NOT_FOUND, "absent", lambda: enc(
            x, posenc.Fourier(frequencies_table="absent")))
        self.expect_error(INV, "positions.values", lambda: enc(
            np.zeros((1, 4, 4), np.float32), posenc.Fourier([[1.0, 2.0], [3.0, 4.0]])))
        self.expect_error(INV, "positions.values", lambda: enc(
            x, posenc.Fourier(b4), positions={"values": [0.0, 1.0, 2.0]}))
        self.expect_error(INV, "positions.values[1]", lambda: enc(
            x, posenc.Fourier(b4), positions={"values": [0.0, float("inf"), 2.0, 3.0]}))

    # -- MULTIPLY for every scheme that has fusion --------------------------------------------
    def test_multiply_sinusoidal_and_learned_every_dtype(self):
        seq, d = 6, 16
        for dtype in DTYPES:
            sent, x = to_wire(self.randn(2, seq, d), dtype)
            y = self.client.encode(sent, posenc.Sinusoidal(fusion="multiply", input_scale=2.0,
                                                           pe_scale=0.75))
            want, term = combine(x, paper_sinusoid(range(seq), d)[None], "multiply", 2.0, 0.75)
            assert_matches(self, from_wire(y, dtype), want, dtype, term, "sinusoidal multiply")
            y = self.client.encode(sent, posenc.Learned("pos", fusion="multiply", pe_scale=-1.5),
                                   positions=1)
            want = x * (self.learned[1:seq + 1][None] * -1.5)
            assert_matches(self, from_wire(y, dtype), want, dtype, 0 * want, "learned multiply")

    def test_shared_memory_in_place_and_concat_into_output_shm(self):
        x = self.randn(1, 13, 16).astype(np.float32)
        pe = get_2d_sincos_pos_embed(16, (3, 4), cls_token=True)
        with posenc.SharedMemoryRegion(1 << 16) as region:
            self.client.register_shared_memory("abs-r0", region)
            try:
                y = self.client.encode(region.write(x), posenc.Sinusoidal2D(
                    3, 4, cls_token=True, fusion="multiply"))
                self.assertIsInstance(y, np.ndarray)  # a view of the region, written in place
                assert_matches(self, np.asarray(y, np.float64), x * pe[None], "float32",
                               TABLE_ERR * np.abs(x), "shm sinusoidal_2d multiply")
                del y
                b = np.linspace(0.1, 0.7, 4)
                out = region.tensor((1, 13, 24), np.float32, offset=8192)
                y = self.client.encode(region.write(x), posenc.Fourier(b, fusion="concat"),
                                       output_shm=out)
                want = np.concatenate(
                    [x, fourier_features(np.arange(13.0)[:, None], b[:, None])[None]], -1)
                assert_matches(self, np.asarray(y, np.float64), want, "float32",
                               TABLE_ERR * np.ones_like(want), "shm fourier concat")
                del y, out
            finally:
                self.client.unregister_shared_memory("abs-r0")

    def test_multiply_through_encode_stream(self):
        x = self.randn(1, 4, 16).astype(np.float32)
        results = list(self.client.encode_stream([
            (x, posenc.Sinusoidal(fusion="multiply")),
            (x, posenc.Sinusoidal2D(2, 2, fusion="multiply")),
            (x, posenc.Fourier(np.linspace(0.1, 0.8, 8), fusion="multiply")),
        ]))
        want = [x * paper_sinusoid(range(4), 16)[None],
                x * get_2d_sincos_pos_embed(16, (2, 2))[None],
                x * fourier_features(np.arange(4.0)[:, None], np.linspace(0.1, 0.8, 8)[:, None])[None]]
        for got, w in zip(results, want):
            assert_matches(self, np.asarray(got, np.float64), w.astype(np.float64), "float32",
                           TABLE_ERR * np.abs(w) + TABLE_ERR, "stream multiply")

    # -- tables in relative order ----------------------------------------------------------
    def test_transformer_xl_tables_klen_1_to_2048_with_and_without_clamp(self):
        d = 16
        scheme = posenc.Sinusoidal(layout="concatenated")
        for clamp_len in (-1, 1000):
            for klen in range(1, 2049):
                t = self.client.table(scheme, length=klen, dim=d, first_position=klen - 1,
                                      position_step=-1,
                                      clamp_position=clamp_len if clamp_len > 0 else None)
                want = transformer_xl_pos_emb(klen, d, clamp_len)
                err = float(np.max(np.abs(t - want)))
                if err > TABLE_ERR:
                    self.fail("klen %d clamp_len %d: max |server - float64| = %g"
                              % (klen, clamp_len, err))

    def test_xlnet_bidirectional_negative_positions_and_chunks(self):
        # XLNet relative_positional_encoding(bi_data): fwd_pos_seq = arange(klen, -qlen, -1.0)
        # clamped to [-clamp_len, clamp_len], then the same [sin, cos] of inv_freq.
        klen, qlen, clamp_len, d = 40, 24, 30, 12
        t = self.client.table(posenc.Sinusoidal(layout="concatenated"), length=klen + qlen,
                              dim=d, first_position=klen, position_step=-1,
                              clamp_position=clamp_len, rows_per_chunk=7)
        pos = np.clip(np.arange(klen, -qlen, -1.0), -clamp_len, clamp_len)
        self.assertLessEqual(float(np.max(np.abs(t - PositionalEmbedding(d)(pos)))), TABLE_ERR)
        # Every other position, from 5 (a step of 2).
        t = self.client.table(posenc.Sinusoidal(), length=10, dim=8, first_position=5,
                              position_step=2)
        self.assertLessEqual(float(np.max(np.abs(t - paper_sinusoid(range(5, 25, 2), 8)))),
                             TABLE_ERR)

    def test_table_position_fields_bad_input(self):
        INV = grpc.StatusCode.INVALID_ARGUMENT
        tab = self.client.table
        self.expect_error(INV, "position_step", lambda: tab(
            posenc.Sinusoidal(), length=4, dim=8, position_step=0))
        self.expect_error(INV, "clamp_position", lambda: tab(
            posenc.Sinusoidal(), length=4, dim=8, clamp_position=-1))
        self.expect_error(INV, "first_position", lambda: tab(
            posenc.Sinusoidal(), length=4, dim=8, first_position=1 << 50))
        self.expect_error(INV, "position_step", lambda: tab(
            posenc.Sinusoidal(), length=4, dim=8, position_step=1 << 50))
        self.expect_error(INV, "first_position", lambda: tab(
            posenc.Rope(), length=4, dim=8, first_position=2, position_step=-1))
        self.expect_error(INV, "first_position", lambda: tab(
            posenc.Rope(), length=4, dim=8, first_position=-3))
        # Rope tables take offsets and steps that stay >= 0.
        r = tab(posenc.Rope(), length=4, dim=8, first_position=3, position_step=-1)
        inv = 10000.0 ** (-np.arange(0, 8, 2) / 8)
        ang = np.arange(3, -1, -1.0)[:, None] * inv
        self.assertLessEqual(float(np.max(np.abs(r - np.stack([np.cos(ang), np.sin(ang)], 1)))),
                             TABLE_ERR)

    # -- ListSchemes ------------------------------------------------------------------------
    def test_list_schemes_names_them(self):
        listed = self.client.list_schemes()
        names = listed.schemes if hasattr(listed, "schemes") else listed[0]
        for name in ("sinusoidal_2d", "fourier"):
            self.assertIn(name, list(names))


class OpenInferenceTest(unittest.TestCase):
    """The models sinusoidal_2d and fourier through the Open Inference Protocol (grpcio stubs
    generated from proto/inference/ as client/python/infer_example.py does)."""

    @classmethod
    def setUpClass(cls):
        sys.path.insert(0, os.path.join(SOURCE_DIR, "client", "python"))
        import infer_example  # pylint: disable=import-outside-toplevel
        cls.pb, pb_grpc = infer_example.load_stubs()
        cls.channel = grpc.insecure_channel(TARGET)
        cls.stub = pb_grpc.GRPCInferenceServiceStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()

    def infer(self, model, inputs, config):
        request = self.pb.ModelInferRequest(model_name=model, id="oip-" + model)
        for name, datatype, array in inputs:
            request.inputs.add(name=name, datatype=datatype, shape=array.shape)
            request.raw_input_contents.append(array.tobytes())
        request.parameters["config"].string_param = json.dumps(config)
        response = self.stub.ModelInfer(request, timeout=30)
        out = response.outputs[0]
        self.assertEqual(out.name, "output")
        return np.frombuffer(response.raw_output_contents[0], "<f4").reshape(tuple(out.shape))

    def test_models_are_listed_and_ready(self):
        for model in ("sinusoidal_2d", "fourier"):
            meta = self.stub.ModelMetadata(self.pb.ModelMetadataRequest(name=model), timeout=10)
            self.assertEqual(meta.name, model)
            self.assertTrue(self.stub.ModelReady(self.pb.ModelReadyRequest(name=model),
                                                 timeout=10).ready)
            names = [t.name for t in meta.inputs]
            self.assertIn("input", names)
            if model == "fourier":
                self.assertIn("position_values", names)

    def test_sinusoidal_2d_model(self):
        x = np.zeros((1, 3 * 4 + 1, 16), "<f4")
        y = self.infer("sinusoidal_2d", [("input", "FP32", x)],
                       {"grid_height": 3, "grid_width": 4, "cls_token": True, "fusion": "ADD"})
        want = get_2d_sincos_pos_embed(16, (3, 4), cls_token=True)
        self.assertLessEqual(float(np.max(np.abs(y[0] - want))), TABLE_ERR)

    def test_fourier_model_with_position_values_of_two_axes(self):
        b = np.array([[0.5, -1.0], [2.0, 0.25], [1.5, 3.0]])
        v = np.random.default_rng(2).uniform(-1, 1, size=(2, 5, 2))
        x = np.ones((2, 5, 6), "<f4")
        y = self.infer("fourier", [("input", "FP32", x), ("position_values", "FP64", v)],
                       {"frequencies": b.reshape(-1).tolist(), "num_axes": 2,
                        "fusion": "MULTIPLY", "pe_scale": 0.5})
        want = fourier_features(v, b) * 0.5
        self.assertLessEqual(float(np.max(np.abs(y - want))), 3 * TABLE_ERR)
        # [seq, m] values: the same for every batch row.
        y = self.infer("fourier", [("input", "FP32", x), ("position_values", "FP64", v[0])],
                       {"frequencies": b.reshape(-1).tolist(), "num_axes": 2, "fusion": "MULTIPLY"})
        self.assertLessEqual(float(np.max(np.abs(y - fourier_features(v[0], b)[None]))),
                             3 * TABLE_ERR)

    def test_fourier_model_bad_config_names_the_field(self):
        with self.assertRaises(grpc.RpcError) as err:
            self.infer("fourier", [("input", "FP32", np.zeros((1, 2, 4), "<f4"))],
                       {"frequencies": [1.0, 2.0], "num_axes": 0})
        self.assertEqual(err.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("num_axes", err.exception.details())


if __name__ == "__main__":
    unittest.main()
