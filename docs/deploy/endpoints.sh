# shellcheck shell=bash
# write_endpoints FILE PORT GPUS HOST...: writes FILE in llm-d's
# file-discovery schema (what policy.endpoints_file reads), listing one
# policy server per GPU on each host at ports PORT, PORT+1, ...,
# atomically (a temporary file renamed over it), so that a run reading it
# never sees half a file. Sourced by hindsearch.sbatch and skypilot.yaml.
write_endpoints() {
	local file=$1 port=$2 gpus=$3 host g tmp
	shift 3
	[ $# -gt 0 ] || { echo "write_endpoints: no host" >&2; return 2; }
	tmp=$(mktemp "$file.XXXXXX")
	{
		echo "endpoints:"
		for host in "$@"; do
			for ((g = 0; g < gpus; g++)); do
				printf '  - name: "%s-gpu%d"\n    address: "%s"\n    port: "%d"\n    labels: {node: "%s", gpu: "%d"}\n' \
					"$host" "$g" "$host" $((port + g)) "$host" "$g"
			done
		done
	} >"$tmp"
	mv -f "$tmp" "$file"
}

# wait_healthy URL...: waits until every policy server answers GET /health
# (vLLM and SGLang both serve it), at most HINDSEARCH_WAIT seconds (1800).
wait_healthy() {
	local u deadline=$((SECONDS + ${HINDSEARCH_WAIT:-1800}))
	for u in "$@"; do
		until curl -sf -o /dev/null "$u/health"; do
			[ $SECONDS -lt $deadline ] || { echo "wait_healthy: $u did not answer /health" >&2; return 1; }
			sleep 5
		done
	done
}
