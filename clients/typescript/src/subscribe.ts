// subscribe(): a stage's context window, kept current from the run's Server-Sent Events stream.
//
// Hand-written (everything under ./generated/ is the generator's). Framework-neutral: it needs only
// fetch, ReadableStream, TextDecoder, AbortController and setTimeout, so it runs in browsers and in
// Node 20 (which has fetch but no EventSource: the stream is read from the fetch body and parsed here).
//
// What it does: fetch the stage's window once (GET .../context-window) and hand it to onSnapshot; then
// read GET /api/v1/runs/{run}/events and fetch the window again ONLY when a `snapshot` or `stage` event
// names this stage. Fetches never overlap (a burst of events costs at most one more fetch), and
// onSnapshot gets a window only when it differs from the last one it got. A dropped stream reconnects
// after the server's `retry:` delay (growing on repeated failures), sending the last event id back as
// Last-Event-ID so the server resumes right after it.

import { createClient } from './generated/client/index.js';
import { getStageContextWindow } from './generated/sdk.gen.js';
import type { StageContextWindow } from './generated/types.gen.js';

/** Where a reported problem came from. */
export type SubscribeErrorSource = 'window' | 'stream' | 'backend' | 'callback';

/** What `onError` gets: a failed window fetch, a failed or dropped stream, a `backend_error` event, or onSnapshot throwing. */
export class SubscribeError extends globalThis.Error {
  override readonly name = 'SubscribeError';

  constructor(
    message: string,
    /** What failed. */
    readonly source: SubscribeErrorSource,
    /** The HTTP status, when the server answered. */
    readonly status?: number,
    /** The `error.code` of the server's JSON error (e.g. `not_found`, `unauthorized`, `backend_unavailable`). */
    readonly code?: string,
    /** True when the subscription stopped because of it (the token was refused, or the run id is invalid). */
    readonly fatal: boolean = false,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

export interface SubscribeOptions {
  /** The server's bearer token (CW_SERVE_TOKEN), or a function giving it (asked before every request). */
  token?: string | (() => string | undefined | Promise<string | undefined>);
  /** The fetch to use; default `globalThis.fetch`. */
  fetch?: typeof fetch;
  /** Told about every problem; the subscription goes on unless `error.fatal`. Default: ignore. */
  onError?: (error: SubscribeError) => void;
  /** Milliseconds before reconnecting a dropped stream until the server says (its `retry:` field). Default 2000. */
  retryMs?: number;
  /** The longest wait between reconnections while they keep failing. Default 30000. */
  maxRetryMs?: number;
  /** Aborting it ends the subscription, like calling the returned function. */
  signal?: AbortSignal;
}

/** Ends a subscription: no more fetches, no more calls. Calling it again does nothing. */
export type Unsubscribe = () => void;

/** One event of a Server-Sent Events stream, as the EventSource interface would dispatch it. */
export interface ServerSentEvent {
  /** The `event:` field; `message` when the event had none. */
  type: string;
  /** The `data:` lines joined by newlines. */
  data: string;
  /** The last `id:` the stream has given so far (kept across events without one, as EventSource does). */
  lastEventId: string;
}

/**
 * An incremental parser of `text/event-stream` (the WHATWG HTML rules): feed it decoded text in chunks of
 * any size; it calls `onEvent` per complete event and `onRetry` per valid `retry:` field. Comment lines
 * (starting with `:`) are skipped; an event cut off by the end of the stream is dropped.
 */
export class EventStreamParser {
  lastEventId: string;
  private buffer = '';
  private type = '';
  private data: string[] = [];
  private idBuffer: string;

  constructor(
    private readonly onEvent: (event: ServerSentEvent) => void,
    private readonly onRetry: (ms: number) => void = () => {},
    lastEventId = '',
  ) {
    this.lastEventId = lastEventId;
    this.idBuffer = lastEventId;
  }

  /** More of the stream. */
  push(text: string): void {
    this.buffer += text;
    let start = 0;
    for (;;) {
      let end = start;
      while (end < this.buffer.length && this.buffer[end] !== '\n' && this.buffer[end] !== '\r') end++;
      if (end >= this.buffer.length) break;
      let next = end + 1;
      if (this.buffer[end] === '\r') {
        if (next >= this.buffer.length) break; // a CR that may yet be followed by LF: wait for the next chunk
        if (this.buffer[next] === '\n') next++;
      }
      this.line(this.buffer.slice(start, end));
      start = next;
    }
    this.buffer = this.buffer.slice(start);
  }

  /** The end of the stream: a last line ended by a lone CR counts; an unfinished event is dropped. */
  end(): void {
    if (this.buffer.endsWith('\r')) this.line(this.buffer.slice(0, -1));
    this.buffer = '';
    this.type = '';
    this.data = [];
  }

  private line(line: string): void {
    if (line === '') {
      this.dispatch();
      return;
    }
    if (line.startsWith(':')) return; // a comment: the server's heartbeat
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    switch (field) {
      case 'event':
        this.type = value;
        break;
      case 'data':
        this.data.push(value);
        break;
      case 'id':
        if (!value.includes('\0')) this.idBuffer = value;
        break;
      case 'retry':
        if (/^\d+$/.test(value)) this.onRetry(Number(value));
        break;
      default:
        break; // unknown fields are ignored
    }
  }

  private dispatch(): void {
    this.lastEventId = this.idBuffer;
    const type = this.type || 'message';
    const data = this.data;
    this.type = '';
    this.data = [];
    if (data.length === 0) return;
    this.onEvent({ type, data: data.join('\n'), lastEventId: this.lastEventId });
  }
}

/** Reads a fetch body as an event stream into `parser` until it ends (or its request is aborted: then it throws). */
export async function readEventStream(body: ReadableStream<Uint8Array>, parser: EventStreamParser): Promise<void> {
  const reader = body.getReader();
  const decoder = new TextDecoder('utf-8');
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      parser.push(decoder.decode(value, { stream: true }));
    }
    parser.push(decoder.decode());
    parser.end();
  } finally {
    reader.releaseLock();
  }
}

const FATAL_STATUSES = new Set([400, 401, 403]); // retrying cannot help: a bad id, a refused token

/**
 * Calls `onSnapshot` with the stage's current context window, then again each time the run's event stream
 * says the stage changed and the window fetched then differs from the last one given. Returns the function
 * that ends it.
 *
 * @param baseUrl where `cw-middleware serve` answers, e.g. `http://127.0.0.1:8321` (a mount path included)
 * @param run the run id
 * @param stage the stage id
 */
export function subscribe(
  baseUrl: string,
  run: string,
  stage: string,
  onSnapshot: (window: StageContextWindow) => void,
  options: SubscribeOptions = {},
): Unsubscribe {
  const controller = new AbortController();
  const signal = controller.signal;
  const root = baseUrl.replace(/\/+$/, '');
  const doFetch: typeof fetch = options.fetch ?? ((input, init) => globalThis.fetch(input, init));
  const onError = options.onError ?? (() => {});
  const baseRetry = options.retryMs ?? 2000;
  const maxRetry = options.maxRetryMs ?? 30000;
  const token = async (): Promise<string | undefined> =>
    typeof options.token === 'function' ? await options.token() : options.token;
  const client = createClient({ baseUrl: root, fetch: doFetch, auth: token });

  let stopped = false;
  const unsubscribe: Unsubscribe = () => {
    if (stopped) return;
    stopped = true;
    controller.abort();
    options.signal?.removeEventListener('abort', unsubscribe);
  };
  if (options.signal?.aborted) return unsubscribe;
  options.signal?.addEventListener('abort', unsubscribe, { once: true });

  const report = (error: SubscribeError): void => {
    if (stopped) return;
    try {
      onError(error);
    } catch {
      // a throwing onError must not end the subscription
    }
    if (error.fatal) unsubscribe();
  };

  // ---- the window: one fetch at a time; events during a fetch ask for one more after it
  let last: string | undefined;
  let fetching: Promise<void> | undefined;
  let again = false;

  const fetchWindow = async (): Promise<void> => {
    let result;
    try {
      result = await getStageContextWindow({ client, path: { run_id: run, stage_id: stage }, signal });
    } catch (cause) {
      report(new SubscribeError(`fetching the context window failed: ${String(cause)}`, 'window', undefined, undefined, false, { cause }));
      return;
    }
    if (stopped) return;
    const { data, error, response } = result;
    if (response === undefined || !response.ok || data === undefined) {
      const status = response?.status;
      const body = error as { error?: { code?: string; message?: string } } | undefined;
      const message = body?.error?.message ?? (status ? `HTTP ${status}` : String(error));
      const fatal = status !== undefined && FATAL_STATUSES.has(status);
      report(new SubscribeError(`fetching the context window failed: ${message}`, 'window', status, body?.error?.code, fatal));
      return;
    }
    const text = JSON.stringify(data);
    if (text === last) return;
    last = text;
    try {
      onSnapshot(data);
    } catch (cause) {
      report(new SubscribeError(`onSnapshot threw: ${String(cause)}`, 'callback', undefined, undefined, false, { cause }));
    }
  };

  const refresh = (): Promise<void> => {
    if (fetching) {
      again = true;
      return fetching;
    }
    fetching = (async () => {
      do {
        again = false;
        await fetchWindow();
      } while (again && !stopped);
    })().finally(() => {
      fetching = undefined;
    });
    return fetching;
  };

  // ---- the stream
  let lastEventId = '';
  let retry = baseRetry;

  const onEvent = (event: ServerSentEvent): void => {
    lastEventId = event.lastEventId;
    if (event.type === 'snapshot' || event.type === 'stage') {
      let named: unknown;
      try {
        named = (JSON.parse(event.data) as { stage_id?: unknown }).stage_id;
      } catch {
        return;
      }
      if (named === stage) void refresh();
    } else if (event.type === 'backend_error') {
      let body: { error?: { code?: string; message?: string } } = {};
      try {
        body = JSON.parse(event.data);
      } catch {
        // reported without its details
      }
      report(new SubscribeError(`the server's backend failed: ${body.error?.message ?? event.data}`, 'backend', undefined, body.error?.code));
    }
    // `reset`: the position asked for is gone; the current state follows as stage/snapshot events.
  };

  let heard = false; // the current connection gave at least one event

  /** One connection, until it ends; resolves to the wait the server asked for (Retry-After), if any. */
  const connect = async (): Promise<number> => {
    heard = false;
    const headers: Record<string, string> = { Accept: 'text/event-stream' };
    const bearer = await token();
    if (bearer) headers.Authorization = `Bearer ${bearer}`;
    if (lastEventId) headers['Last-Event-ID'] = lastEventId;
    const url = `${root}/api/v1/runs/${encodeURIComponent(run)}/events`;
    const response = await doFetch(url, { headers, signal });
    if (!response.ok) {
      let body: { error?: { code?: string; message?: string } } = {};
      try {
        body = await response.json();
      } catch {
        // not our JSON error: reported by its status
      }
      const status = response.status;
      const message = `the event stream was refused: ${body.error?.message ?? `HTTP ${status}`}`;
      report(new SubscribeError(message, 'stream', status, body.error?.code, FATAL_STATUSES.has(status)));
      const after = Number(response.headers.get('Retry-After'));
      return Number.isFinite(after) && after > 0 ? after * 1000 : 0;
    }
    if (!response.body) throw new globalThis.Error('the event stream has no body');
    const parser = new EventStreamParser(
      (event) => {
        heard = true;
        onEvent(event);
      },
      (ms) => {
        retry = ms;
      },
      lastEventId,
    );
    await readEventStream(response.body, parser);
    return 0; // the server closed it (it stopped, or restarted): reconnect
  };

  void (async () => {
    await refresh();
    let failures = 0; // connections in a row that gave nothing: the wait doubles with each
    while (!stopped) {
      let retryAfter = 0;
      try {
        retryAfter = await connect();
      } catch (cause) {
        if (stopped) return;
        report(new SubscribeError(`the event stream failed: ${String(cause)}`, 'stream', undefined, undefined, false, { cause }));
      }
      failures = heard ? 0 : failures + 1;
      if (stopped) return;
      const backoff = Math.min(retry * 2 ** Math.max(failures - 1, 0), Math.max(maxRetry, retry));
      await sleep(Math.max(retryAfter, backoff), signal);
    }
  })();

  return unsubscribe;
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) {
      resolve();
      return;
    }
    const done = (): void => {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
  });
}
