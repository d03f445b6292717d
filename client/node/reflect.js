#!/usr/bin/env node
// posenc from Node.js knowing only the address: server reflection lists the services and
// fetches posenc's descriptors, then ListSchemes and an Encode are called through them (no
// .proto file). Tries reflection v1 (grpc.reflection.v1) first, then v1alpha (unless
// --require-v1).
//   cd client/node && npm ci && node reflect.js 127.0.0.1:50051 [--require-v1]
// Exit status 0 when the Encode result matches the sinusoidal formula.
'use strict';
const grpc = require('@grpc/grpc-js');
const { GrpcReflection } = require('grpc-js-reflection-client');

const args = process.argv.slice(2);
const requireV1 = args.includes('--require-v1');
const target = args.find((a) => !a.startsWith('--')) || '127.0.0.1:50051';
const SERVICE = 'posenc.v1.PositionalEncoding';
const OPTIONS = {  // the server's default --max_message_bytes; grpc-js receives 4 MiB otherwise
  'grpc.max_receive_message_length': 64 * 1024 * 1024,
  'grpc.max_send_message_length': 64 * 1024 * 1024,
};
const insecure = () => grpc.credentials.createInsecure();

// The reflection version the server answers, with its service list.
async function connect() {
  const failures = [];
  for (const version of requireV1 ? ['v1'] : ['v1', 'v1alpha']) {
    const reflection = new GrpcReflection(target, insecure(), OPTIONS, version);
    try {
      const services = await reflection.listServices();
      return { version, reflection, services, failures };
    } catch (err) {
      failures.push(`${version}: ${err.message || err}`);
    }
  }
  throw new Error(`server reflection failed: ${failures.join('; ')}`);
}

function call(stub, method, request) {
  return new Promise((resolve, reject) => {
    stub[method](request, { deadline: Date.now() + 10000 }, (err, r) => (err ? reject(err) : resolve(r)));
  });
}

(async () => {
  try {
    const { version, reflection, services, failures } = await connect();
    for (const f of failures) console.log(`reflection ${f}`);
    console.log(`reflection ${version}: services ${services.join(', ')}`);
    if (!services.includes(SERVICE)) throw new Error(`${SERVICE} is not listed`);
    const descriptor = await reflection.getDescriptorBySymbol(SERVICE);
    const pkg = descriptor.getPackageObject({ keepCase: true, longs: Number, enums: String,
                                              defaults: true, oneofs: true });
    const stub = new pkg.posenc.v1.PositionalEncoding(target, insecure(), OPTIONS);

    const listed = await call(stub, 'ListSchemes', {});
    console.log(`ListSchemes: ${listed.schemes.join(' ')} (version ${listed.version})`);

    const [seq, d] = [4, 8];
    const x = new Float32Array(seq * d);  // zeros: the output is the encoding itself
    const response = await call(stub, 'Encode', {
      request_id: 'node-reflect', sinusoidal: {}, positions: { offsets: [10] },
      input: { shape: [1, seq, d], dtype: 'FLOAT32', data: Buffer.from(x.buffer) },
    });
    const bytes = Buffer.from(response.output.data);
    const y = new Float32Array(bytes.buffer, bytes.byteOffset, seq * d);
    let err = 0;
    for (let i = 0; i < seq * d; i++) {
      const [s, j] = [Math.floor(i / d), i % d];
      const angle = (10 + s) * Math.pow(10000, -2 * Math.floor(j / 2) / d);
      err = Math.max(err, Math.abs(y[i] - (j % 2 ? Math.cos(angle) : Math.sin(angle))));
    }
    console.log(`Encode via reflection: shape [${response.output.shape}] ${response.output.dtype}, ` +
                `max |server - float64| = ${err.toExponential(2)}`);
    stub.close();
    if (!(err <= 1e-6)) {
      console.error('MISMATCH against the float64 reference');
      process.exit(1);
    }
  } catch (err) {
    console.error(`reflect.js: ${err.details || err.message || err}`);
    process.exit(1);
  }
})();
