#!/usr/bin/python3
"""The `posenc` Python package against real posenc-servers (tests/python_client_test.sh
starts them and sets POSENC_TARGET, POSENC_TLS_TARGET/POSENC_TLS_DIR, POSENC_SHM_TARGET,
POSENC_CLIENT and POSENC_SOURCE_DIR).

References are independent float64 numpy formulas (the sinusoidal paper formula, RoPE's
NeoX rotate_half, ALiBi slopes, path-graph eigenvalues). Tolerances: the server rounds its
float64 tables once, then multiplies and adds in float32, so float32 results are within
2e-6 absolute of the float64 reference for |values| <= ~4 (a few float32 ulps); bfloat16
results within one bfloat16 ulp (2^-7 relative) of the reference rounded to bfloat16.
"""
import glob
import os
import subprocess
import tempfile
import unittest

import grpc
import numpy as np

import posenc

TARGET = os.environ.get("POSENC_TARGET", "127.0.0.1:50051")
SOURCE_DIR = os.environ.get(
    "POSENC_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
HF_CONFIGS = sorted(glob.glob(os.path.join(SOURCE_DIR, "tests/fixtures/hf_configs/*.json")))
F32_ATOL = 2e-6


def sinusoidal_ref(positions, d, base=10000.0, layout="interleaved", timescale="per_dim"):
    """[len(positions), d] float64: pe[2i] = sin(p * base^(-2i/d)), pe[2i+1] = cos(...)
    (interleaved, per_dim), or [sin(p w_i).., cos(p w_i)..] with w_i = base^(-i/(d/2-1))."""
    p = np.asarray(positions, dtype=np.float64)[:, None]
    if layout == "interleaved":
        i = np.arange((d + 1) // 2, dtype=np.float64)
        angles = p * base ** (-2.0 * i / d)
        pe = np.zeros((p.shape[0], d))
        pe[:, 0::2] = np.sin(angles)
        pe[:, 1::2] = np.cos(angles[:, : d // 2])
        return pe
    half = d // 2
    angles = p * base ** (-np.arange(half, dtype=np.float64) / (half - 1))
    return np.concatenate([np.sin(angles), np.cos(angles)], axis=1)


def rope_neox_ref(x, positions, base=10000.0, rotary_dim=None):
    """x [batch, seq, heads, head_dim] rotated with HF's rotate_half, in float64."""
    x = np.asarray(x, dtype=np.float64)
    r = rotary_dim or x.shape[-1]
    inv_freq = base ** (-np.arange(0, r, 2, dtype=np.float64) / r)
    angles = np.asarray(positions, dtype=np.float64)[:, None] * inv_freq  # [seq, r/2]
    cos = np.concatenate([np.cos(angles)] * 2, axis=-1)[None, :, None, :]
    sin = np.concatenate([np.sin(angles)] * 2, axis=-1)[None, :, None, :]
    rot = x[..., :r]
    rotated = np.concatenate([-rot[..., r // 2:], rot[..., : r // 2]], axis=-1)
    return np.concatenate([rot * cos + rotated * sin, x[..., r:]], axis=-1)


def assert_close(test, got, want, atol, what):
    err = float(np.max(np.abs(np.asarray(got, np.float64) - want)))
    test.assertEqual(tuple(got.shape), tuple(want.shape), what)
    test.assertLessEqual(err, atol, "%s: max |server - float64| = %.3g > %.3g" % (what, err, atol))


class ClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.client = posenc.Client(TARGET)
        cls.rng = np.random.default_rng(7)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()

    def randn(self, *shape):
        return self.rng.standard_normal(shape).astype(np.float32)

    # -- absolute schemes ---------------------------------------------------------------
    def test_sinusoidal_matches_paper_formula(self):
        x = self.randn(2, 16, 64)
        y = self.client.encode(x, posenc.Sinusoidal())
        self.assertEqual(y.dtype, np.float32)
        assert_close(self, y, x + sinusoidal_ref(range(16), 64)[None], F32_ATOL, "interleaved")

    def test_sinusoidal_offsets_per_row_and_concatenated_layout(self):
        x = self.randn(2, 5, 32)
        scheme = posenc.Sinusoidal(layout="concatenated", timescale="half_minus_one")
        y = self.client.encode(x, scheme, positions={"offsets": [0, 100000]})
        want = np.stack([x[0] + sinusoidal_ref(range(5), 32, layout="concatenated"),
                         x[1] + sinusoidal_ref(range(100000, 100005), 32, layout="concatenated")])
        assert_close(self, y, want, F32_ATOL, "concatenated, offsets 0 and 100000")

    def test_int_positions_are_one_offset_for_every_row(self):
        x = np.zeros((3, 4, 8), np.float32)
        y = self.client.encode(x, posenc.Sinusoidal(), positions=50, request_id="off-50")
        assert_close(self, y, np.broadcast_to(sinusoidal_ref(range(50, 54), 8), (3, 4, 8)),
                     F32_ATOL, "offset 50")

    def test_bfloat16_round_trip(self):
        x_f32 = self.randn(1, 8, 64)
        x_bf16 = posenc.to_bfloat16(x_f32)  # uint16 bit patterns
        y = self.client.encode(x_bf16, posenc.Sinusoidal())
        self.assertEqual(y.dtype, posenc.bfloat16_dtype())
        self.assertEqual(y.shape, (1, 8, 64))
        want = posenc.from_bfloat16(x_bf16).astype(np.float64) + sinusoidal_ref(range(8), 64)
        got = posenc.from_bfloat16(y).astype(np.float64)
        ulp = 2.0 ** (np.floor(np.log2(np.maximum(np.abs(want), 1e-30))) - 7)
        self.assertTrue(np.all(np.abs(got - want) <= ulp), "bfloat16 beyond one ulp")
        # What the client's rounding gives for the reference matches to within one ulp too.
        ref_bits = posenc.to_bfloat16(want.astype(np.float32))
        self.assertLessEqual(int(np.max(np.abs(ref_bits.astype(np.int32) -
                                                y.view(np.uint16).astype(np.int32)))), 1)

    def test_bfloat16_helpers_round_to_nearest_even(self):
        f = np.array([1.0, 1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8, -2.5, np.inf], np.float32)
        bits = posenc.to_bfloat16(f)
        np.testing.assert_array_equal(bits, np.array([0x3F80, 0x3F80, 0x3F82, 0xC020, 0x7F80],
                                                     np.uint16))
        np.testing.assert_array_equal(posenc.from_bfloat16(bits),
                                      np.array([1, 1, 1 + 2 ** -6, -2.5, np.inf], np.float32))
        self.assertTrue(np.isnan(posenc.from_bfloat16(posenc.to_bfloat16(np.float32("nan")))))

    def test_float16(self):
        x = self.randn(1, 4, 16).astype(np.float16)
        y = self.client.encode(x, posenc.Sinusoidal())
        self.assertEqual(y.dtype, np.float16)
        want = x.astype(np.float64) + sinusoidal_ref(range(4), 16)
        assert_close(self, y, want, 2e-3, "float16")

    def test_dtype_converts_float32_input(self):
        x = self.randn(1, 8, 64)
        for dtype, narrow in (("bfloat16", posenc.to_bfloat16), ("float16",
                                                                 lambda a: a.astype(np.float16))):
            sent = posenc.tensors.to_tensor(x, dtype)
            self.assertEqual(sent.data, narrow(x).tobytes(), dtype + ": the values, rounded")
            y = self.client.encode(x, posenc.Sinusoidal(), dtype=dtype)
            self.assertEqual(y.shape, (1, 8, 64))
            np.testing.assert_array_equal(y, self.client.encode(narrow(x), posenc.Sinusoidal(),
                                                                dtype=dtype))
            got = (posenc.from_bfloat16(y) if dtype == "bfloat16" else y).astype(np.float64)
            want = x.astype(np.float64) + sinusoidal_ref(range(8), 64)
            # Two roundings of half an ulp: the input's (at |x|), the output's (at |y|).
            bits = 7 if dtype == "bfloat16" else 10
            ulp = lambda v: 2.0 ** (np.floor(np.log2(np.maximum(np.abs(v), 2.0 ** -14))) - bits)
            bound = ulp(x) / 2 + ulp(np.abs(want) + ulp(x)) / 2
            self.assertTrue(np.all(np.abs(got - want) <= bound), dtype + " beyond its roundings")
        with self.assertRaises(posenc.PosencError) as refused:
            self.client.encode(np.zeros((1, 4, 8), np.int32), posenc.Sinusoidal(),
                               dtype="bfloat16")
        self.assertIn("posenc.tensors.to_bfloat16", refused.exception.details)

    # -- RoPE ---------------------------------------------------------------------------
    def test_rope_neox_matches_rotate_half(self):
        q, k = self.randn(1, 6, 4, 32), self.randn(1, 6, 2, 32)  # GQA: 2 key heads
        qo, ko = self.client.encode(q, posenc.Rope(base=500000.0), key=k,
                                    positions={"ids": [0, 1, 2, 1000, 65536, 100000]})
        pos = [0, 1, 2, 1000, 65536, 100000]
        assert_close(self, qo, rope_neox_ref(q, pos, 500000.0), F32_ATOL, "queries")
        assert_close(self, ko, rope_neox_ref(k, pos, 500000.0), F32_ATOL, "GQA keys")

    def test_rope_partial_rotary_passes_the_rest_through(self):
        q = self.randn(2, 3, 2, 16)
        y = self.client.encode(q, posenc.Rope(rotary_dim=8), positions=7)
        assert_close(self, y, rope_neox_ref(q, range(7, 10), rotary_dim=8), F32_ATOL, "partial")
        np.testing.assert_array_equal(y[..., 8:], q[..., 8:])

    # -- HF configs: the same Rope as posenc-client --hf-config -------------------------
    def test_hf_config_fields(self):
        by_name = {os.path.basename(p): posenc.Rope.from_hf_config(p) for p in HF_CONFIGS}
        self.assertGreaterEqual(len(by_name), 6)
        llama = by_name["llama-3.1-8b.json"].proto()
        self.assertEqual(llama.base, 500000.0)
        self.assertEqual(llama.scaling.type, posenc.pb.LLAMA3)
        self.assertEqual((llama.scaling.factor, llama.scaling.original_max_position_embeddings),
                         (8.0, 8192))
        self.assertEqual(by_name["llama-3.1-8b.json"].num_key_value_heads, 8)
        neox = by_name["gpt-neox-20b.json"]
        self.assertEqual((neox.head_dim, neox.proto().rotary_dim), (96, 24))  # rotary_pct 0.25
        phi = by_name["phi-3-mini-128k.json"].proto().scaling
        self.assertEqual((phi.type, phi.factor, phi.original_max_position_embeddings),
                         (posenc.pb.LONGROPE, 32.0, 4096))
        self.assertEqual(len(phi.long_factor), 48)
        self.assertEqual(by_name["qwen2.5-7b-yarn.json"].proto().scaling.type, posenc.pb.YARN)
        self.assertEqual(by_name["deepseek-v2-yarn.json"].proto().style, posenc.pb.GPTJ)

    def test_hf_config_encode_matches_posenc_client(self):
        cli = os.environ.get("POSENC_CLIENT")
        if not cli:
            self.skipTest("POSENC_CLIENT (build/client/posenc-client) not set")
        with tempfile.TemporaryDirectory() as tmp:
            for path in HF_CONFIGS:
                rope = posenc.Rope.from_hf_config(path)
                q = self.randn(1, 4, 2, rope.head_dim)
                np.save(os.path.join(tmp, "q.npy"), q)
                subprocess.run([cli, "encode", "--target=" + TARGET, "--hf-config=" + path,
                                "--input=" + os.path.join(tmp, "q.npy"), "--offsets=50000",
                                "--output=" + os.path.join(tmp, "y.npy")],
                               check=True, stdout=subprocess.DEVNULL)
                want = np.load(os.path.join(tmp, "y.npy"))
                got = self.client.encode(q, rope, positions=50000)
                np.testing.assert_array_equal(got, want, err_msg=os.path.basename(path))

    def test_hf_config_errors(self):
        with self.assertRaises(posenc.PosencError) as missing:
            posenc.Rope.from_hf_config("/nonexistent/config.json")
        self.assertEqual(missing.exception.code, grpc.StatusCode.NOT_FOUND)
        with self.assertRaises(posenc.PosencError) as bad:
            posenc.Rope.from_hf_config({"head_dim": 64, "rope_scaling": {"type": "linear"}})
        self.assertEqual(bad.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("rope_scaling.factor is required", bad.exception.details)
        with self.assertRaises(posenc.PosencError) as typed:
            posenc.Rope.from_hf_config({"head_dim": 64, "rope_theta": "big"})
        self.assertIn('rope_theta is "big"; expected a number', typed.exception.details)

    # -- streams, tables, biases, graphs ------------------------------------------------
    def test_encode_stream_in_order(self):
        xs = [self.randn(1, 4, 16) for _ in range(12)]
        results = list(self.client.encode_stream(
            (x, posenc.Sinusoidal(), {"offsets": [10 * i]}) for i, x in enumerate(xs)))
        self.assertEqual(len(results), 12)
        for i, (x, y) in enumerate(zip(xs, results)):
            assert_close(self, y, x + sinusoidal_ref(range(10 * i, 10 * i + 4), 16),
                         F32_ATOL, "stream item %d" % i)

    def test_encode_stream_error_has_code(self):
        # The bad message yields its PosencError in its place; the stream goes on.
        items = [(self.randn(1, 2, 8), posenc.Sinusoidal()),
                 {"x": self.randn(1, 2, 8), "scheme": posenc.Learned("absent"),
                  "request_id": "missing-table"},
                 (self.randn(1, 2, 8), posenc.Sinusoidal())]
        results = list(self.client.encode_stream(items))
        self.assertEqual(len(results), 3)
        self.assertIsInstance(results[1], posenc.PosencError)
        self.assertEqual(results[1].code, grpc.StatusCode.NOT_FOUND)
        self.assertIn("absent", results[1].details)
        self.assertEqual(results[1].request_id, "missing-table")
        self.assertEqual(results[2].shape, (1, 2, 8))

    def test_table_chunks_are_concatenated(self):
        t = self.client.table(posenc.Sinusoidal(), length=100, dim=12, rows_per_chunk=7)
        assert_close(self, t, sinusoidal_ref(range(100), 12), 1e-7, "sinusoidal table")
        r = self.client.table(posenc.Rope(), length=50, dim=8, rows_per_chunk=9)
        angles = np.arange(50.0)[:, None] * 10000.0 ** (-np.arange(0, 8, 2) / 8.0)
        assert_close(self, r, np.stack([np.cos(angles), np.sin(angles)], axis=1), 1e-7,
                     "rope cos/sin table")

    def test_alibi_bias(self):
        bias = self.client.attention_bias(posenc.Alibi(8, mode="causal"), 3, 5)
        self.assertEqual((bias.shape, bias.dtype), ((8, 3, 5), np.float32))
        slopes = 2.0 ** (-8.0 * np.arange(1, 9) / 8)
        q = np.arange(3)[:, None] + 2  # default query offset: key_length - query_length
        k = np.arange(5)[None, :]
        want = np.where(k <= q, -slopes[:, None, None] * (q - k), -np.inf)
        np.testing.assert_allclose(bias, want, rtol=1e-6)

    def test_t5_buckets(self):
        ids = self.client.attention_bias(posenc.T5(bidirectional=True), 4, 4)
        self.assertEqual((ids.shape, ids.dtype), ((4, 4), np.int32))
        np.testing.assert_array_equal(np.diag(ids), np.zeros(4))
        self.assertEqual(ids[0, 1], 17)  # bidirectional: key after query is num_buckets/2 + 1

    def test_graph_path_eigenvalues(self):
        result = self.client.graph_encode(5, [(0, 1), (1, 2), (2, 3), (3, 4)], k=2)
        self.assertEqual(result.vectors.shape, (5, 2))
        np.testing.assert_allclose(result.eigenvalues,
                                   2 - 2 * np.cos(np.pi * np.arange(1, 3) / 5), rtol=1e-9)

    # -- relative positions and graph encodings (float64 numpy references) --------------
    def test_shaw_indices_and_query_term_at_every_dtype(self):
        table_path = os.environ.get("POSENC_SHAW_TABLE")
        if not table_path:
            self.skipTest("no shaw table (POSENC_SHAW_TABLE)")
        table = np.load(table_path).astype(np.float64)  # [2k + 1, d], k = 3
        k, d = (table.shape[0] - 1) // 2, table.shape[1]
        q_len, k_len, offset = 5, 9, 2
        # tensor2tensor's _generate_relative_positions_matrix, then + k.
        dist = np.arange(k_len)[None, :] - (offset + np.arange(q_len))[:, None]
        index = np.clip(dist, -k, k) + k
        ids = self.client.attention_bias(posenc.Shaw(k), q_len, k_len, query_offset=offset)
        self.assertEqual(ids.dtype, np.int32)
        np.testing.assert_array_equal(ids, index)
        emb = self.client.attention_bias(posenc.Shaw(k, table="shawrel"), q_len, k_len,
                                         query_offset=offset)
        np.testing.assert_array_equal(emb, table[index].astype(np.float32))
        query = self.randn(2, 3, q_len, d)
        scores = self.randn(2, 3, q_len, k_len)
        for dtype in ("float32", "float16", "bfloat16"):
            def cast(x):
                return posenc.to_bfloat16(x) if dtype == "bfloat16" else x.astype(dtype)

            def widen(x):
                return (posenc.from_bfloat16(x) if dtype == "bfloat16" else x).astype(np.float64)
            q_in, s_in = cast(query), cast(scores)
            term = np.einsum("bhid,ijd->bhij", widen(q_in), table[index])
            got = self.client.attention_bias(posenc.Shaw(k, table="shawrel"), q_len, k_len,
                                             query_offset=offset, query=q_in)
            added = self.client.attention_bias(posenc.Shaw(k, table="shawrel"), q_len, k_len,
                                               query_offset=offset, query=q_in, scores=s_in)
            # float32 accumulation over d, then one rounding to the dtype.
            rel = {"float32": 2.0 ** -22, "float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}[dtype]
            for out, want in ((got, term), (added, term + widen(s_in))):
                self.assertEqual(out.shape, want.shape)
                err = np.abs(widen(out) - want)
                self.assertTrue(np.all(err <= rel * np.abs(want) + d * 2.0 ** -22 * 4),
                                "%s: max err %.3g" % (dtype, err.max()))

    def test_deberta_without_and_with_buckets(self):
        # HF's build_relative_position: queries start at 0 whatever the lengths.
        raw = self.client.attention_bias(posenc.Deberta(position_buckets=-1), 3, 4)
        np.testing.assert_array_equal(raw, np.arange(3)[:, None] - np.arange(4)[None, :])
        ids = self.client.attention_bias(posenc.Deberta(), 1, 301, query_offset=300)
        self.assertEqual(ids.dtype, np.int32)
        # Within (-mid, mid) = (-128, 128) the bucket is the distance itself.
        np.testing.assert_array_equal(ids[0, 300 - 127:301], np.arange(127, -1, -1))
        self.assertEqual(ids[0, 0], 207)  # torch running HF's code: rel 300 -> 207

    def test_random_walk_matches_dense_powers(self):
        n, steps = 12, 6
        edges = [(0, 1), (1, 2), (2, 0), (2, 3), (3, 4), (4, 5), (5, 3), (6, 7), (8, 8)]
        a = np.zeros((n, n))
        for u, v in edges:
            if u != v:
                a[u, v] = a[v, u] = 1
        deg = a.sum(1)
        p = np.divide(a, deg[:, None], out=np.zeros_like(a), where=deg[:, None] > 0)
        want = np.stack([np.diag(np.linalg.matrix_power(p, s)) for s in range(1, steps + 1)], 1)
        got = self.client.graph_encode(n, edges, encoding="random_walk", walk_length=steps)
        assert_close(self, got.vectors, want, 1e-7, "random walk")
        np.testing.assert_array_equal(got.vectors[8:], 0)  # isolated (8 has only a self-loop)

    def test_shortest_path_and_tree(self):
        edges = [(0, 1), (1, 2), (3, 4)]
        got = self.client.graph_encode(5, edges, encoding="shortest_path", anchors=[0, 4])
        self.assertEqual(got.vectors.dtype, np.int32)
        np.testing.assert_array_equal(got.vectors, [[0, -1], [1, -1], [2, -1], [-1, 1], [-1, 0]])
        tree = self.client.graph_encode(4, encoding="tree", parents=[-1, 0, 0, 2], max_depth=2,
                                        max_children=2, depth_decay=0.5)
        np.testing.assert_array_equal(tree.vectors, [[0, 0, 0, 0], [1, 0, 0, 0], [0, 1, 0, 0],
                                                     [1, 0, 0, 0.5]])
        with self.assertRaises(posenc.PosencError) as err:
            self.client.graph_encode(3, encoding="tree", parents=[-1, 2, 1], max_depth=2,
                                     max_children=2)
        self.assertIn("cycle", err.exception.details)

    def test_list_schemes_and_health(self):
        listed = self.client.list_schemes()
        self.assertIn("rope", listed.schemes)
        self.assertIn("BFLOAT16", listed.dtypes)
        self.assertTrue(listed.version)
        self.assertEqual(self.client.health(), "SERVING")
        self.assertEqual(self.client.health("liveness"), "SERVING")
        with self.assertRaises(posenc.PosencError) as err:
            self.client.health("no.such.Service")
        self.assertEqual(err.exception.code, grpc.StatusCode.NOT_FOUND)

    # -- message sizes and errors -------------------------------------------------------
    def test_response_over_4_mib(self):
        x = np.zeros((4, 1024, 512), np.float32)  # 8 MiB each way
        y = self.client.encode(x, posenc.Sinusoidal())
        self.assertEqual(y.nbytes, 8 << 20)
        assert_close(self, y[3, 1020:], sinusoidal_ref(range(1020, 1024), 512), F32_ATOL,
                     "tail of an 8 MiB response")
        big = self.client.table(posenc.Sinusoidal(), length=16384, dim=128)  # 8 MiB table
        self.assertEqual(big.shape, (16384, 128))

    def test_small_client_limit_is_resource_exhausted(self):
        with posenc.Client(TARGET, max_message_bytes=1 << 20) as small:
            with self.assertRaises(posenc.PosencError) as err:
                small.encode(np.zeros((1, 1024, 512), np.float32), posenc.Sinusoidal())
        self.assertEqual(err.exception.code, grpc.StatusCode.RESOURCE_EXHAUSTED)

    def test_errors_carry_codes(self):
        x = self.randn(1, 4, 8)
        with self.assertRaises(posenc.PosencError) as err:
            self.client.encode(x, posenc.Learned("absent"), request_id="req-42")
        self.assertEqual(err.exception.code, grpc.StatusCode.NOT_FOUND)
        self.assertIn("absent", err.exception.details)
        self.assertEqual(err.exception.request_id, "req-42")
        with self.assertRaises(posenc.PosencError) as err:
            self.client.encode(self.randn(1, 2, 2, 8), posenc.Rope(rotary_dim=3))
        self.assertEqual(err.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("rotary_dim", err.exception.details)
        with self.assertRaises(posenc.PosencError) as err:  # refused here: no float64 wire type
            self.client.encode(np.zeros((1, 2, 4)), posenc.Sinusoidal())
        self.assertEqual(err.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        with self.assertRaises(posenc.PosencError) as err:
            posenc.Sinusoidal(layout="diagonal").proto()
        self.assertIn("layout 'diagonal'", err.exception.details)
        with self.assertRaises(posenc.PosencError) as err:
            posenc.Client("127.0.0.1:1", timeout=2).health()
        self.assertEqual(err.exception.code, grpc.StatusCode.UNAVAILABLE)


@unittest.skipUnless(os.environ.get("POSENC_TLS_TARGET"), "no TLS server")
class TlsTest(unittest.TestCase):
    def test_mutual_tls(self):
        d = os.environ["POSENC_TLS_DIR"]
        target = os.environ["POSENC_TLS_TARGET"]
        with posenc.Client(target, root_certificates=os.path.join(d, "ca.pem"),
                           private_key=os.path.join(d, "client.key"),
                           certificate_chain=os.path.join(d, "client.pem")) as client:
            self.assertEqual(client.health(), "SERVING")
            y = client.encode(np.zeros((1, 2, 4), np.float32), posenc.Sinusoidal())
            assert_close(self, y[0], sinusoidal_ref(range(2), 4), F32_ATOL, "over mTLS")
        with posenc.Client(target, root_certificates=os.path.join(d, "ca.pem"),
                           timeout=5) as anonymous:
            with self.assertRaises(posenc.PosencError) as err:
                anonymous.health()
            self.assertEqual(err.exception.code, grpc.StatusCode.UNAVAILABLE)


class SharedMemoryTest(unittest.TestCase):
    def test_region_helper(self):
        with posenc.SharedMemoryRegion(4096) as region:
            self.assertTrue(region.key.startswith("posenc_"))
            self.assertTrue(os.path.exists("/dev/shm/" + region.key))
            with self.assertRaises(posenc.PosencError):
                region.tensor((2,), np.float32)  # not registered yet
            region.name = "r"
            t = region.write(np.arange(6, dtype=np.float32).reshape(2, 3), offset=64)
            self.assertEqual((t.offset, t.byte_size, t.proto().shm.region), (64, 24, "r"))
            np.testing.assert_array_equal(t.numpy(), np.arange(6).reshape(2, 3))
            del t
        self.assertFalse(os.path.exists("/dev/shm/" + region.key))
        with self.assertRaises(posenc.PosencError):
            posenc.SharedMemoryRegion(16, key="other_prefix")

    def test_server_without_shm_is_failed_precondition(self):
        with posenc.Client(TARGET) as client, posenc.SharedMemoryRegion(1024) as region:
            for call in (lambda: client.register_shared_memory("r0", region),
                         lambda: client.shared_memory_status(),
                         lambda: client.unregister_shared_memory("r0")):
                with self.assertRaises(posenc.PosencError) as err:
                    call()
                self.assertEqual(err.exception.code, grpc.StatusCode.FAILED_PRECONDITION)
            self.assertIsNone(region.name)

    @unittest.skipUnless(os.environ.get("POSENC_SHM_TARGET"), "no server with --shm")
    def test_encode_in_place_through_shared_memory(self):
        with posenc.Client(os.environ["POSENC_SHM_TARGET"]) as client, \
                posenc.SharedMemoryRegion(1 << 16) as region:
            client.register_shared_memory("py-r0", region)
            status = client.shared_memory_status()
            self.assertEqual([(s["name"], s["byte_size"]) for s in status], [("py-r0", 1 << 16)])
            x = np.random.default_rng(1).standard_normal((1, 8, 32)).astype(np.float32)
            y = client.encode(region.write(x), posenc.Sinusoidal())
            self.assertIsInstance(y, np.ndarray)  # a view of the region, written in place
            assert_close(self, y, x + sinusoidal_ref(range(8), 32)[None], F32_ATOL, "shm")
            del y
            client.unregister_shared_memory("py-r0")
            self.assertEqual(client.shared_memory_status(), [])


class WireBytesTest(unittest.TestCase):
    """The server hands large tensors to gRPC as slices of their own (wire_format.h). What
    arrives must be the bytes stock protobuf serializes: each raw response parsed by Python's
    protobuf and serialized again is the same bytes, and carries the expected tensor."""

    def rpc(self, kind, method, serialize=True):
        """The rpc `method` as a `kind` ("unary_unary", "stream_stream", ...) callable on a
        channel of its own, answering raw bytes; with serialize=False it sends bytes too."""
        channel = grpc.insecure_channel(TARGET, options=[
            ("grpc.max_receive_message_length", 64 << 20)])
        self.addCleanup(channel.close)
        return getattr(channel, kind)(
            "/posenc.v1.PositionalEncoding/" + method,
            request_serializer=(lambda m: m.SerializeToString()) if serialize else None,
            response_deserializer=None)

    def raw_call(self, method, request):
        return self.rpc("unary_unary", method)(request)

    def assert_canonical(self, raw, message_type):
        parsed = message_type()
        parsed.ParseFromString(raw)
        self.assertEqual(parsed.SerializeToString(), raw)
        return parsed

    def test_encode_every_dtype_and_size(self):
        pb = posenc.pb
        rng = np.random.default_rng(3)
        for dtype, np_dtype in [(pb.FLOAT32, np.float32), (pb.FLOAT16, np.float16),
                                (pb.BFLOAT16, np.uint16)]:
            for seq in (1, 7, 64, 1024):  # 64 B to 256 KiB: one slice, and own slices
                x = rng.standard_normal((1, seq, 32)).astype(np.float32)
                data = x.astype(np_dtype).tobytes() if np_dtype != np.uint16 else \
                    (x.view(np.uint32) >> 16).astype(np.uint16).tobytes()
                request = pb.EncodeRequest(
                    request_id="w%d" % seq,
                    input=pb.Tensor(shape=[1, seq, 32], dtype=dtype, data=data),
                    sinusoidal=pb.Sinusoidal())
                response = self.assert_canonical(self.raw_call("Encode", request),
                                                 pb.EncodeResponse)
                self.assertEqual(response.request_id, "w%d" % seq)
                self.assertEqual(list(response.output.shape), [1, seq, 32])
                self.assertEqual(len(response.output.data), len(data))
                if dtype == pb.FLOAT32:
                    got = np.frombuffer(response.output.data, np.float32).reshape(1, seq, 32)
                    assert_close(self, got, x + sinusoidal_ref(range(seq), 32)[None],
                                 F32_ATOL, "raw Encode")

    def test_rope_with_key_and_bias(self):
        pb = posenc.pb
        q = np.ones((1, 300, 4, 16), np.float32)
        request = pb.EncodeRequest(
            input=pb.Tensor(shape=q.shape, dtype=pb.FLOAT32, data=q.tobytes()),
            key=pb.Tensor(shape=[1, 300, 2, 16], dtype=pb.FLOAT32, data=q[:, :, :2].tobytes()),
            rope=pb.Rope())
        response = self.assert_canonical(self.raw_call("Encode", request), pb.EncodeResponse)
        self.assertEqual(len(response.output.data), q.nbytes)
        self.assertEqual(len(response.key_output.data), q.nbytes // 2)
        for scheme in (pb.BiasRequest(query_length=40, key_length=50,
                                      alibi=pb.Alibi(num_heads=8)),
                       pb.BiasRequest(query_length=40, key_length=50, t5=pb.T5Bias())):
            response = self.assert_canonical(self.raw_call("AttentionBias", scheme),
                                             pb.BiasResponse)
            self.assertGreater(len(response.output.data), 4096)

    def test_encode_stream_answers_and_errors(self):
        pb = posenc.pb
        stream = self.rpc("stream_stream", "EncodeStream")
        sizes = [1, 200, 3, 1024]
        requests = [pb.EncodeRequest(request_id=str(n), sinusoidal=pb.Sinusoidal(),
                                     input=pb.Tensor(shape=[1, n, 16], dtype=pb.FLOAT32,
                                                     data=bytes(64 * n)))
                    for n in sizes]
        requests.insert(2, pb.EncodeRequest(request_id="bad", sinusoidal=pb.Sinusoidal(),
                                            input=pb.Tensor(shape=[2], data=b"x")))
        answers = [self.assert_canonical(raw, pb.EncodeResponse) for raw in stream(iter(requests))]
        self.assertEqual([a.request_id for a in answers], ["1", "200", "bad", "3", "1024"])
        self.assertEqual([len(a.output.data) for a in answers], [64, 12800, 0, 192, 65536])
        self.assertEqual(answers[2].error.code, grpc.StatusCode.INVALID_ARGUMENT.value[0])
        garbage = self.rpc("stream_stream", "EncodeStream", serialize=False)
        with self.assertRaises(grpc.RpcError) as caught:
            list(garbage(iter([requests[0].SerializeToString(), b"\xff\xff"])))
        self.assertEqual(caught.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("not a valid message for EncodeStream", caught.exception.details())

    def test_table_chunks(self):
        pb = posenc.pb
        table = self.rpc("unary_stream", "GetTable")
        request = pb.TableRequest(sinusoidal=pb.Sinusoidal(), length=1000, dim=64,
                                  rows_per_chunk=300)
        chunks = [self.assert_canonical(raw, pb.TableChunk) for raw in table(request)]
        self.assertEqual([c.first_position for c in chunks], [0, 300, 600, 900])
        rows = np.concatenate([np.frombuffer(c.rows.data, np.float32).reshape(-1, 64)
                               for c in chunks])
        assert_close(self, rows, sinusoidal_ref(range(1000), 64), F32_ATOL, "raw GetTable")

    def test_errors_are_statuses(self):
        pb = posenc.pb
        bad = pb.EncodeRequest(input=pb.Tensor(shape=[1, 2, 8], dtype=pb.FLOAT32, data=b"x"),
                               sinusoidal=pb.Sinusoidal())
        with self.assertRaises(grpc.RpcError) as caught:
            self.raw_call("Encode", bad)
        self.assertEqual(caught.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        garbage = self.rpc("unary_unary", "Encode", serialize=False)
        with self.assertRaises(grpc.RpcError) as caught:
            garbage(b"\xff\xff\xff")
        self.assertEqual(caught.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("not a valid message for Encode", caught.exception.details())


if __name__ == "__main__":
    unittest.main()
