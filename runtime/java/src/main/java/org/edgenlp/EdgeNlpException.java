package org.edgenlp;

/**
 * A call into libedgenlp failed. {@link #status()} is the C API's {@code edgenlp_status}; the
 * message is the handle's one-line error text ({@code edgenlp_last_error}), naming the file,
 * field or text that was wrong.
 */
public class EdgeNlpException extends Exception {
  private static final long serialVersionUID = 1L;

  /** {@code edgenlp_status} of edgenlp.h, code for code. */
  public enum Status {
    OK(0),
    INVALID_ARGUMENT(1),
    IO(2),
    BUNDLE(3),
    CHECKSUM(4),
    INVALID_UTF8(5),
    MODEL(6),
    BUFFER_TOO_SMALL(7),
    NO_MODEL(8),
    OUT_OF_MEMORY(9),
    INTERNAL(10),
    BUNDLE_FORMAT(11),
    /** A dynamic option on a bundle without segments (or without exits / token layers). */
    NOT_DYNAMIC(12),
    /** A code this binding does not know (a newer library). */
    UNKNOWN(-1);

    private final int code;

    Status(int code) {
      this.code = code;
    }

    /** The C value. */
    public int code() {
      return code;
    }

    static Status of(int code) {
      for (Status s : values()) {
        if (s.code == code) return s;
      }
      return UNKNOWN;
    }
  }

  private final Status status;
  private final int code;

  EdgeNlpException(int code, String message) {
    super(message);
    this.code = code;
    this.status = Status.of(code);
  }

  /** Which kind of failure. */
  public Status status() {
    return status;
  }

  /** The raw {@code edgenlp_status} value (also for codes newer than this binding). */
  public int code() {
    return code;
  }

  /** True when the bundle itself is at fault (missing, corrupted, unsupported format). */
  public boolean isBundleError() {
    switch (status) {
      case IO:
      case BUNDLE:
      case CHECKSUM:
      case MODEL:
      case NO_MODEL:
      case BUNDLE_FORMAT:
        return true;
      default:
        return false;
    }
  }
}
