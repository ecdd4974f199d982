#!/usr/bin/env bash
# The separate venv bench/proxy_litellm.py runs LiteLLM's proxy from (never a test
# prerequisite): litellm[proxy] with uvloop, at VENV (default /work/venvs/litellm).
#   scripts/litellm-venv.sh [VENV]
# then: PYTHONPATH=. python bench/proxy_litellm.py --litellm-venv VENV
set -euo pipefail
VENV="${1:-${LITELLM_VENV:-/work/venvs/litellm}}"
python3 -m venv "$VENV"
"$VENV/bin/pip" install --quiet --upgrade pip
"$VENV/bin/pip" install --quiet 'litellm[proxy]' uvloop
"$VENV/bin/litellm" --version
