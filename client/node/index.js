// posenc-client: the posenc.v1 PositionalEncoding service from Node.js (@grpc/grpc-js).
//   const { Client, tensor, toFloat32Array } = require('posenc-client');
//   const client = new Client('127.0.0.1:50051');
//   const { output } = await client.encode({ input: tensor(x, [1, 8, 64]), sinusoidal: {} });
// Messages are the proto's, as plain objects with the proto's field names (snake_case),
// enums as strings ('FLOAT32', 'NEOX'), int64 as numbers and bytes as Buffers. Every call
// returns a Promise; a failed call rejects with grpc-js's ServiceError (.code, .details).
'use strict';
const path = require('path');
// A dependency, or an error that says how to get it: `npm install /path/to/client/node` links
// the folder, and Node then looks for the dependencies in the folder's own node_modules.
function dependency(name) {
  try {
    return require(name);
  } catch (err) {
    if (err.code !== 'MODULE_NOT_FOUND' || !String(err.message).includes(name)) throw err;
    throw new Error(`posenc-client: cannot load ${name} beside ${__dirname}: run \`npm ci ` +
      `--omit=dev\` in that folder (scripts/setup.sh does), or install the package from ` +
      `its tarball (npm pack) or with npm install --install-links`);
  }
}
const grpc = dependency('@grpc/grpc-js');
const protoLoader = dependency('@grpc/proto-loader');

// The server's default --max_message_bytes; grpc-js receives only 4 MiB unless raised.
const DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024;

// The folder holding posenc/v1/posenc.proto and grpc/health/v1/health.proto: copies of the
// repository's proto/ kept inside the package (tests/CMakeLists.txt checks they are equal), so
// an installed, linked or packed posenc-client loads the contract from its own folder.
function protoRoot() {
  return path.join(__dirname, 'proto');
}

let loaded = null;
// The loaded posenc.v1 and grpc.health.v1 packages (loaded once).
function protos() {
  if (!loaded) {
    const root = protoRoot();
    const definition = protoLoader.loadSync(
      ['posenc/v1/posenc.proto', 'grpc/health/v1/health.proto'],
      { includeDirs: [root], keepCase: true, longs: Number, enums: String, defaults: true, oneofs: true });
    const pkg = grpc.loadPackageDefinition(definition);
    loaded = { v1: pkg.posenc.v1, health: pkg.grpc.health.v1 };
  }
  return loaded;
}

const DTYPE_OF_ARRAY = new Map([[Float32Array, 'FLOAT32'], [Int32Array, 'INT32'], [BigInt64Array, 'INT64']]);

// A Tensor message from a typed array (or Buffer) and a shape; dtype defaults from the array
// type (Float32Array: FLOAT32). FLOAT16 and BFLOAT16 need a Buffer or Uint16Array and dtype.
function tensor(values, shape, dtype) {
  const kind = dtype || DTYPE_OF_ARRAY.get(values.constructor);
  if (!kind) throw new TypeError('posenc-client: tensor(values, shape, dtype) needs a dtype for ' + values.constructor.name);
  const data = Buffer.isBuffer(values) ? values : Buffer.from(values.buffer, values.byteOffset, values.byteLength);
  return { shape: Array.from(shape), dtype: kind, data };
}

// A FLOAT32 tensor's values as a Float32Array (a copy, so it is 4-byte aligned).
function toFloat32Array(t) {
  if (t.dtype !== 'FLOAT32') throw new TypeError(`posenc-client: tensor is ${t.dtype}, not FLOAT32`);
  const b = Buffer.from(t.data);
  return new Float32Array(b.buffer, b.byteOffset, b.byteLength / 4);
}

// An INT32 tensor's values as an Int32Array (a copy).
function toInt32Array(t) {
  if (t.dtype !== 'INT32') throw new TypeError(`posenc-client: tensor is ${t.dtype}, not INT32`);
  const b = Buffer.from(t.data);
  return new Int32Array(b.buffer, b.byteOffset, b.byteLength / 4);
}

function callOptions(options) {
  const o = {};
  if (options && options.deadline !== undefined) o.deadline = options.deadline;
  else if (options && options.timeoutMs !== undefined) o.deadline = Date.now() + options.timeoutMs;
  return o;
}

class Client {
  // target: 'host:port', 'unix:/path', 'dns:///name:port', ...
  // options.credentials (grpc.ChannelCredentials; default insecure),
  // options.maxMessageBytes (send and receive limit; default 64 MiB, the server's default),
  // options.channelOptions (more grpc-js channel options, e.g. 'grpc.service_config').
  constructor(target, options = {}) {
    const limit = options.maxMessageBytes || DEFAULT_MAX_MESSAGE_BYTES;
    const channelOptions = {
      'grpc.max_receive_message_length': limit,
      'grpc.max_send_message_length': limit,
      ...(options.channelOptions || {}),
    };
    const credentials = options.credentials || grpc.credentials.createInsecure();
    const { v1, health } = protos();
    this.stub = new v1.PositionalEncoding(target, credentials, channelOptions);
    this.healthStub = new health.Health(target, credentials, channelOptions);
  }

  unary(stub, method, request, options) {
    return new Promise((resolve, reject) => {
      stub[method](request, callOptions(options), (err, response) => (err ? reject(err) : resolve(response)));
    });
  }

  // EncodeRequest -> EncodeResponse { request_id, output, key_output }.
  encode(request, options) { return this.unary(this.stub, 'Encode', request, options); }

  // Several EncodeRequests on one EncodeStream; resolves with the responses, in order.
  encodeStream(requests, options) {
    return new Promise((resolve, reject) => {
      const call = this.stub.EncodeStream(callOptions(options));
      const responses = [];
      call.on('data', (r) => responses.push(r));
      call.on('error', reject);
      call.on('end', () => resolve(responses));
      (async () => {
        for await (const r of requests) call.write(r);
        call.end();
      })().catch((err) => { call.cancel(); reject(err); });
    });
  }

  // BiasRequest -> BiasResponse { request_id, output }.
  attentionBias(request, options) { return this.unary(this.stub, 'AttentionBias', request, options); }

  // TableRequest -> { chunks: TableChunk[], rows: Tensor } with every chunk's rows joined.
  getTable(request, options) {
    return new Promise((resolve, reject) => {
      const call = this.stub.GetTable(request, callOptions(options));
      const chunks = [];
      call.on('data', (c) => chunks.push(c));
      call.on('error', reject);
      call.on('end', () => {
        if (chunks.length === 0) return resolve({ chunks, rows: null });
        const first = chunks[0].rows;
        const rows = chunks.reduce((n, c) => n + c.rows.shape[0], 0);
        resolve({ chunks, rows: { shape: [rows, ...first.shape.slice(1)], dtype: first.dtype,
                                  data: Buffer.concat(chunks.map((c) => c.rows.data)) } });
      });
    });
  }

  // GraphRequest -> GraphResponse { request_id, output, eigenvalues }.
  graphEncode(request, options) { return this.unary(this.stub, 'GraphEncode', request, options); }

  // ListSchemesResponse { schemes, dtypes, tables, ... }.
  listSchemes(options) { return this.unary(this.stub, 'ListSchemes', {}, options); }

  // grpc.health.v1 Check: 'SERVING', 'NOT_SERVING', ... (service 'liveness' for liveness).
  async health(service = '', options) {
    const r = await this.unary(this.healthStub, 'Check', { service }, options);
    return r.status;
  }

  close() {
    this.stub.close();
    this.healthStub.close();
  }
}

module.exports = { Client, DEFAULT_MAX_MESSAGE_BYTES, tensor, toFloat32Array, toInt32Array, protoRoot, grpc };
