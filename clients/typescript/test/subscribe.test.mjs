// subscribe() and its event-stream parser on their own: a scripted fetch instead of a server, so every
// rule is checked exactly (which events refetch, Last-Event-ID on reconnect, the token, errors, the end).
// The same code against a real `cw-middleware serve` is test/client.test.mjs.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { EventStreamParser, subscribe } from '../dist/index.js';

const BASE = 'http://cw.test/mount/';
const enc = new TextEncoder();

function parseAll(chunks) {
  const events = [];
  const retries = [];
  const parser = new EventStreamParser((e) => events.push(e), (ms) => retries.push(ms));
  for (const chunk of chunks) parser.push(chunk);
  parser.end();
  return { events, retries, lastEventId: parser.lastEventId };
}

test('the parser: fields, comments, multi-line data, ids kept across events, every line ending, any split', () => {
  const stream =
    'retry: 1500\r\n\r\n' +
    ': heartbeat\n\n' +
    'id: a:1\nevent: stage\ndata: {"stage_id":"s"}\n\n' +
    'event: backend_error\ndata: {"error":{"code":"x","message":"m"}}\r\r' +
    'id: a:2\rdata:no space\rdata:  two spaces\r\n\r\n' +
    'id\ndata\n\n' +
    'event: ignored-without-data\nid: a:3\n\n' +
    'bogus: field\nretry: soon\ndata: last\n\n' +
    'event: cut\ndata: never dispatched';
  const expected = [
    { type: 'stage', data: '{"stage_id":"s"}', lastEventId: 'a:1' },
    { type: 'backend_error', data: '{"error":{"code":"x","message":"m"}}', lastEventId: 'a:1' },
    { type: 'message', data: 'no space\n two spaces', lastEventId: 'a:2' },
    { type: 'message', data: '', lastEventId: '' },
    { type: 'message', data: 'last', lastEventId: 'a:3' },
  ];
  const whole = parseAll([stream]);
  assert.deepEqual(whole.events, expected);
  assert.deepEqual(whole.retries, [1500]);
  assert.equal(whole.lastEventId, 'a:3');
  for (let i = 0; i <= stream.length; i++) {
    const split = parseAll([stream.slice(0, i), stream.slice(i)]);
    assert.deepEqual(split.events, expected, `split at ${i}`);
  }
  assert.deepEqual(parseAll([...stream]).events, expected, 'one character at a time');
});

/** A fetch serving the window answers in turn (the last one again) and one scripted stream per connection. */
function server({ windows, streams, status = {} }) {
  const log = { windows: [], events: [] };
  let windowIndex = 0;
  const fetch = async (input, init = {}) => {
    const request = input instanceof Request ? input : new Request(input, init);
    const url = new URL(request.url);
    const signal = request.signal;
    if (url.pathname.endsWith('/context-window')) {
      log.windows.push(request);
      if (status.window) return Response.json({ error: { code: 'not_found', message: 'no stage' } }, { status: status.window });
      const body = windows[Math.min(windowIndex++, windows.length - 1)];
      return Response.json(body);
    }
    assert.ok(url.pathname.endsWith('/events'), url.pathname);
    log.events.push(request);
    if (status.events) return Response.json({ error: { code: 'unauthorized', message: 'token' } }, { status: status.events });
    const script = streams[log.events.length - 1] ?? { chunks: [], open: true };
    const body = new ReadableStream({
      start(controller) {
        for (const chunk of script.chunks) controller.enqueue(enc.encode(chunk));
        if (!script.open) controller.close();
        else signal.addEventListener('abort', () => controller.error(new DOMException('aborted', 'AbortError')));
      },
    });
    return new Response(body, { headers: { 'Content-Type': 'text/event-stream' } });
  };
  return { fetch, log };
}

async function until(predicate, what, ms = 5000) {
  const deadline = Date.now() + ms;
  while (!predicate()) {
    if (Date.now() > deadline) throw new Error(`${what}: not within ${ms} ms`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

const win = (calls) => ({ stage_id: 'plan@1', available: true, staleness: 'live', stage_totals: { calls } });
const frame = (id, kind, data) => `${id ? `id: ${id}\n` : ''}event: ${kind}\ndata: ${JSON.stringify(data)}\n\n`;

test('subscribe(): refetches only for its stage, skips unchanged windows, resumes with Last-Event-ID', async () => {
  const { fetch, log } = server({
    windows: [win(1), win(1), win(2)],
    streams: [
      {
        chunks: [
          'retry: 10\n\n: heartbeat\n\n',
          frame('e:1', 'stage', { run_id: 'r 1', stage_id: 'other' }),
          frame('e:2', 'snapshot', { run_id: 'r 1', stage_id: 'other' }),
          frame(null, 'reset', { run_id: 'r 1', reason: 'unknown_position' }),
          frame('e:3', 'stage', { run_id: 'r 1', stage_id: 'plan@1' }), // the window then is unchanged: no call
        ],
        open: false, // the server went away: reconnect
      },
      { chunks: [': heartbeat\n\n', frame('e:4', 'snapshot', { run_id: 'r 1', stage_id: 'plan@1' })], open: true },
    ],
  });
  const windows = [];
  const errors = [];
  const stop = subscribe(BASE, 'r 1', 'plan@1', (w) => windows.push(w), { token: 's3cret', fetch, onError: (e) => errors.push(e) });
  await until(() => windows.length === 2, 'the second window');
  stop();
  assert.deepEqual(windows, [win(1), win(2)]);
  assert.deepEqual(errors, []);
  assert.equal(log.windows.length, 3); // the first, then one per event naming plan@1 (e:3 and e:4)
  for (const request of log.windows) {
    assert.equal(request.url, 'http://cw.test/mount/api/v1/runs/r%201/stages/plan%401/context-window');
    assert.equal(request.headers.get('Authorization'), 'Bearer s3cret');
  }
  assert.equal(log.events.length, 2);
  assert.equal(log.events[0].url, 'http://cw.test/mount/api/v1/runs/r%201/events');
  assert.equal(log.events[0].headers.get('Last-Event-ID'), null);
  assert.equal(log.events[1].headers.get('Last-Event-ID'), 'e:3');
  assert.ok(log.events.every((r) => r.headers.get('Authorization') === 'Bearer s3cret'));
  assert.ok(log.events.every((r) => r.signal.aborted), 'unsubscribe aborts the open stream');
  const after = log.windows.length + log.events.length;
  await new Promise((resolve) => setTimeout(resolve, 50));
  assert.equal(log.windows.length + log.events.length, after, 'nothing after unsubscribe');
});

test('subscribe(): a burst of events costs one more fetch, not one each', async () => {
  let release;
  const gate = new Promise((resolve) => {
    release = resolve;
  });
  const inner = server({
    windows: [win(1), win(2), win(3)],
    streams: [{ chunks: [1, 2, 3, 4, 5].map((n) => frame(`e:${n}`, 'snapshot', { stage_id: 'plan@1' })), open: true }],
  });
  let held = false;
  const fetch = async (input, init) => {
    const url = String(input instanceof Request ? input.url : input);
    if (url.endsWith('/context-window') && inner.log.windows.length === 1 && !held) {
      held = true; // the first refetch waits while the other events arrive
      await gate;
    }
    return inner.fetch(input, init);
  };
  const windows = [];
  const stop = subscribe(BASE, 'r', 'plan@1', (w) => windows.push(w), { fetch });
  await until(() => held, 'the first refetch');
  await new Promise((resolve) => setTimeout(resolve, 30));
  release();
  await until(() => windows.length === 3, 'the coalesced refetch');
  await new Promise((resolve) => setTimeout(resolve, 30));
  stop();
  assert.equal(inner.log.windows.length, 3); // the first, the held one, and one for the four events during it
  assert.deepEqual(windows.map((w) => w.stage_totals.calls), [1, 2, 3]);
});

test('subscribe(): errors go to onError; a refused token ends it; a token function is asked each time', async () => {
  const { fetch, log } = server({
    windows: [win(1)],
    streams: [{ chunks: [frame(null, 'backend_error', { run_id: 'r', error: { code: 'backend_unavailable', message: 'down' } })], open: true }],
  });
  const errors = [];
  let asked = 0;
  const token = async () => {
    asked += 1;
    return 'tok';
  };
  const stop = subscribe(BASE, 'r', 'plan@1', () => {}, { fetch, token, onError: (e) => errors.push(e) });
  await until(() => errors.length === 1, 'the backend error');
  stop();
  assert.equal(errors[0].source, 'backend');
  assert.equal(errors[0].code, 'backend_unavailable');
  assert.equal(errors[0].fatal, false);
  assert.ok(asked >= 2, `token asked ${asked} times`);

  const refused = server({ windows: [win(1)], streams: [], status: { window: 401, events: 401 } });
  const fatal = [];
  const windows = [];
  subscribe(BASE, 'r', 'plan@1', (w) => windows.push(w), { fetch: refused.fetch, onError: (e) => fatal.push(e) });
  await until(() => fatal.length === 1, 'the refusal');
  await new Promise((resolve) => setTimeout(resolve, 50));
  assert.deepEqual(windows, []);
  assert.equal(fatal.length, 1);
  assert.equal(fatal[0].status, 401);
  assert.equal(fatal[0].fatal, true);
  assert.equal(refused.log.events.length, 0, 'no stream after the token was refused');

  const missing = server({ windows: [], streams: [{ chunks: [], open: true }], status: { window: 404 } });
  const notFound = [];
  const stop2 = subscribe(BASE, 'r', 'nope', () => {}, { fetch: missing.fetch, onError: (e) => notFound.push(e) });
  await until(() => missing.log.events.length === 1, 'the stream after a 404 window');
  stop2();
  assert.equal(notFound[0].source, 'window');
  assert.equal(notFound[0].code, 'not_found');
  assert.equal(notFound[0].fatal, false); // the stage may appear: its stage event refetches

  const aborted = new AbortController();
  aborted.abort();
  const none = server({ windows: [win(1)], streams: [] });
  subscribe(BASE, 'r', 'plan@1', () => {}, { fetch: none.fetch, signal: aborted.signal });
  await new Promise((resolve) => setTimeout(resolve, 30));
  assert.equal(none.log.windows.length + none.log.events.length, 0, 'an aborted signal: nothing at all');
});
