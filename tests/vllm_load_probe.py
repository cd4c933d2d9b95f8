"""Run by the serve environment's python: load each checkpoint with vLLM's engine, generate a token.

    .venv-serve/bin/python tests/vllm_load_probe.py DIR [DIR ...]

One process for all checkpoints (vLLM imports once, ~15 s on 2 cores; a load then takes seconds),
so a test can show every scheme loads and runs in the real engine without a `vllm serve` start
(~1 min each) per scheme. Prints one JSON line per checkpoint: ok, the quantization vLLM resolved,
or the error it raised.
"""

from __future__ import annotations

import gc
import json
import os
import sys


def main(paths: list[str]) -> None:
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine in this process
    from vllm import LLM, SamplingParams

    for path in paths:
        record: dict[str, object] = {"path": path}
        llm = None
        try:
            llm = LLM(
                model=path,
                dtype="bfloat16",
                enforce_eager=True,
                max_model_len=256,
                max_num_seqs=2,
                kv_cache_memory_bytes=64 * 2**20,
                seed=0,
            )
            # no progress bar: with TQDM_DISABLE set, vLLM 0.32 divides by its zero elapsed time
            params = SamplingParams(max_tokens=2, temperature=0)
            out = llm.generate(["대한민국은 민주공화국이다."], params, use_tqdm=False)
            quantization = llm.llm_engine.vllm_config.model_config.quantization
            record |= {"ok": True, "tokens": len(out[0].outputs[0].token_ids), "quantization": quantization}
        except Exception as exc:  # the engine's own refusal is the finding
            record |= {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:400]}
        # An engine that failed mid-generation must be torn down before the next one starts: torn
        # down later, it takes the next engine's process groups with it.
        del llm
        gc.collect()
        sys.stdout.write(json.dumps(record) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1:])
