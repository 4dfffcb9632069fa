// LuceneBM25Bench: the field's reference engine (Lucene 8, as Pyserini and
// Anserini ran it for years) on the same generated corpus and questions as
// `orchestrate bench --only retrieval`, for the side-by-side figures in
// docs/bench.md. It is a measuring tool, not part of hindsearch (which is
// pure Go): run it as a single-file Java program (docs/bench.md, "Lucene").
//
//   java -Xmx4g -cp '/usr/share/java/lucene-core-8.7.0.jar:/usr/share/java/lucene-analyzers-common-8.7.0.jar' \
//     LuceneBM25Bench.java index CORPUS.jsonl INDEX_DIR [THREADS]
//   java ... LuceneBM25Bench.java search INDEX_DIR SECONDS MODE THREADS QUESTIONS.jsonl...
//
// Indexing follows Pyserini's defaults: Lucene's EnglishAnalyzer (standard
// tokenizer, possessives, lower case, Lucene's 33 stop words, Porter), BM25
// with k1 0.9 and b 0.4, the passage id as a string with doc values, the
// contents indexed (not stored), the index merged into one segment (as
// Anserini's -optimize). A question becomes Anserini's bag-of-words query:
// a SHOULD clause per distinct analysed term, boosted by its count.
// MODE "pyserini" asks for the top 3 sorted by score then id
// (Anserini's SimpleSearcher: searcher.search(query, k,
// BREAK_SCORE_TIES_BY_DOCID, true)); MODE "topk" asks for the plain top 3
// (searcher.search(query, 3)), which lets Lucene skip with block-max WAND.
// THREADS searchers each take the next question; the figures are queries/s
// over SECONDS (every question at least once) and a query's p50 and p99.
// With -Dstop=FILE (Snowball's format: a word per line, "|" starts a
// comment) both commands use that stop list instead of Lucene's 33 words,
// so that the analyser's only difference from hindsearch's is gone (give
// it Snowball's English list, which hindsearch uses: docs/retrieval.md).
import java.io.BufferedReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.lucene.analysis.Analyzer;
import org.apache.lucene.analysis.CharArraySet;
import org.apache.lucene.analysis.TokenStream;
import org.apache.lucene.analysis.en.EnglishAnalyzer;
import org.apache.lucene.analysis.tokenattributes.CharTermAttribute;
import org.apache.lucene.document.Document;
import org.apache.lucene.document.Field;
import org.apache.lucene.document.SortedDocValuesField;
import org.apache.lucene.document.StringField;
import org.apache.lucene.document.TextField;
import org.apache.lucene.index.DirectoryReader;
import org.apache.lucene.index.IndexWriter;
import org.apache.lucene.index.IndexWriterConfig;
import org.apache.lucene.index.Term;
import org.apache.lucene.search.BooleanClause;
import org.apache.lucene.search.BooleanQuery;
import org.apache.lucene.search.BoostQuery;
import org.apache.lucene.search.IndexSearcher;
import org.apache.lucene.search.Query;
import org.apache.lucene.search.Sort;
import org.apache.lucene.search.SortField;
import org.apache.lucene.search.TermQuery;
import org.apache.lucene.search.similarities.BM25Similarity;
import org.apache.lucene.store.FSDirectory;
import org.apache.lucene.util.BytesRef;

public class LuceneBM25Bench {
  static final BM25Similarity SIM = new BM25Similarity(0.9f, 0.4f);

  public static void main(String[] args) throws Exception {
    if (args.length >= 3 && args[0].equals("index")) {
      index(Paths.get(args[1]), Paths.get(args[2]), args.length > 3 ? Integer.parseInt(args[3]) : 2);
    } else if (args.length >= 6 && args[0].equals("search")) {
      search(Paths.get(args[1]), Double.parseDouble(args[2]), args[3], Integer.parseInt(args[4]),
          Arrays.copyOfRange(args, 5, args.length));
    } else {
      System.err.println("usage: index CORPUS INDEX_DIR [THREADS] | search INDEX_DIR SECONDS pyserini|topk THREADS QUESTIONS...");
      System.exit(2);
    }
  }

  static void index(Path corpus, Path dir, int threads) throws Exception {
    long t0 = System.nanoTime();
    IndexWriterConfig cfg = new IndexWriterConfig(analyzer());
    cfg.setSimilarity(SIM);
    cfg.setRAMBufferSizeMB(1024);
    cfg.setOpenMode(IndexWriterConfig.OpenMode.CREATE);
    AtomicLong n = new AtomicLong();
    try (IndexWriter w = new IndexWriter(FSDirectory.open(dir), cfg);
         BufferedReader r = Files.newBufferedReader(corpus, StandardCharsets.UTF_8)) {
      Thread[] ts = new Thread[threads];
      for (int t = 0; t < threads; t++) {
        ts[t] = new Thread(() -> {
          try {
            while (true) {
              String line;
              synchronized (r) {
                line = r.readLine();
              }
              if (line == null) return;
              if (line.isBlank()) continue;
              Map<String, String> f = fields(line);
              Document d = new Document();
              d.add(new StringField("id", f.get("id"), Field.Store.YES));
              d.add(new SortedDocValuesField("id", new BytesRef(f.get("id"))));
              d.add(new TextField("contents", f.get("contents"), Field.Store.NO));
              w.addDocument(d);
              long k = n.incrementAndGet();
              if (k % 1_000_000 == 0) System.err.printf("indexed %d passages, %.0f s%n", k, (System.nanoTime() - t0) / 1e9);
            }
          } catch (Exception e) {
            throw new RuntimeException(e);
          }
        });
        ts[t].start();
      }
      for (Thread t : ts) t.join();
      double added = (System.nanoTime() - t0) / 1e9;
      w.forceMerge(1);
      w.commit();
      double total = (System.nanoTime() - t0) / 1e9;
      long bytes = 0;
      try (var s = Files.list(dir)) {
        for (Path p : (Iterable<Path>) s::iterator) bytes += Files.size(p);
      }
      System.out.printf("lucene index: %d passages, added in %.1f s, merged into one segment by %.1f s (%.0f passages/s), %.1f MB%n",
          n.get(), added, total, n.get() / total, bytes / 1048576.0);
    }
  }

  static void search(Path dir, double seconds, String mode, int threads, String[] files) throws Exception {
    List<String> qs = new ArrayList<>();
    for (String f : files) {
      for (String line : Files.readAllLines(Paths.get(f), StandardCharsets.UTF_8)) {
        if (!line.isBlank()) qs.add(fields(line).get("question"));
      }
    }
    Analyzer an = analyzer();
    Query[] queries = new Query[qs.size()];
    for (int i = 0; i < queries.length; i++) queries[i] = bagOfWords(an, qs.get(i));
    IndexSearcher s = new IndexSearcher(DirectoryReader.open(FSDirectory.open(dir)));
    s.setSimilarity(SIM);
    Sort ties = new Sort(SortField.FIELD_SCORE, new SortField("id", SortField.Type.STRING));
    // Warm up: every question once, untimed (the JIT, the page cache).
    for (Query q : queries) run(s, q, mode, ties);
    AtomicLong next = new AtomicLong();
    long deadline = System.nanoTime() + (long) (seconds * 1e9);
    List<Double> lat = new ArrayList<>();
    long t0 = System.nanoTime();
    Thread[] ts = new Thread[threads];
    for (int t = 0; t < threads; t++) {
      ts[t] = new Thread(() -> {
        List<Double> mine = new ArrayList<>();
        try {
          while (true) {
            long i = next.getAndIncrement();
            if (i >= queries.length && System.nanoTime() > deadline) break;
            long q0 = System.nanoTime();
            run(s, queries[(int) (i % queries.length)], mode, ties);
            mine.add((System.nanoTime() - q0) / 1e6);
          }
        } catch (Exception e) {
          throw new RuntimeException(e);
        }
        synchronized (lat) {
          lat.addAll(mine);
        }
      });
      ts[t].start();
    }
    for (Thread t : ts) t.join();
    double wall = (System.nanoTime() - t0) / 1e9;
    lat.sort(null);
    System.out.printf("lucene search (%s, %d thread%s, top 3): %.1f queries/s, a query p50 %.2f ms, p99 %.2f ms (%d queries in %.1f s)%n",
        mode, threads, threads == 1 ? "" : "s", lat.size() / wall, lat.get(lat.size() / 2),
        lat.get(Math.min(lat.size() - 1, lat.size() * 99 / 100)), lat.size(), wall);
  }

  // analyzer is Lucene's EnglishAnalyzer, with the stop list of -Dstop
  // when set.
  static Analyzer analyzer() throws Exception {
    String f = System.getProperty("stop");
    if (f == null) return new EnglishAnalyzer();
    List<String> words = new ArrayList<>();
    for (String line : Files.readAllLines(Paths.get(f), StandardCharsets.UTF_8)) {
      String w = line.split("\\|", 2)[0].trim();
      if (!w.isEmpty()) words.add(w);
    }
    System.err.printf("stop list: %d words from %s%n", words.size(), f);
    return new EnglishAnalyzer(new CharArraySet(words, false));
  }

  static void run(IndexSearcher s, Query q, String mode, Sort ties) throws Exception {
    if (mode.equals("pyserini")) {
      s.search(q, 3, ties, true);
    } else {
      s.search(q, 3);
    }
  }

  // Anserini's BagOfWordsQueryGenerator: a SHOULD clause per distinct
  // analysed term, boosted by how often the query has it.
  static Query bagOfWords(Analyzer an, String text) throws Exception {
    Map<String, Integer> count = new LinkedHashMap<>();
    try (TokenStream ts = an.tokenStream("contents", text)) {
      CharTermAttribute term = ts.addAttribute(CharTermAttribute.class);
      ts.reset();
      while (ts.incrementToken()) count.merge(term.toString(), 1, Integer::sum);
      ts.end();
    }
    BooleanQuery.Builder b = new BooleanQuery.Builder();
    for (Map.Entry<String, Integer> e : count.entrySet()) {
      b.add(new BoostQuery(new TermQuery(new Term("contents", e.getKey())), e.getValue()), BooleanClause.Occur.SHOULD);
    }
    return b.build();
  }

  // fields reads the top-level string fields of one flat JSON object line.
  static Map<String, String> fields(String line) {
    Map<String, String> out = new LinkedHashMap<>();
    int i = 0;
    while (true) {
      int k = line.indexOf('"', i);
      if (k < 0) return out;
      StringBuilder key = new StringBuilder();
      i = string(line, k, key);
      while (i < line.length() && (line.charAt(i) == ' ' || line.charAt(i) == ':')) i++;
      if (i < line.length() && line.charAt(i) == '"') {
        StringBuilder val = new StringBuilder();
        i = string(line, i, val);
        out.put(key.toString(), val.toString());
      } else {
        // A value that is not a string (a list, a number): skip to the next field.
        int depth = 0;
        for (; i < line.length(); i++) {
          char c = line.charAt(i);
          if (c == '"') i = string(line, i, new StringBuilder()) - 1;
          else if (c == '[' || c == '{') depth++;
          else if (c == ']' || c == '}') depth--;
          else if (c == ',' && depth == 0) break;
        }
      }
    }
  }

  // string decodes the JSON string starting at line[at] (its opening quote)
  // into sb and returns the index after its closing quote.
  static int string(String line, int at, StringBuilder sb) {
    int i = at + 1;
    while (i < line.length()) {
      char c = line.charAt(i++);
      if (c == '"') return i;
      if (c != '\\') {
        sb.append(c);
        continue;
      }
      char e = line.charAt(i++);
      switch (e) {
        case 'n': sb.append('\n'); break;
        case 't': sb.append('\t'); break;
        case 'r': sb.append('\r'); break;
        case 'b': sb.append('\b'); break;
        case 'f': sb.append('\f'); break;
        case 'u': sb.append((char) Integer.parseInt(line.substring(i, i + 4), 16)); i += 4; break;
        default: sb.append(e);
      }
    }
    throw new IllegalArgumentException("unterminated string");
  }
}
