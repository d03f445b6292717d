#!/usr/bin/env node
// posenc-client as an application uses it: require('posenc-client') from the application's
// own node_modules, then every Client method against a real server, each result checked
// against a float64 formula written here (the paper's sinusoid, ALiBi's slopes).
//   node package_test.js TARGET       (run from a folder where posenc-client is installed)
'use strict';
const assert = require('assert');
const { Client, tensor, toFloat32Array, DEFAULT_MAX_MESSAGE_BYTES, grpc } = require('posenc-client');

const target = process.argv[2];
const sinusoid = (p, j, d) => {
  const angle = p * Math.pow(10000, -2 * Math.floor(j / 2) / d);
  return j % 2 === 0 ? Math.sin(angle) : Math.cos(angle);
};

(async () => {
  const client = new Client(target);
  assert.strictEqual(DEFAULT_MAX_MESSAGE_BYTES, 64 * 1024 * 1024);
  assert.strictEqual(await client.health(), 'SERVING');
  assert.ok((await client.listSchemes()).schemes.includes('rope'));

  // encode, 8 MiB each way (over grpc-js's 4 MiB default), positions from offset 3.
  const [seq, d] = [4096, 512];
  const x = new Float32Array(seq * d).map((_, i) => (i % 97) / 97 - 0.5);
  const y = toFloat32Array((await client.encode({ input: tensor(x, [1, seq, d]), positions: { offsets: [3] }, sinusoidal: {} })).output);
  let err = 0;
  for (let s = 0; s < seq; s += 511) for (let j = 0; j < d; j++) err = Math.max(err, Math.abs(y[s * d + j] - (x[s * d + j] + sinusoid(s + 3, j, d))));
  assert.ok(err < 2e-6, `encode error ${err}`);

  // encodeStream: responses in order, each at its own offset.
  const small = new Float32Array(4 * 8);
  const responses = await client.encodeStream([0, 1, 2].map((i) => ({ request_id: `r${i}`, input: tensor(small, [1, 4, 8]), positions: { offsets: [10 * i] }, sinusoidal: {} })));
  assert.deepStrictEqual(responses.map((r) => r.request_id), ['r0', 'r1', 'r2']);
  responses.forEach((r, i) => assert.ok(Math.abs(toFloat32Array(r.output)[8] - sinusoid(10 * i + 1, 0, 8)) < 1e-6));

  // attentionBias: ALiBi, 4 heads (slopes 2^-2, 2^-4, 2^-6, 2^-8), symmetric.
  const bias = (await client.attentionBias({ query_length: 3, key_length: 5, alibi: { num_heads: 4, mode: 'SYMMETRIC' } })).output;
  assert.deepStrictEqual(bias.shape, [4, 3, 5]);
  const b = toFloat32Array(bias);
  for (let h = 0; h < 4; h++) for (let q = 0; q < 3; q++) for (let k = 0; k < 5; k++) {
    const expected = -Math.pow(2, -2 * (h + 1)) * Math.abs(q + 2 - k);
    assert.ok(Math.abs(b[(h * 3 + q) * 5 + k] - expected) < 1e-6, `alibi h${h} q${q} k${k}`);
  }

  // getTable: sinusoidal rows in several chunks, joined.
  const table = await client.getTable({ sinusoidal: {}, length: 100, dim: 16, rows_per_chunk: 30 });
  assert.strictEqual(table.chunks.length, 4);
  assert.deepStrictEqual(table.rows.shape, [100, 16]);
  const rows = toFloat32Array(table.rows);
  for (let p = 0; p < 100; p++) for (let j = 0; j < 16; j++) assert.ok(Math.abs(rows[p * 16 + j] - sinusoid(p, j, 16)) < 1e-6);

  // An error rejects with the gRPC code.
  await assert.rejects(client.encode({ input: tensor(small, [1, 4, 8]), learned: { table: 'missing' } }),
    (e) => e.code === grpc.status.NOT_FOUND);
  client.close();
  console.log(`posenc-client ${require.resolve('posenc-client')}: health, listSchemes, encode (max error ${err.toExponential(2)}), encodeStream, attentionBias, getTable, errors`);
})().catch((e) => { console.error(e); process.exit(1); });
