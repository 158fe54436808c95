#!/usr/bin/env node
// A minimal hookline subscriber in Node (no packages): verifies each delivery's Standard
// Webhooks signature with node's crypto (HMAC-SHA256, compared with timingSafeEqual) and
// applies it once, however often it arrives.
//
// hookline delivers at least once: a retry after a lost answer, a dead letter replayed, a
// resend after a crash all carry the `webhook-id` this receiver saw before. Node 20 has no
// built-in SQLite (node:sqlite arrived in 22), so the store is a JSON-lines file: one line per
// applied delivery holds both the side effect and the "seen" record, appended and fsynced
// before the answer. One line is one write: the two cannot be split, and a crash mid-write
// leaves a torn last line, which is dropped when the file is read back at start. Verifying,
// checking and appending run synchronously, so two copies of one id never interleave.
//
// Settings (environment):
//   WEBHOOK_SECRET  the subscriber's secret, whsec_... (two, space-separated, while rotating)
//   PORT            where to listen on 127.0.0.1 (9000)
//   RECEIVER_LOG    the JSON-lines file (receiver.jsonl)

'use strict';
const crypto = require('node:crypto');
const fs = require('node:fs');
const http = require('node:http');

const SECRETS = (process.env.WEBHOOK_SECRET || '').split(/\s+/).filter(Boolean);
if (SECRETS.length === 0 || !SECRETS.every((secret) => secret.startsWith('whsec_'))) {
  console.error("WEBHOOK_SECRET must hold the subscriber's secret, whsec_... (two while rotating)");
  process.exit(2);
}
// The key is the base64 after whsec_: one that is empty or not base64 would let anyone sign.
const KEYS = SECRETS.map((secret) => {
  const text = secret.slice('whsec_'.length);
  const key = Buffer.from(text, 'base64');
  if (key.length < 16 || key.toString('base64').replace(/=+$/, '') !== text.replace(/=+$/, '')) {
    console.error('WEBHOOK_SECRET: whsec_ must be followed by the base64 of the key (16 bytes or more)');
    process.exit(2);
  }
  return key;
});
const PORT = Number(process.env.PORT || 9000);
const LOG = process.env.RECEIVER_LOG || 'receiver.jsonl';
const TOLERANCE_SECONDS = 5 * 60;
// Larger bodies are refused before anything is read into memory (hookline's default payload
// limit is 256 KiB; a delivery's body is the payload and a little more).
const MAX_BODY_BYTES = 1024 * 1024;

// webhook-id -> the answer given: read back from the file, every complete line.
const seen = new Map();
function load() {
  if (!fs.existsSync(LOG)) return;
  const text = fs.readFileSync(LOG, 'utf8');
  // Every whole line up to the first that does not parse (a write torn by a crash, or left
  // short): the rest is cut off, so the next record starts a line of its own.
  let kept = 0;
  for (const line of text.split('\n')) {
    const end = kept + Buffer.byteLength(line) + 1;
    if (end > Buffer.byteLength(text)) break; // no newline after it: torn
    let record;
    try {
      record = JSON.parse(line);
    } catch {
      break;
    }
    seen.set(record.webhook_id, { status: record.status, body: record.body });
    kept = end;
  }
  if (kept < Buffer.byteLength(text)) fs.truncateSync(LOG, kept);
}
const log = () => fs.openSync(LOG, 'a');

function verified(headers, body) {
  const id = headers['webhook-id'];
  const timestamp = headers['webhook-timestamp'];
  const signatures = headers['webhook-signature'];
  if (!id || !timestamp || !signatures || !/^\d+$/.test(timestamp)) return false;
  if (Math.abs(Date.now() / 1000 - Number(timestamp)) > TOLERANCE_SECONDS) return false;
  const signed = Buffer.concat([Buffer.from(`${id}.${timestamp}.`), body]);
  const tags = signatures
    .split(' ')
    .filter((entry) => entry.startsWith('v1,'))
    .map((entry) => Buffer.from(entry.slice(3), 'base64'));
  // Any v1 entry under any secret: both signatures verify during a rotation.
  return KEYS.some((key) => {
    const expected = crypto.createHmac('sha256', key).update(signed).digest();
    return tags.some((tag) => tag.length === expected.length && crypto.timingSafeEqual(tag, expected));
  });
}

function answer(res, status, text) {
  res.writeHead(status, { 'content-type': 'text/plain; charset=utf-8' });
  res.end(text);
}

function handle(req, body, res) {
  if (!verified(req.headers, body)) return answer(res, 401, 'signature not verified');
  let event;
  try {
    event = JSON.parse(body.toString('utf8'));
    if (typeof event.type !== 'string' || !('data' in event)) throw new Error('no type or data');
  } catch {
    return answer(res, 400, 'not an event');
  }
  const id = req.headers['webhook-id'];
  const attempt = req.headers['webhook-attempt'];
  const prior = seen.get(id);
  if (prior) {
    console.log('duplicate', id, attempt);
    return answer(res, prior.status, prior.body);
  }
  // The side effect (the event's type and data) and the seen record, in one line.
  const record = { webhook_id: id, status: 200, body: 'applied', type: event.type, data: event.data };
  const size = fs.fstatSync(fd).size;
  const line = Buffer.from(JSON.stringify(record) + '\n');
  try {
    const written = fs.writeSync(fd, line);
    if (written !== line.length) throw new Error(`short write: ${written} of ${line.length} bytes`);
    fs.fsyncSync(fd);
  } catch (error) {
    // Cut back what a failed write left, so that the next line starts a line of its own.
    try { fs.ftruncateSync(fd, size); } catch { /* the next start drops a torn last line */ }
    return answer(res, 503, `not applied: ${error.message}`); // hookline retries
  }
  seen.set(id, { status: record.status, body: record.body });
  console.log('applied', id, attempt, body.toString('utf8'));
  answer(res, record.status, record.body);
}

load();
const created = !fs.existsSync(LOG);
const fd = log();
if (created) {
  // The file's directory entry is durable too.
  const dir = fs.openSync(require('node:path').dirname(require('node:path').resolve(LOG)), 'r');
  fs.fsyncSync(dir);
  fs.closeSync(dir);
}
http
  .createServer((req, res) => {
    if (req.method !== 'POST') return answer(res, 405, 'POST only');
    const chunks = [];
    let size = 0;
    let refused = false;
    req.on('data', (chunk) => {
      size += chunk.length;
      if (size > MAX_BODY_BYTES && !refused) {
        refused = true;
        answer(res, 413, 'body too large');
        req.destroy();
      } else if (!refused) {
        chunks.push(chunk);
      }
    });
    req.on('end', () => {
      if (!refused) handle(req, Buffer.concat(chunks), res);
    });
  })
  .listen(PORT, '127.0.0.1', () => console.log(`listening on 127.0.0.1:${PORT}, deduplicating in ${LOG}`));
