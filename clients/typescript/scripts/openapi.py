"""Print the OpenAPI document of `cw-middleware serve` (the generator's input), as `GET /openapi.json` serves it.

Run from clients/typescript by `npm run generate` (with the Python named by $PYTHON, default python3),
which writes it to openapi.json; tests/test_typescript_client.py checks the committed file against it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository's cw_middleware, installed or not

from cw_middleware._serve.openapi import openapi_document  # noqa: E402

if __name__ == "__main__":
    print(json.dumps(openapi_document(), indent=2, sort_keys=True))
