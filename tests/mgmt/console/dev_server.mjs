// A stand-in for stratad's HTTP server while working on the console
// without it: serves mgmt/console from disk and answers the Connect JSON
// calls (POST /strata.v1.Array/<Method>) by running grpcurl against
// stratad's gRPC port (reflection), converting names to lowerCamelCase
// and errors to the Connect error body. Not used by the tests.
//   node dev_server.mjs LISTEN_PORT GRPC_ADDR
import http from 'node:http';
import fs from 'node:fs';
import path from 'node:path';
import { execFile } from 'node:child_process';

const [listen_port, grpc_addr] = process.argv.slice(2);
const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), '../../../mgmt/console');
const types = { '.html': 'text/html', '.js': 'text/javascript', '.css': 'text/css', '.png': 'image/png', '.svg': 'image/svg+xml' };
const codes = { InvalidArgument: ['invalid_argument', 400], FailedPrecondition: ['failed_precondition', 400],
  NotFound: ['not_found', 404], AlreadyExists: ['already_exists', 409], ResourceExhausted: ['resource_exhausted', 429],
  Unauthenticated: ['unauthenticated', 401], Unavailable: ['unavailable', 503], Unimplemented: ['unimplemented', 501] };

const camel = (v) => Array.isArray(v) ? v.map(camel) : v && typeof v === 'object'
  ? Object.fromEntries(Object.entries(v).map(([k, x]) => [k.replace(/_([a-z0-9])/g, (_, c) => c.toUpperCase()), camel(x)])) : v;

http.createServer((req, res) => {
  const url = new URL(req.url, 'http://x');
  if (req.method === 'POST' && url.pathname.startsWith('/strata.v1.Array/')) {
    let body = '';
    req.on('data', (c) => { body += c; });
    req.on('end', () => {
      // grpcurl takes a FieldMask as {"paths": [...]}, not as the JSON mapping's string.
      const request = JSON.parse(body || '{}');
      if (typeof request.updateMask === 'string') {
        request.updateMask = { paths: request.updateMask.split(',').map((p) => p.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`)) };
      }
      execFile('grpcurl', ['-plaintext', '-emit-defaults', '-d', JSON.stringify(request), grpc_addr, url.pathname.slice(1)],
        (err, out, errout) => {
          if (!err) { res.writeHead(200, { 'content-type': 'application/json' }); res.end(JSON.stringify(camel(JSON.parse(out)))); return; }
          const code = (errout.match(/Code: (\w+)/) || [])[1] || 'Internal';
          const message = (errout.match(/Message: (.*)/) || [])[1] || errout.trim();
          const [name, status] = codes[code] || ['internal', 500];
          const colon = message.indexOf(': ');
          const debug = colon > 0 ? { field: message.slice(0, colon), reason: message.slice(colon + 2) } : { field: '', reason: message };
          res.writeHead(status, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ code: name, message, details: [{ type: 'strata.v1.ErrorInfo', value: '', debug }] }));
        });
    });
    return;
  }
  const file = path.join(root, url.pathname === '/' ? 'index.html' : path.normalize(url.pathname));
  if (!file.startsWith(root) || !fs.existsSync(file) || fs.statSync(file).isDirectory()) { res.writeHead(404); res.end('not found'); return; }
  res.writeHead(200, { 'content-type': types[path.extname(file)] || 'application/octet-stream',
    // stratad's policy, so that the console breaks here as it would there
    'content-security-policy': "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'" });
  fs.createReadStream(file).pipe(res);
}).listen(Number(listen_port), '127.0.0.1');
