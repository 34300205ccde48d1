// @hey-api/openapi-ts: openapi.json (written by `npm run openapi` from the Python package) -> src/generated/.
// Everything under src/generated/ is the generator's output: never edit it by hand, run `npm run generate`.
import { defineConfig } from '@hey-api/openapi-ts';

export default defineConfig({
  input: './openapi.json',
  output: {
    path: './src/generated',
    clean: true,
  },
  plugins: ['@hey-api/typescript', '@hey-api/sdk', '@hey-api/client-fetch'],
});
