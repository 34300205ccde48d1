"""Keep token counting offline: imported first by the package, before tiktoken or LiteLLM load.

tiktoken downloads its encodings on first use unless TIKTOKEN_CACHE_DIR holds
them; LiteLLM ships the files (cl100k_base, o200k_base, p50k_base) in
``litellm_core_utils/tokenizers``. LiteLLM also fetches its model-cost map at
import unless LITELLM_LOCAL_MODEL_COST_MAP is set. Both are set here without
importing LiteLLM (which takes seconds): the read side never needs it.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path


def litellm_tokenizers_dir() -> Path | None:
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "litellm_core_utils" / "tokenizers"
    return folder if folder.is_dir() else None


def configure_offline_environment() -> None:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    if "TIKTOKEN_CACHE_DIR" not in os.environ:
        folder = litellm_tokenizers_dir()
        if folder is not None:
            os.environ["TIKTOKEN_CACHE_DIR"] = str(folder)


configure_offline_environment()
