#!/usr/bin/env node
// posenc from Node.js with the posenc-client package (index.js): one Encode (sinusoidal, an
// 8 MiB float32 tensor, so over gRPC's 4 MiB default) and one EncodeStream of 16 requests,
// each checked against the paper's formula in float64.
//   cd client/node && npm install && node encode.js 127.0.0.1:50051
// Exit status 0 when every result matches.
'use strict';
const { Client, tensor, toFloat32Array, grpc } = require('./index.js');  // posenc-client

const target = process.argv[2] || '127.0.0.1:50051';
const client = new Client(target);  // message limit 64 MiB, the server's default

// Largest |y - (x + pe)| over [batch, seq, d] with pe at positions offset..offset+seq-1.
function maxError(x, y, [batch, seq, d], offset) {
  let err = 0;
  for (let b = 0; b < batch; b++) {
    for (let s = 0; s < seq; s++) {
      for (let j = 0; j < d; j++) {
        const angle = (offset + s) * Math.pow(10000, -2 * Math.floor(j / 2) / d);
        const pe = j % 2 === 0 ? Math.sin(angle) : Math.cos(angle);
        const i = (b * seq + s) * d + j;
        err = Math.max(err, Math.abs(y[i] - (x[i] + pe)));
      }
    }
  }
  return err;
}

function randomFloats(n, seed) {
  const out = new Float32Array(n);
  let s = seed >>> 0;
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    out[i] = s / 2 ** 32 - 0.5;
  }
  return out;
}

async function encodeOnce() {
  const shape = [1, 4096, 512];  // 8 MiB each way
  const x = randomFloats(shape[0] * shape[1] * shape[2], 1);
  const response = await client.encode(
    { request_id: 'node-encode', input: tensor(x, shape), sinusoidal: {} }, { timeoutMs: 30000 });
  const err64 = maxError(x, toFloat32Array(response.output), shape, 0);
  console.log(`Encode: shape [${response.output.shape}] ${response.output.dtype}, ` +
              `${response.output.data.length} bytes, max |server - float64| = ${err64.toExponential(2)}`);
  return err64;
}

async function encodeStream(count) {
  const shape = [1, 16, 64];
  const inputs = [];
  const requests = [];
  for (let i = 0; i < count; i++) {
    inputs.push(randomFloats(shape[0] * shape[1] * shape[2], 100 + i));
    requests.push({ request_id: `node-stream-${i}`, input: tensor(inputs[i], shape),
                    positions: { offsets: [100 * i] }, sinusoidal: {} });
  }
  const responses = await client.encodeStream(requests, { timeoutMs: 30000 });
  let worst = 0;
  responses.forEach((response, i) => {
    if (response.request_id !== `node-stream-${i}`) {
      throw new Error(`response ${i} has request_id ${response.request_id}: out of order`);
    }
    worst = Math.max(worst, maxError(inputs[i], toFloat32Array(response.output), shape, 100 * i));
  });
  console.log(`EncodeStream: ${responses.length} responses in order, max |server - float64| = ${worst.toExponential(2)}`);
  return responses.length === count ? worst : Infinity;
}

(async () => {
  try {
    const errors = [await encodeOnce(), await encodeStream(16)];
    client.close();
    if (errors.some((e) => !(e <= 2e-6))) {
      console.error('MISMATCH against the float64 reference');
      process.exit(1);
    }
    console.log('matches float64');
  } catch (err) {
    console.error(`posenc call failed: ${err.code !== undefined ? grpc.status[err.code] : ''} ${err.details || err.message}`);
    process.exit(1);
  }
})();
