package org.edgenlp;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.atomic.AtomicReference;

/**
 * Plain-Java tests of the binding (no framework needed): runtime/tests/test_java.py runs it.
 *
 * <pre>
 * java -cp edgenlp.jar:edgenlp-tests.jar -Djava.library.path=DIR org.edgenlp.EdgeNlpSelfTest \
 *     BUNDLE TEXTS.txt [--expect STATUS PATH]... [--dynamic DYNAMIC_BUNDLE DYNAMIC_TEXTS.txt [NAME THRESHOLD KEEP STATIC]...]
 * </pre>
 *
 * Prints one JSON line per text of TEXTS.txt (classify results) and one "tokens" line on
 * stdout, "ok NAME" / "FAIL NAME: why" per check on stderr; exits 1 when a check failed.
 * Each "--expect STATUS PATH" asserts that opening PATH throws EdgeNlpException with STATUS.
 * "--dynamic" checks the dynamic calls on DYNAMIC_BUNDLE, classifies every line of
 * DYNAMIC_TEXTS.txt through its segments with each case's per-call settings (-1: the
 * instance's) and prints one "case" JSON line per text and case.
 */
public final class EdgeNlpSelfTest {
  private static int failures = 0;

  interface Check {
    void run() throws Exception;
  }

  private static void check(String name, Check body) {
    try {
      body.run();
      System.err.println("ok " + name);
    } catch (Throwable t) {
      failures++;
      System.err.println("FAIL " + name + ": " + t);
    }
  }

  private static void require(boolean condition, String what) {
    if (!condition) throw new AssertionError(what);
  }

  private static <T extends Throwable> T expectThrows(Class<T> type, Check body) throws Exception {
    try {
      body.run();
    } catch (Throwable t) {
      if (type.isInstance(t)) return type.cast(t);
      throw new AssertionError("expected " + type.getSimpleName() + ", got " + t, t);
    }
    throw new AssertionError("expected " + type.getSimpleName() + ", nothing was thrown");
  }

  private static void requireSame(Classification a, Classification b, float tol, String what) {
    require(a.index() == b.index() && a.label().equals(b.label()), what + ": labels differ " + a + " vs " + b);
    float[] pa = a.probabilities();
    float[] pb = b.probabilities();
    require(pa.length == pb.length, what + ": lengths differ");
    for (int i = 0; i < pa.length; i++) {
      require(Math.abs(pa[i] - pb[i]) <= tol, what + ": probabilities differ " + a + " vs " + b);
    }
  }

  static String json(String s) {
    StringBuilder b = new StringBuilder("\"");
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      if (c == '"' || c == '\\') {
        b.append('\\').append(c);
      } else if (c < 0x20) {
        b.append(String.format("\\u%04x", (int) c));
      } else {
        b.append(c);
      }
    }
    return b.append('"').toString();
  }

  public static void main(String[] args) throws Exception {
    String bundle = args[0];
    List<String> texts = Files.readAllLines(Paths.get(args[1]), StandardCharsets.UTF_8);
    String[] all = texts.toArray(new String[0]);
    List<String[]> expected = new ArrayList<>();
    int i0 = 2;
    for (; i0 + 2 < args.length && args[i0].equals("--expect"); i0 += 3) {
      expected.add(new String[] {args[i0 + 1], args[i0 + 2]});
    }
    final String dynamic = i0 + 2 < args.length && args[i0].equals("--dynamic") ? args[i0 + 1] : null;
    final String[] dynTexts = dynamic == null ? new String[0]
        : Files.readAllLines(Paths.get(args[i0 + 2]), StandardCharsets.UTF_8).toArray(new String[0]);
    final List<String[]> cases = new ArrayList<>();
    for (int i = i0 + 3; dynamic != null && i + 3 < args.length; i += 4) {
      cases.add(new String[] {args[i], args[i + 1], args[i + 2], args[i + 3]});
    }

    check("versions", () -> {
      require(EdgeNlp.libraryVersion().equals(EdgeNlp.VERSION),
          "library " + EdgeNlp.libraryVersion() + " vs binding " + EdgeNlp.VERSION);
      require(EdgeNlp.libraryAbiVersion() >= EdgeNlp.ABI_VERSION, "ABI " + EdgeNlp.libraryAbiVersion());
      require(EdgeNlp.bundleFormatVersion() >= 1, "bundle format " + EdgeNlp.bundleFormatVersion());
    });

    final AtomicReference<Classification[]> reference = new AtomicReference<>();
    check("classify, batch and try-with-resources", () -> {
      EdgeNlp kept;
      try (EdgeNlp nlp = EdgeNlp.open(bundle)) {
        kept = nlp;
        require(!nlp.labels().isEmpty(), "no labels");
        require(nlp.maxSeqLen() > 2, "maxSeqLen " + nlp.maxSeqLen());
        Classification[] batch = nlp.classifyBatch(all);
        require(batch.length == all.length, "batch length");
        for (int i = 0; i < all.length; i++) {
          requireSame(nlp.classify(all[i]), batch[i], 0f, "text " + i);
          float sum = 0;
          for (float p : batch[i].probabilities()) sum += p;
          require(Math.abs(sum - 1f) < 1e-4f, "probabilities sum to " + sum);
        }
        require(nlp.classifyBatch(new String[0]).length == 0, "empty batch");
        reference.set(batch);
        StringBuilder tokens = new StringBuilder("{\"tokens\": ");
        tokens.append(Arrays.toString(nlp.tokenize("Hello, world!"))).append('}');
        System.out.println(tokens);
        for (Classification c : batch) {
          StringBuilder line = new StringBuilder("{\"label\": ").append(json(c.label()));
          line.append(", \"index\": ").append(c.index()).append(", \"probabilities\": [");
          float[] p = c.probabilities();
          for (int j = 0; j < p.length; j++) line.append(j == 0 ? "" : ", ").append(Float.toString(p[j]));
          System.out.println(line.append("]}"));
        }
      }
      require(kept.isClosed(), "try-with-resources did not close");
    });

    check("threads", () -> {
      try (EdgeNlp nlp = EdgeNlp.open(bundle)) {
        nlp.setThreads(2);
        Classification[] again = nlp.classifyBatch(all);
        for (int i = 0; i < all.length; i++) requireSame(again[i], reference.get()[i], 1e-5f, "2 threads, text " + i);
        EdgeNlpException e = expectThrows(EdgeNlpException.class, () -> nlp.setThreads(0));
        require(e.status() == EdgeNlpException.Status.INVALID_ARGUMENT && e.getMessage().contains("threads"),
            "setThreads(0): " + e.status() + " " + e.getMessage());
        nlp.setThreads(1);
      }
    });

    check("one instance shared by threads, one per thread", () -> {
      final List<Throwable> errors = new ArrayList<>();
      try (EdgeNlp shared = EdgeNlp.open(bundle)) {
        List<Thread> threads = new ArrayList<>();
        for (int t = 0; t < 4; t++) {
          final boolean own = t % 2 == 1;
          threads.add(new Thread(() -> {
            try {
              EdgeNlp nlp = own ? EdgeNlp.open(bundle) : shared;
              try {
                for (int round = 0; round < 3; round++) {
                  for (int i = 0; i < all.length; i++) {
                    requireSame(nlp.classify(all[i]), reference.get()[i], 1e-5f, "thread text " + i);
                  }
                }
              } finally {
                if (own) nlp.close();
              }
            } catch (Throwable e) {
              synchronized (errors) {
                errors.add(e);
              }
            }
          }));
        }
        threads.add(new Thread(() -> {  // the process-wide thread count changes under them
          try {
            shared.setThreads(2);
            shared.setThreads(1);
          } catch (Throwable e) {
            synchronized (errors) {
              errors.add(e);
            }
          }
        }));
        for (Thread th : threads) th.start();
        for (Thread th : threads) th.join();
      }
      require(errors.isEmpty(), "thread errors: " + errors);
    });

    check("closed instance", () -> {
      EdgeNlp nlp = EdgeNlp.open(bundle);
      nlp.close();
      nlp.close();  // idempotent
      require(nlp.isClosed(), "not closed");
      expectThrows(IllegalStateException.class, () -> nlp.classify("x"));
      expectThrows(IllegalStateException.class, () -> nlp.classifyBatch(new String[] {"x"}));
      expectThrows(IllegalStateException.class, () -> nlp.tokenize("x"));
      expectThrows(IllegalStateException.class, () -> nlp.setThreads(1));
      require(nlp.labels().size() == reference.get()[0].probabilities().length, "labels survive close");
    });

    check("bad arguments", () -> {
      try (EdgeNlp nlp = EdgeNlp.open(bundle)) {
        expectThrows(NullPointerException.class, () -> nlp.classify(null));
        expectThrows(NullPointerException.class, () -> nlp.classifyBatch(new String[] {"a", null}));
        expectThrows(NullPointerException.class, () -> EdgeNlp.open((String) null));
        EdgeNlpException e = expectThrows(EdgeNlpException.class, () -> EdgeNlp.open(bundle, 1 << 20));
        require(e.status() == EdgeNlpException.Status.INVALID_ARGUMENT, "unknown flag: " + e.status());
        // A lone surrogate has no UTF-8 form: Java's encoder sends '?', which classifies.
        require(nlp.classify("\uD800 broken").probabilities().length == nlp.labels().size(), "surrogate");
        // still usable after the failures
        requireSame(nlp.classify(all[0]), reference.get()[0], 1e-5f, "after errors");
      }
    });

    check("dynamic calls on a bundle without segments", () -> {
      try (EdgeNlp nlp = EdgeNlp.open(bundle)) {
        require(nlp.dynamicLayers() == 0, "dynamicLayers " + nlp.dynamicLayers());
        for (int i = 0; i < all.length; i++) {
          Classification c = nlp.classifyDynamic(all[i]);
          requireSame(c, reference.get()[i], 1e-5f, "classifyDynamic = classify, text " + i);
          require(c.exitLayer() == 0 && c.tokensKept().length == 0, "static bundle: " + c);
        }
        for (Check bad : new Check[] {() -> nlp.setExitThreshold(0.5), () -> nlp.setKeepRatio(0.5),
            () -> nlp.setStatic(true), () -> nlp.classifyDynamic(all[0], 0.5, EdgeNlp.DEFAULT, EdgeNlp.DEFAULT)}) {
          EdgeNlpException e = expectThrows(EdgeNlpException.class, bad);
          require(e.status() == EdgeNlpException.Status.NOT_DYNAMIC, "static bundle: " + e.status() + " " + e);
        }
      }
    });

    if (dynamic != null) {
      check("dynamic bundle: settings, static mode and errors", () -> {
        try (EdgeNlp nlp = EdgeNlp.open(dynamic)) {
          require(nlp.dynamicLayers() > 0, "dynamicLayers " + nlp.dynamicLayers());
          for (String text : dynTexts) {
            Classification full = nlp.classifyDynamic(text, EdgeNlp.DEFAULT, EdgeNlp.DEFAULT, 1);
            requireSame(full, nlp.classify(text), 1e-5f, "static mode = classify");
            require(full.exitLayer() == nlp.dynamicLayers(), "static mode exits at " + full.exitLayer());
            // the handle's settings are what a call without overrides uses
            nlp.setStatic(true);
            requireSame(nlp.classifyDynamic(text), full, 0f, "setStatic(true)");
            nlp.setStatic(false);
            nlp.setExitThreshold(0.0);  // maxprob 0: the first exit always fires
            Classification first = nlp.classifyDynamic(text);
            requireSame(first, nlp.classifyDynamic(text, 0.0, EdgeNlp.DEFAULT, EdgeNlp.DEFAULT), 0f, "per call");
            require(first.exitLayer() == 1 && first.tokensKept().length == 1, "threshold 0: " + first);
            nlp.setExitThreshold(EdgeNlp.DEFAULT);
            int[] kept = nlp.classifyDynamic(text).tokensKept();
            for (int j = 1; j < kept.length; j++) require(kept[j] <= kept[j - 1], "tokens grew: " + Arrays.toString(kept));
          }
          int before = nlp.classifyDynamic(dynTexts[0]).exitLayer();
          for (double bad : new double[] {1.5, -0.5, Double.NaN}) {
            EdgeNlpException e = expectThrows(EdgeNlpException.class, () -> nlp.setExitThreshold(bad));
            require(e.status() == EdgeNlpException.Status.INVALID_ARGUMENT && e.getMessage().contains("threshold"),
                "threshold " + bad + ": " + e.status() + " " + e.getMessage());
          }
          EdgeNlpException e = expectThrows(EdgeNlpException.class, () -> nlp.setKeepRatio(0.0));
          require(e.status() == EdgeNlpException.Status.INVALID_ARGUMENT && e.getMessage().contains("keep"),
              "keep 0: " + e.status() + " " + e.getMessage());
          e = expectThrows(EdgeNlpException.class, () -> nlp.classifyDynamic(dynTexts[0], EdgeNlp.DEFAULT, 2.0, 0));
          require(e.status() == EdgeNlpException.Status.INVALID_ARGUMENT, "keep 2 per call: " + e.status());
          require(nlp.classifyDynamic(dynTexts[0]).exitLayer() == before, "a refused setting changed the instance");
          expectThrows(NullPointerException.class, () -> nlp.classifyDynamic(null));
        }
        EdgeNlp closed = EdgeNlp.open(dynamic);
        closed.close();
        expectThrows(IllegalStateException.class, () -> closed.classifyDynamic("x"));
        expectThrows(IllegalStateException.class, () -> closed.setExitThreshold(0.5));
      });

      check("dynamic bundle: cases", () -> {
        try (EdgeNlp nlp = EdgeNlp.open(dynamic)) {
          for (String[] c : cases) {
            for (int i = 0; i < dynTexts.length; i++) {
              Classification r = nlp.classifyDynamic(dynTexts[i], Double.parseDouble(c[1]), Double.parseDouble(c[2]),
                  Integer.parseInt(c[3]));
              StringBuilder line = new StringBuilder("{\"case\": ").append(json(c[0]));
              line.append(", \"text\": ").append(i).append(", \"index\": ").append(r.index());
              line.append(", \"exit_layer\": ").append(r.exitLayer());
              line.append(", \"tokens_kept\": ").append(Arrays.toString(r.tokensKept())).append(", \"probabilities\": [");
              float[] p = r.probabilities();
              for (int j = 0; j < p.length; j++) line.append(j == 0 ? "" : ", ").append(Float.toString(p[j]));
              System.out.println(line.append("]}"));
            }
          }
        }
      });
    }

    for (String[] e : expected) {
      final EdgeNlpException.Status want = EdgeNlpException.Status.valueOf(e[0]);
      final String path = e[1];
      check("open " + want + " " + path, () -> {
        EdgeNlpException ex = expectThrows(EdgeNlpException.class, () -> EdgeNlp.open(path).close());
        require(ex.status() == want, "status " + ex.status() + ": " + ex.getMessage());
        require(ex.isBundleError(), "not a bundle error: " + ex.status());
        String m = ex.getMessage();
        require(!m.isEmpty() && m.indexOf('\n') < 0, "message: " + m);
        System.out.println("{\"error\": " + json(want.name()) + ", \"message\": " + json(m) + "}");
      });
    }

    System.err.println(failures == 0 ? "all checks passed" : failures + " checks failed");
    System.exit(failures == 0 ? 0 : 1);
  }
}
