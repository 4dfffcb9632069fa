#!/usr/bin/env bash
# Lucene 8 (the engine Pyserini ran on) and the embedded retriever's index
# side by side on one generated corpus, the same questions, top 3, one
# after the other in one run (docs/bench.md, "Lucene, Pyserini's engine").
# A measuring tool, not part of hindsearch: it needs a JDK 11+ and
# Debian's Lucene 8 jars (apt-get install default-jdk-headless liblucene8-java).
#
#   docs/research/lucene/run.sh PASSAGES DIR [SECONDS]
#
# DIR keeps the corpus and every index; a second run reuses them.
# STOPS picks the stop lists measured (default both: "lucene" is Lucene's
# 33 words, as Pyserini runs; "snowball" is the embedded retriever's 174).
set -euo pipefail
n=${1:?passages} dir=${2:?dir} secs=${3:-15}
jars=/usr/share/java/lucene-core-8.7.0.jar:/usr/share/java/lucene-analyzers-common-8.7.0.jar
for j in ${jars//:/ }; do
  test -r "$j" || { echo "run.sh: $j missing: apt-get install liblucene8-java default-jdk-headless" >&2; exit 2; }
done
root=$(cd "$(dirname "$0")/../../.." && pwd)
cd "$root"
mkdir -p "$dir"
go build -o "$dir/orchestrate" ./cmd/orchestrate
go run ./docs/research/lucene/stopwords > "$dir/snowball-en-stop.txt"
bench=docs/research/lucene/LuceneBM25Bench.java
qs=(recipes/data/qa/*.jsonl)
# The embedded index first: it generates the corpus (and builds its index)
# when DIR has none, then measures (the inproc-1thread line is one core's).
"$dir/orchestrate" bench --only retrieval --passages "$n" --engines static --dir "$dir" --seconds "$secs"
corpus=$dir/corpus-$n.jsonl
for stop in ${STOPS:-lucene snowball}; do
  opt=(-Xmx6g)
  if [ "$stop" = snowball ]; then opt+=(-Dstop="$dir/snowball-en-stop.txt"); fi
  idx=$dir/lucene-$stop
  if [ ! -d "$idx" ]; then
    rm -rf "$idx.partial"
    java "${opt[@]}" -cp "$jars" "$bench" index "$corpus" "$idx.partial" 2
    mv "$idx.partial" "$idx"
  fi
  for threads in 1 2; do
    for mode in pyserini topk; do
      echo -n "stop words: $stop; "
      java "${opt[@]}" -cp "$jars" "$bench" search "$idx" "$secs" "$mode" "$threads" "${qs[@]}" 2>/dev/null
    done
  done
done
