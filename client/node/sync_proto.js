#!/usr/bin/env node
// `npm run sync-proto` (a maintainer's step, never run on install): copies the .proto files
// the package loads from the repository's proto/ into proto/. ctest's node_proto_in_sync_*
// tests fail while a copy differs.
'use strict';
const fs = require('fs');
const path = require('path');

const PROTOS = ['posenc/v1/posenc.proto', 'grpc/health/v1/health.proto'];
for (const name of PROTOS) {
  const to = path.join(__dirname, 'proto', name);
  fs.mkdirSync(path.dirname(to), { recursive: true });
  fs.copyFileSync(path.join(__dirname, '..', '..', 'proto', name), to);
}
