#!/usr/bin/env node
// posenc from Node.js with @grpc/grpc-js and @grpc/proto-loader: one Encode (sinusoidal, an
// 8 MiB float32 tensor, so over gRPC's 4 MiB default) and one EncodeStream of 16 requests,
// each checked against the paper's formula in float64.
//   cd client/node && npm ci && node encode.js 127.0.0.1:50051
// Exit status 0 when every result matches.
'use strict';
const path = require('path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const target = process.argv[2] || '127.0.0.1:50051';
const PROTO = path.join(__dirname, '..', '..', 'proto', 'posenc', 'v1', 'posenc.proto');
// The server's default --max_message_bytes; grpc-js receives only 4 MiB unless raised.
const MAX_MESSAGE_BYTES = 64 * 1024 * 1024;

const definition = protoLoader.loadSync(PROTO, {
  keepCase: true, longs: Number, enums: String, defaults: true, oneofs: true,
});
const v1 = grpc.loadPackageDefinition(definition).posenc.v1;
const client = new v1.PositionalEncoding(target, grpc.credentials.createInsecure(), {
  'grpc.max_receive_message_length': MAX_MESSAGE_BYTES,
  'grpc.max_send_message_length': MAX_MESSAGE_BYTES,
});

// A float32 tensor as the wire wants it: shape, dtype, little-endian bytes.
function tensor(values, shape) {
  return { shape, dtype: 'FLOAT32', data: Buffer.from(values.buffer, values.byteOffset, values.byteLength) };
}
function floats(t) {
  const b = Buffer.from(t.data);  // copy: the Float32Array needs 4-byte alignment
  return new Float32Array(b.buffer, b.byteOffset, b.byteLength / 4);
}

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

function encodeOnce() {
  const shape = [1, 4096, 512];  // 8 MiB each way
  const x = randomFloats(shape[0] * shape[1] * shape[2], 1);
  return new Promise((resolve, reject) => {
    client.Encode({ request_id: 'node-encode', input: tensor(x, shape), sinusoidal: {} },
      { deadline: Date.now() + 30000 }, (err, response) => {
        if (err) return reject(err);
        const err64 = maxError(x, floats(response.output), shape, 0);
        console.log(`Encode: shape [${response.output.shape}] ${response.output.dtype}, ` +
                    `${response.output.data.length} bytes, max |server - float64| = ${err64.toExponential(2)}`);
        resolve(err64);
      });
  });
}

function encodeStream(count) {
  const shape = [1, 16, 64];
  const inputs = [];
  return new Promise((resolve, reject) => {
    const call = client.EncodeStream({ deadline: Date.now() + 30000 });
    let received = 0;
    let worst = 0;
    call.on('data', (response) => {
      const i = received++;
      if (response.request_id !== `node-stream-${i}`) {
        reject(new Error(`response ${i} has request_id ${response.request_id}: out of order`));
      }
      worst = Math.max(worst, maxError(inputs[i], floats(response.output), shape, 100 * i));
    });
    call.on('error', reject);
    call.on('end', () => {
      console.log(`EncodeStream: ${received} responses in order, max |server - float64| = ${worst.toExponential(2)}`);
      resolve(received === count ? worst : Infinity);
    });
    for (let i = 0; i < count; i++) {
      inputs.push(randomFloats(shape[0] * shape[1] * shape[2], 100 + i));
      call.write({ request_id: `node-stream-${i}`, input: tensor(inputs[i], shape),
                   positions: { offsets: [100 * i] }, sinusoidal: {} });
    }
    call.end();
  });
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
