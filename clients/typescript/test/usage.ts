// A consumer of the built package (dist/*.d.ts), type-checked by `npm run typecheck` (never run):
// the types are real ones, and wrong uses do not compile.
import {
  createClient,
  getStageContextWindow,
  getStageHistory,
  subscribe,
  type StageContextWindow,
  type StageSummary,
  type SubscribeError,
} from '../dist/index.js';

const client = createClient({ baseUrl: 'http://127.0.0.1:8321', auth: () => 'token' });

export async function latest(run: string, stage: string): Promise<number | null | undefined> {
  const { data, error } = await getStageContextWindow({ client, path: { run_id: run, stage_id: stage } });
  if (error) {
    const code: string = error.error.code;
    throw new Error(code);
  }
  const window: StageContextWindow | undefined = data;
  return window?.input_tokens;
}

export async function wrong(run: string): Promise<void> {
  // @ts-expect-error stage_id is a required path parameter
  await getStageContextWindow({ client, path: { run_id: run } });
  // @ts-expect-error limit is a number
  await getStageHistory({ client, path: { run_id: run, stage_id: 's' }, query: { limit: 'ten' } });
  const { data } = await getStageContextWindow({ client, path: { run_id: run, stage_id: 's' }, throwOnError: true });
  // @ts-expect-error input_tokens may be null
  const tokens: number = data.input_tokens;
  // @ts-expect-error staleness is 'live' or 'stored'
  const staleness: StageSummary['staleness'] = 'fresh';
  void tokens;
  void staleness;
}

export const stop: () => void = subscribe('http://127.0.0.1:8321', 'run', 'stage', (window: StageContextWindow) => {
  const calls: number | null | undefined = window.stage_totals?.calls;
  void calls;
}, { token: 'token', onError: (error: SubscribeError) => void error.fatal });
