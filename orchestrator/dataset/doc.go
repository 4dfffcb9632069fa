// Package dataset reads the questions a run trains and evaluates on
// (FlashRAG JSONL and Search-R1's parquet) and the passage corpus, and
// answers the questions a run asks of them: the evaluation sets of a
// recipe, the training questions left after excluding them, and the gold
// answers the embedded simulator reads.
package dataset
