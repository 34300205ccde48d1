// cw-middleware-client: the generated read-back API (./generated/, by @hey-api/openapi-ts from openapi.json)
// and the hand-written subscribe() over the run's event stream.

export * from './generated/index.js';
export { client } from './generated/client.gen.js';
export { createClient, createConfig } from './generated/client/index.js';
export type { Auth, Client, Config, RequestResult } from './generated/client/index.js';
export * from './subscribe.js';
