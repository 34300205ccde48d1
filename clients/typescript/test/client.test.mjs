// The built client (dist/) against a real `cw-middleware serve`: started by tests/test_typescript_client.py,
// which wrote the telemetry file with real calls and passes what it built in the environment:
//
//   CW_TS_BASE_URL   the server          CW_TS_TOKEN   its bearer token
//   CW_TS_RUN        the run id          CW_TS_STAGES  JSON: the stage ids, oldest first
//   CW_TS_STAGE      the stage subscribe() watches   CW_TS_CALLS  the calls that stage has had so far
//   CW_TS_READY      a file this test writes once subscribe() is under way: the Python side then makes
//                    one more real call into CW_TS_STAGE, which subscribe() must deliver within 20 s.
//
// Without CW_TS_BASE_URL (node --test run by hand) every test here skips.

import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { test } from 'node:test';

import * as api from '../dist/index.js';

const { subscribe } = api;

const env = process.env;
const BASE = env.CW_TS_BASE_URL;
const skip = BASE ? false : 'CW_TS_BASE_URL is not set (tests/test_typescript_client.py sets it)';
const RUN = env.CW_TS_RUN;
const STAGE = env.CW_TS_STAGE;
const STAGES = BASE ? JSON.parse(env.CW_TS_STAGES) : [];
const CALLS = Number(env.CW_TS_CALLS);
const TOKEN = env.CW_TS_TOKEN;
const WAIT_MS = 20_000;

const client = api.createClient({ baseUrl: BASE, auth: TOKEN });
const DOCUMENT = JSON.parse(readFileSync(new URL('../openapi.json', import.meta.url), 'utf8'));
const enc = encodeURIComponent;

async function plain(path, { token = TOKEN, as = 'json' } = {}) {
  const response = await fetch(BASE + path, { headers: token ? { Authorization: `Bearer ${token}` } : {} });
  return { status: response.status, body: as === 'json' ? await response.json() : await response.text() };
}

async function until(predicate, what, ms = WAIT_MS) {
  const deadline = Date.now() + ms;
  while (!predicate()) {
    if (Date.now() > deadline) throw new Error(`${what}: not within ${ms} ms`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

test('one generated function per operation of openapi.json', () => {
  const operations = Object.values(DOCUMENT.paths).flatMap((item) => Object.values(item).map((op) => op.operationId));
  assert.ok(operations.length >= 12, `${operations.length} operations`);
  for (const name of operations) assert.equal(typeof api[name], 'function', name);
  assert.equal(typeof api.subscribe, 'function');
});


/** Every operation of openapi.json but the event stream, as calls: the function's options and the plain route. */
function routeCases() {
  const values = { run_id: [RUN], stage_id: STAGES, name: ['app.js'], run: [RUN], stage: [STAGE] };
  const cases = [];
  for (const [template, item] of Object.entries(DOCUMENT.paths)) {
    for (const [method, op] of Object.entries(item)) {
      assert.equal(method, 'get', op.operationId);
      if (op.responses['200'].content?.['text/event-stream']) continue;
      let variants = [{ path: {}, query: {} }];
      for (const param of op.parameters ?? []) {
        if (param.in === 'header' || (!param.required && param.in === 'query')) continue;
        const choices = values[param.name];
        assert.ok(choices, `${op.operationId}: no test value for its parameter ${param.name}: add one here`);
        variants = variants.flatMap((v) => choices.map((c) => ({ ...v, [param.in]: { ...v[param.in], [param.name]: c } })));
      }
      for (const { path, query } of variants) {
        let route = template.replace(/\{(\w+)\}/g, (_, name) => enc(path[name]));
        if (Object.keys(query).length) route += `?${new URLSearchParams(query)}`;
        const options = { client, path, query };
        const json = Object.keys(op.responses['200'].content ?? {}).includes('application/json');
        cases.push({ name: op.operationId, options, route, json });
      }
    }
  }
  return cases;
}

test('every route function answers what a plain fetch of its route answers', { skip }, async () => {
  const cases = routeCases();
  const stagePath = (stage) => `/api/v1/runs/${enc(RUN)}/stages/${enc(stage)}`;
  for (const stage of STAGES) {
    const options = { client, path: { run_id: RUN, stage_id: stage }, query: { limit: 1 } };
    cases.push({ name: 'getStageHistory', options, route: `${stagePath(stage)}/history?limit=1`, json: true });
  }
  const covered = new Set(cases.map((c) => c.name));
  assert.ok(covered.has('getStageContextWindow') && covered.has('livePage'), [...covered].join());
  for (const { name, options, route, json } of cases) {
    const { data, error, response } = await api[name](options);
    assert.equal(error, undefined, `${name} ${route}`);
    assert.equal(response.status, 200, `${name} ${route}`);
    const expected = (await plain(route, { as: json ? 'json' : 'text' })).body;
    const got = json ? data : typeof data === 'string' ? data : await data.text();
    assert.deepEqual(got, expected, `${name} ${route}`);
  }

  // What the test built, through the typed answers.
  const path = { run_id: RUN };
  const runs = (await api.listRuns({ client })).data.runs;
  assert.ok(runs.some((r) => r.run_id === RUN), JSON.stringify(runs));
  const stages = (await api.listStages({ client, path })).data.stages;
  assert.deepEqual(stages.map((s) => s.stage_id), STAGES);
  const window = (await api.getStageContextWindow({ client, path: { run_id: RUN, stage_id: STAGE } })).data;
  assert.equal(window.stage_id, STAGE);
  assert.equal(window.available, true);
  assert.equal(window.stage_totals.calls, CALLS);
  const history = (await api.getStageHistory({ client, path: { run_id: RUN, stage_id: STAGE } })).data;
  assert.equal(history.snapshots.length, CALLS);
  const one = (await api.getStageHistory({ client, path: { run_id: RUN, stage_id: STAGE }, query: { limit: 1 } })).data;
  assert.equal(one.snapshots.length, 1);
  const summary = (await api.getRunSummary({ client, path })).data;
  assert.equal(summary.run_id, RUN);
  assert.deepEqual((await api.openapi({ client })).data, DOCUMENT);
});

test('the event stream function yields the run state: a stage and a snapshot event per stage', { skip }, async () => {
  const controller = new AbortController();
  const seen = [];
  const { stream } = await api.streamRunEvents({
    client,
    path: { run_id: RUN },
    signal: controller.signal,
    onSseEvent: (event) => seen.push(event),
    sseMaxRetryAttempts: 0,
  });
  const snapshots = new Map();
  for await (const data of stream) {
    if (seen.at(-1).event === 'snapshot') snapshots.set(data.stage_id, data);
    if (snapshots.size === STAGES.length) break;
  }
  controller.abort();
  assert.deepEqual([...snapshots.keys()].sort(), [...STAGES].sort());
  for (const stage of STAGES) {
    assert.ok(seen.some((e) => e.event === 'stage' && e.data.stage_id === stage), stage);
    const { run_id, ...window } = snapshots.get(stage);
    assert.equal(run_id, RUN);
    assert.deepEqual(window, (await plain(`/api/v1/runs/${enc(RUN)}/stages/${enc(stage)}/context-window`)).body);
  }
  const named = seen.filter((e) => e.event); // the generated reader also reports the `retry:` frame, which has no event
  assert.ok(named.every((e) => /^[0-9a-f]+:\d+$/.test(e.id)), JSON.stringify(named.map((e) => e.id)));
});

test('an unknown stage or run answers the documented error shape; a missing token 401', { skip }, async () => {
  const isError = (body) => {
    assert.deepEqual(Object.keys(body), ['error']);
    assert.deepEqual(Object.keys(body.error).sort(), ['code', 'message']);
    assert.equal(typeof body.error.code, 'string');
    assert.equal(typeof body.error.message, 'string');
  };
  const unknownStage = await api.getStageContextWindow({ client, path: { run_id: RUN, stage_id: 'no-such-stage' } });
  assert.equal(unknownStage.response.status, 404);
  assert.equal(unknownStage.data, undefined);
  isError(unknownStage.error);
  assert.equal(unknownStage.error.error.code, 'not_found');
  assert.deepEqual(unknownStage.error, (await plain(`/api/v1/runs/${enc(RUN)}/stages/no-such-stage/context-window`)).body);

  const unknownRun = await api.getRunSummary({ client, path: { run_id: 'no-such-run' } });
  assert.equal(unknownRun.response.status, 404);
  isError(unknownRun.error);

  await assert.rejects(
    api.getStageContextWindow({ client, path: { run_id: RUN, stage_id: 'no-such-stage' }, throwOnError: true }),
    (thrown) => thrown.error.code === 'not_found',
  );

  const anonymous = api.createClient({ baseUrl: BASE });
  const refused = await api.listRuns({ client: anonymous });
  assert.equal(refused.response.status, 401);
  isError(refused.error);
  assert.equal((await api.health({ client: anonymous })).response.status, 200); // the one route without the token
});

test('subscribe() gives the current window, then the next one after a new call, resuming with Last-Event-ID', { skip }, async () => {
  // A fetch that records every request and cuts the first event stream once the run's state came, so
  // subscribe() has to reconnect (after the server's retry delay) with Last-Event-ID.
  const requests = [];
  const streams = [];
  const tapped = async (input, init = {}) => {
    const url = String(input instanceof Request ? input.url : input);
    const headers = new Headers(input instanceof Request ? input.headers : init.headers);
    requests.push({ url, headers });
    const response = await fetch(input, init);
    if (!url.endsWith('/events') || !response.ok) return response;
    const record = { lastEventId: headers.get('Last-Event-ID'), authorization: headers.get('Authorization'), text: '', cut: false };
    streams.push(record);
    const first = streams.length === 1;
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    const body = new ReadableStream({
      async pull(controller) {
        const { done, value } = await reader.read();
        if (done) {
          controller.close();
          return;
        }
        record.text += decoder.decode(value, { stream: true });
        controller.enqueue(value);
        const blocks = record.text.split('\n\n');
        const stateCame = blocks.some((b) => b.includes('event: snapshot') && b.includes(`"stage_id":${JSON.stringify(STAGE)}`));
        if (first && stateCame && record.text.endsWith('\n\n')) {
          record.cut = true;
          controller.close();
          await reader.cancel();
        }
      },
      cancel: (reason) => reader.cancel(reason),
    });
    return new Response(body, { status: response.status, headers: response.headers });
  };

  const windows = [];
  const errors = [];
  const unsubscribe = subscribe(BASE, RUN, STAGE, (window) => windows.push(window), {
    token: TOKEN,
    fetch: tapped,
    onError: (error) => errors.push(error),
  });
  try {
    await until(() => windows.length >= 1, 'the first window');
    const current = (await plain(`/api/v1/runs/${enc(RUN)}/stages/${enc(STAGE)}/context-window`)).body;
    assert.deepEqual(windows[0], current);
    assert.equal(windows[0].stage_totals.calls, CALLS);

    await until(() => streams.length >= 1 && streams[0].cut, 'the first stream with the run state');
    writeFileSync(env.CW_TS_READY, 'READY\n'); // the Python side makes one more call into the stage now
    await until(() => windows.some((w) => w.stage_totals?.calls === CALLS + 1), 'the window after the new call');
  } finally {
    unsubscribe();
  }
  assert.deepEqual(errors, []);
  const latest = windows.at(-1);
  assert.equal(latest.stage_totals.calls, CALLS + 1);
  assert.deepEqual(latest, (await plain(`/api/v1/runs/${enc(RUN)}/stages/${enc(STAGE)}/context-window`)).body);

  // The reconnection resumed where the first stream stopped: its last id sent back, and no reset.
  assert.ok(streams.length >= 2, `${streams.length} stream connections`);
  const ids = [...streams[0].text.matchAll(/^id: (.*)$/gm)].map((m) => m[1]);
  assert.ok(ids.length > 0);
  assert.equal(streams[0].lastEventId, null);
  assert.equal(streams[1].lastEventId, ids.at(-1));
  assert.ok(!streams[1].text.includes('event: reset'), streams[1].text);
  assert.ok(streams.every((s) => s.authorization === `Bearer ${TOKEN}`));

  // Window fetches: the first one, then only as many as the events naming this stage (fewer when they coalesce).
  const windowFetches = requests.filter((r) => r.url.includes('/context-window'));
  assert.ok(windowFetches.every((r) => r.url.endsWith(`/stages/${enc(STAGE)}/context-window`)));
  assert.ok(windowFetches.every((r) => r.headers.get('Authorization') === `Bearer ${TOKEN}`));
  const naming = streams
    .flatMap((s) => s.text.split('\n\n'))
    .filter((b) => /^event: (stage|snapshot)$/m.test(b) && b.includes(`"stage_id":${JSON.stringify(STAGE)}`)).length;
  assert.ok(windowFetches.length >= 2 && windowFetches.length <= 1 + naming, `${windowFetches.length} fetches, ${naming} events`);

  // After unsubscribe: no request at all.
  const before = requests.length;
  await new Promise((resolve) => setTimeout(resolve, 300));
  assert.equal(requests.length, before);
});
