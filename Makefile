# hindsearch: every target works from a fresh clone with Go installed.
GO ?= go
BIN := bin/orchestrate
RECIPE ?= recipes/sim.yaml

.PHONY: all build demo bench bench-docs chaos golden real trackers router-check real-serve real-stop real-aftercut real-learn real-learn-serve real-learn-study test test-race test-short vet fmt fmt-check recipes-check ci clean

all: build

## build: compile the orchestrate binary into bin/
build:
	$(GO) build -o $(BIN) ./cmd/orchestrate

## demo: the whole HindSearch loop on the embedded default (no GPU, no servers)
demo:
	$(GO) run ./cmd/orchestrate run $(RECIPE) --overwrite

## bench: the scheduling benchmark on the simulator (docs/bench.md)
bench:
	$(GO) run ./cmd/orchestrate bench --json bench.json

## bench-docs: the whole bench, its figures written into README.md and docs/bench.md with the
## commit they were measured at (commit first: uncommitted code is marked -dirty)
bench-docs:
	$(GO) run ./cmd/orchestrate bench --json bench.json --docs README.md --docs docs/bench.md

## chaos: the sim recipe under heavy faults with kill -9 and --resume, compared with a clean run;
## then against one serve sim that outlives every kill, through vLLM's LoRA route and through
## SGLang with full weights on the FSDP-like trainer (one model per server), and through the
## Tinker sampling routes (policy.server tinker, sync.kind tinker)
chaos: build
	$(BIN) chaos $(RECIPE) --kills 4 --set train.steps=8 --set eval.every=4
	$(BIN) chaos $(RECIPE) --servers --kills 3 --set train.steps=6 --set eval.every=3 --set sim.trainer.backend=fsdp
	$(BIN) chaos $(RECIPE) --servers --kills 3 --set train.steps=6 --set eval.every=3 --set sim.trainer.backend=fsdp \
		--set trainer.lora_rank=0 --set sync.kind=sglang_disk --set policy.server=sglang --set policy.tokenize=local
	$(BIN) chaos $(RECIPE) --servers --kills 3 --set train.steps=6 --set eval.every=3 --set sim.trainer.backend=fsdp \
		--set policy.server=tinker --set sync.kind=tinker --set policy.tokenize=local

## real: the program against the real servers on this CPU (sim/real/README.md): pinned Python
## environments (uv, cached under ~/.cache/hindsearch/real), a tiny Qwen3 made here, SkyRL's
## Tinker API server and two vLLMs started on loopback, sim/real's tests, the servers stopped
real:
	bash sim/real/run.sh

## real-serve: the same servers, left running (source runs/real-servers/env; make real-stop ends them)
real-serve:
	bash sim/real/run.sh serve

## trackers: TensorBoard, W&B offline and MLflow output read back by the real libraries (pinned)
trackers:
	bash sim/real/run.sh trackers

real-stop:
	bash sim/real/run.sh stop

## router-check: the program behind a real vllm-router (pinned, sim/real/router) in front of two
## simulated vLLMs: batches equal to direct mode, each trajectory's requests on one replica
router-check:
	bash sim/real/run.sh router

## real-aftercut: what a real instruct model (SmolLM2-135M-Instruct on vLLM) writes after a cut <information> block
real-aftercut:
	bash sim/real/run.sh aftercut

## real-learn: a real model learns through the program on this CPU (sim/real/README.md, "A real
## model learns"): the units task and Qwen3-tiny-units made here, SkyRL and vLLM started, a GRPO
## and a hindsight arm of sim/real/learn.yaml run, and the target fails unless both learned
real-learn:
	bash sim/real/run.sh learn

## real-learn-serve: the same model and servers, left running (make real-stop ends them)
real-learn-serve:
	bash sim/real/run.sh learn-serve

## real-learn-study: grpo, hindsight and no-gold at five seeds (orchestrate study; hours, not in CI)
real-learn-study:
	bash sim/real/run.sh learn-study

## golden: the behaviour record a refactoring must leave unchanged (.ci/golden; --update rewrites it)
golden:
	bash .ci/golden

## test: the README's test command
test:
	$(GO) test ./...

## test-race: the tests under the race detector
test-race:
	$(GO) test -race ./...

## test-short: skip the slower training tests
test-short:
	$(GO) test -short ./...

vet:
	$(GO) vet ./...

fmt:
	gofmt -w $$(git ls-files '*.go')

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

## recipes-check: resolve and validate every shipped recipe
recipes-check:
	@for r in recipes/*.yaml; do echo "== $$r"; $(GO) run ./cmd/orchestrate recipe check $$r > /dev/null || exit 1; done

## ci: what .ci/run runs
ci: fmt-check vet test recipes-check

clean:
	rm -rf bin runs
