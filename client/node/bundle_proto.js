#!/usr/bin/env node
// npm's `prepare` step: copies the repository's .proto files (../../proto) into proto/, so
// that an installed or packed posenc-client carries the contract it loads. Where ../../proto
// is absent (a package already packed), the bundled copy stays as it is.
'use strict';
const fs = require('fs');
const path = require('path');

const from = path.join(__dirname, '..', '..', 'proto');
const to = path.join(__dirname, 'proto');
if (fs.existsSync(path.join(from, 'posenc', 'v1', 'posenc.proto'))) {
  fs.rmSync(to, { recursive: true, force: true });
  fs.cpSync(from, to, { recursive: true, filter: (p) => fs.statSync(p).isDirectory() || p.endsWith('.proto') });
}
