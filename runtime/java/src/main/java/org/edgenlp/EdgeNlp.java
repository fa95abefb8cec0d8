package org.edgenlp;

import java.io.File;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.locks.ReentrantReadWriteLock;

/**
 * An open edgenlp bundle: text in, label out, on the native runtime (libedgenlp: WordPiece
 * tokenizer + ExecuTorch program).
 *
 * <pre>{@code
 * try (EdgeNlp nlp = EdgeNlp.open("/data/local/tmp/minilm-sst2")) {
 *   Classification c = nlp.classify("a gripping, funny film");
 *   System.out.println(c.label() + " " + c.probability());
 * }
 * }</pre>
 *
 * <p>Threads: every method of one instance is synchronized, so an instance may be shared
 * between threads (calls on it run one at a time); use one instance per thread for parallel
 * classification. {@link #setThreads} changes ExecuTorch's process-wide worker pool and waits
 * until no instance is inside a call.
 *
 * <p>Errors: a failing call throws {@link EdgeNlpException} with the C API's status and the
 * handle's message. Any call on a closed instance throws {@link IllegalStateException}.
 *
 * <p>The native library {@code libedgenlp_jni.so} is loaded with {@code
 * System.loadLibrary("edgenlp_jni")}, or from the path in the system property {@code
 * edgenlp.jni.library} when set; it needs {@code libedgenlp.so} and the ExecuTorch libraries
 * beside it.
 */
public final class EdgeNlp implements AutoCloseable {
  /** The release this binding belongs to; equals the C library's version it was built with. */
  public static final String VERSION = "0.3.0";
  /** The C ABI level (EDGENLP_ABI_VERSION) this binding was built with; older libraries are refused. */
  public static final int ABI_VERSION = 4;

  /** Open flag: do not check the sha256 of the bundle files (EDGENLP_OPEN_SKIP_VERIFY). */
  public static final int OPEN_SKIP_VERIFY = 1;
  /** Open flag: load every sequence-length bucket at open (EDGENLP_OPEN_LOAD_ALL_METHODS). */
  public static final int OPEN_LOAD_ALL_METHODS = 2;
  /** Open flag: pack weights per bucket method (EDGENLP_OPEN_NO_WEIGHT_CACHE). */
  public static final int OPEN_NO_WEIGHT_CACHE = 4;

  /**
   * "Not set here" for the dynamic settings (EDGENLP_DEFAULT): given to a setter, back to the
   * bundle's own value; given to {@link #classifyDynamic(String, double, double, int)}, this
   * instance's setting.
   */
  public static final int DEFAULT = -1;

  // Readers: calls that may run ExecuTorch. Writer: setThreads (process-wide thread pool).
  private static final ReentrantReadWriteLock POOL = new ReentrantReadWriteLock();

  static {
    String path = System.getProperty("edgenlp.jni.library");
    if (path != null && !path.isEmpty()) {
      System.load(path);
    } else {
      System.loadLibrary("edgenlp_jni");
    }
    int abi = nativeAbiVersion();
    if (abi < ABI_VERSION) {
      throw new UnsatisfiedLinkError(
          "libedgenlp ABI level " + abi + " (version " + formatVersion(nativeVersion())
              + ") is older than this binding needs (" + ABI_VERSION + ", version " + VERSION + ")");
    }
  }

  private long handle;
  private final List<String> labels;
  private final int maxSeqLen;
  private final int dynamicLayers;

  private EdgeNlp(long handle) {
    this.handle = handle;
    int n = nativeNumLabels(handle);
    List<String> names = new ArrayList<>(n);
    for (int i = 0; i < n; i++) names.add(utf8(nativeLabelName(handle, i)));
    this.labels = Collections.unmodifiableList(names);
    this.maxSeqLen = nativeMaxSeqLen(handle);
    int[] layers = new int[1];
    this.dynamicLayers = nativeDynamicLayers(handle, layers) == 0 ? layers[0] : 0;
  }

  /** Open a bundle directory (verifying every file it reads). */
  public static EdgeNlp open(String bundleDir) throws EdgeNlpException {
    return open(bundleDir, 0);
  }

  /** Open a bundle directory. */
  public static EdgeNlp open(File bundleDir) throws EdgeNlpException {
    return open(bundleDir.getPath(), 0);
  }

  /**
   * Open a bundle directory with {@code OPEN_*} flags OR-ed together.
   *
   * @throws EdgeNlpException when the directory is not a readable, intact bundle of a format this
   *     library reads (status IO, BUNDLE, CHECKSUM, MODEL, BUNDLE_FORMAT) or a flag is unknown
   */
  public static EdgeNlp open(String bundleDir, int flags) throws EdgeNlpException {
    if (bundleDir == null) throw new NullPointerException("bundleDir");
    long[] out = new long[1];
    int status;
    POOL.readLock().lock();
    try {
      status = nativeOpen(bundleDir.getBytes(StandardCharsets.UTF_8), flags, out);
    } finally {
      POOL.readLock().unlock();
    }
    if (status != 0) {
      String message = out[0] != 0 ? utf8(nativeLastError(out[0])) : "out of memory";
      nativeClose(out[0]);
      throw new EdgeNlpException(status, message);
    }
    return new EdgeNlp(out[0]);
  }

  /** Label names, index = logit position. */
  public List<String> labels() {
    return labels;
  }

  /** The bundle's max_seq_len: longer texts are truncated to it. */
  public int maxSeqLen() {
    return maxSeqLen;
  }

  /** Classify one text. */
  public synchronized Classification classify(String text) throws EdgeNlpException {
    return classifyBatch(new String[] {text})[0];
  }

  /** Classify several texts; result i belongs to texts[i]. Stops at the first failing text. */
  public synchronized Classification[] classifyBatch(String[] texts) throws EdgeNlpException {
    long h = live();
    byte[][] encoded = new byte[texts.length][];
    for (int i = 0; i < texts.length; i++) {
      if (texts[i] == null) throw new NullPointerException("texts[" + i + "]");
      encoded[i] = texts[i].getBytes(StandardCharsets.UTF_8);
    }
    int k = labels.size();
    float[] probs = new float[texts.length * k];
    int[] best = new int[texts.length];
    int status;
    POOL.readLock().lock();
    try {
      status = nativeClassify(h, encoded, probs, best);
    } finally {
      POOL.readLock().unlock();
    }
    check(h, status);
    Classification[] out = new Classification[texts.length];
    for (int i = 0; i < texts.length; i++) {
      float[] row = new float[k];
      System.arraycopy(probs, i * k, row, 0, k);
      out[i] = new Classification(labels.get(best[i]), best[i], row);
    }
    return out;
  }

  /**
   * The number of encoder layers of a dynamic bundle (one with segments, made by {@code edgenlp
   * dynamic} and {@code edgenlp export}), or 0 for a bundle without segments.
   */
  public int dynamicLayers() {
    return dynamicLayers;
  }

  /**
   * Classify one text through the segments of a dynamic bundle with this instance's settings:
   * it stops at the first exit whose rule fires and drops the tokens the bundle's token pruning
   * drops. {@link Classification#exitLayer()} and {@link Classification#tokensKept()} say what
   * ran. On a bundle without segments this is {@link #classify} (exitLayer() 0).
   */
  public synchronized Classification classifyDynamic(String text) throws EdgeNlpException {
    return classifyDynamic(text, DEFAULT, DEFAULT, DEFAULT);
  }

  /**
   * {@link #classifyDynamic(String)} with this call's settings ({@link #DEFAULT}: the
   * instance's): the exit threshold (maxprob and entropy in [0, 1], patience a count of
   * agreeing exits), the keep ratio in (0, 1] (keep that share of the tokens after each token
   * layer instead of the bundle's token pruning), and static mode (1: every layer on every
   * token, 0: the segments).
   *
   * @throws EdgeNlpException INVALID_ARGUMENT for a value out of its range, NOT_DYNAMIC for an
   *     option the bundle cannot honour (no segments, no early exit, no token layers)
   */
  public synchronized Classification classifyDynamic(String text, double exitThreshold, double keep, int staticMode)
      throws EdgeNlpException {
    long h = live();
    if (text == null) throw new NullPointerException("text");
    int k = labels.size();
    float[] probs = new float[k];
    int[] labelAndExit = new int[2];
    int[] tokens = new int[dynamicLayers];
    int status;
    POOL.readLock().lock();
    try {
      status = nativeClassifyDynamic(h, text.getBytes(StandardCharsets.UTF_8), exitThreshold, keep, staticMode,
          probs, labelAndExit, tokens);
    } finally {
      POOL.readLock().unlock();
    }
    check(h, status);
    int best = labelAndExit[0];
    int exit = labelAndExit[1];
    int[] ran = new int[Math.max(0, Math.min(exit, tokens.length))];
    System.arraycopy(tokens, 0, ran, 0, ran.length);
    return new Classification(labels.get(best), best, probs, exit, ran);
  }

  /**
   * This instance's exit threshold for later dynamic calls ({@link #DEFAULT}: the bundle's).
   *
   * @throws EdgeNlpException INVALID_ARGUMENT out of the rule's range (nothing changes),
   *     NOT_DYNAMIC on a bundle without segments or without an early exit
   */
  public synchronized void setExitThreshold(double threshold) throws EdgeNlpException {
    long h = live();
    check(h, nativeSetExitThreshold(h, threshold));
  }

  /**
   * This instance's keep ratio in (0, 1] for later dynamic calls ({@link #DEFAULT}: the bundle's
   * own token pruning).
   *
   * @throws EdgeNlpException INVALID_ARGUMENT out of range (nothing changes), NOT_DYNAMIC on a
   *     bundle without segments or without token layers
   */
  public synchronized void setKeepRatio(double keep) throws EdgeNlpException {
    long h = live();
    check(h, nativeSetKeepRatio(h, keep));
  }

  /**
   * This instance's mode for later dynamic calls: true runs every layer on every token (the
   * static methods), false the segments (the default).
   *
   * @throws EdgeNlpException NOT_DYNAMIC on a bundle without segments
   */
  public synchronized void setStatic(boolean on) throws EdgeNlpException {
    long h = live();
    check(h, nativeSetStatic(h, on ? 1 : 0));
  }

  /** Token ids as the model sees them: [CLS] wordpieces [SEP], truncated to maxSeqLen(). */
  public synchronized long[] tokenize(String text) throws EdgeNlpException {
    long h = live();
    if (text == null) throw new NullPointerException("text");
    long[] ids = new long[maxSeqLen];
    int[] n = new int[1];
    check(h, nativeTokenize(h, text.getBytes(StandardCharsets.UTF_8), ids, n));
    long[] out = new long[n[0]];
    System.arraycopy(ids, 0, out, 0, n[0]);
    return out;
  }

  /**
   * Set ExecuTorch's worker thread count (>= 1). Process-wide: it applies to every open
   * instance, and waits until none is inside a call.
   */
  public void setThreads(int threads) throws EdgeNlpException {
    synchronized (this) {
      long h = live();
      int status;
      POOL.writeLock().lock();
      try {
        status = nativeSetThreads(h, threads);
      } finally {
        POOL.writeLock().unlock();
      }
      check(h, status);
    }
  }

  /** True once {@link #close()} ran. */
  public synchronized boolean isClosed() {
    return handle == 0;
  }

  /** Release the native handle. Idempotent; later calls throw IllegalStateException. */
  @Override
  public synchronized void close() {
    if (handle != 0) {
      nativeClose(handle);
      handle = 0;
    }
  }

  /** libedgenlp's release version, "MAJOR.MINOR.PATCH". */
  public static String libraryVersion() {
    return formatVersion(nativeVersion());
  }

  /** libedgenlp's ABI level (edgenlp_abi_version()). */
  public static int libraryAbiVersion() {
    return nativeAbiVersion();
  }

  /** The newest bundle format_version libedgenlp reads. */
  public static int bundleFormatVersion() {
    return nativeBundleFormatVersion();
  }

  private long live() {
    if (handle == 0) throw new IllegalStateException("EdgeNlp instance is closed");
    return handle;
  }

  private static void check(long h, int status) throws EdgeNlpException {
    if (status == 0) return;
    String message = utf8(nativeLastError(h));
    if (message.isEmpty()) message = utf8(nativeStatusString(status));
    throw new EdgeNlpException(status, message);
  }

  private static String utf8(byte[] bytes) {
    return bytes == null ? "" : new String(bytes, StandardCharsets.UTF_8);
  }

  static String formatVersion(int v) {
    return (v / 10000) + "." + (v / 100 % 100) + "." + (v % 100);
  }

  // Thin JNI layer (src/main/cpp/edgenlp_jni.cpp): statuses come back as ints, strings as UTF-8.
  private static native int nativeVersion();

  private static native int nativeAbiVersion();

  private static native int nativeBundleFormatVersion();

  private static native int nativeOpen(byte[] path, int flags, long[] handleOut);

  private static native void nativeClose(long handle);

  private static native byte[] nativeLastError(long handle);

  private static native byte[] nativeStatusString(int status);

  private static native int nativeNumLabels(long handle);

  private static native byte[] nativeLabelName(long handle, int index);

  private static native int nativeMaxSeqLen(long handle);

  private static native int nativeClassify(long handle, byte[][] texts, float[] probs, int[] labels);

  private static native int nativeTokenize(long handle, byte[] text, long[] ids, int[] count);

  private static native int nativeSetThreads(long handle, int threads);

  private static native int nativeDynamicLayers(long handle, int[] count);

  private static native int nativeSetExitThreshold(long handle, double threshold);

  private static native int nativeSetKeepRatio(long handle, double keep);

  private static native int nativeSetStatic(long handle, int on);

  private static native int nativeClassifyDynamic(long handle, byte[] text, double exitThreshold, double keep,
      int staticMode, float[] probs, int[] labelAndExit, int[] tokensKept);
}
