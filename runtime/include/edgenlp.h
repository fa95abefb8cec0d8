/*
 * edgenlp.h: C API of the edgenlp native runtime.
 *
 * Classify text on device with an edgenlp bundle (a directory written by
 * `edgenlp export`: manifest.json, model.pte, vocab.txt, labels.json). The
 * library tokenizes with a native WordPiece tokenizer that reproduces the
 * Hugging Face BertTokenizerFast ids, runs the ExecuTorch program and returns
 * logits, probabilities and labels.
 *
 * Minimal use (see runtime/examples/classify.c):
 *
 *     edgenlp_handle* h = NULL;
 *     if (edgenlp_open("out/minilm-sst2", &h) != EDGENLP_OK) {
 *       fprintf(stderr, "%s\n", edgenlp_last_error(h));
 *       edgenlp_close(h);
 *       return 1;
 *     }
 *     float probs[16];
 *     int32_t label;
 *     const char* text = "a gripping, funny film";
 *     if (edgenlp_classify(h, text, strlen(text), probs, 16, &label) == EDGENLP_OK)
 *       printf("%s %.3f\n", edgenlp_label_name(h, label), probs[label]);
 *     edgenlp_close(h);
 *
 * Conventions
 *   - Every function that can fail returns an edgenlp_status. On failure the
 *     handle keeps a one-line message, read with edgenlp_last_error(handle);
 *     it stays valid until the next call on that handle.
 *   - Texts are UTF-8, passed as pointer + byte length (no NUL terminator
 *     needed; embedded NULs are allowed and dropped like other control
 *     characters). Invalid UTF-8 gives EDGENLP_ERR_INVALID_UTF8.
 *   - Output arrays are owned by the caller; the capacity argument says how
 *     many elements fit. Too small gives EDGENLP_ERR_BUFFER_TOO_SMALL.
 *   - No C++ exception ever crosses this interface.
 *
 * Thread safety
 *   - One handle is not reentrant: calls on the same handle must not overlap.
 *     Use one handle per thread, or serialize calls with your own lock.
 *   - Distinct handles are independent and may be used from different threads
 *     at the same time, with one exception: ExecuTorch has a single
 *     process-wide thread pool, so edgenlp_set_threads() changes the worker
 *     count for every handle in the process and must not run while another
 *     handle is inside a classify call.
 *   - edgenlp_version(), edgenlp_abi_version(), edgenlp_bundle_format_version()
 *     and edgenlp_status_string() are always safe.
 *
 * Versions (one release version for the C API, the Java API, the Python
 * package and the bundle format they read; see CHANGELOG.md)
 *   - EDGENLP_VERSION / edgenlp_version(): the release, MAJOR.MINOR.PATCH.
 *   - EDGENLP_ABI_VERSION / edgenlp_abi_version(): a counter raised by one
 *     whenever a function, flag or status code is added (see the table
 *     below). An application compiled against ABI level N runs on any
 *     library whose edgenlp_abi_version() >= N; check it at start-up when
 *     the library may be swapped underneath the application.
 *   - EDGENLP_BUNDLE_FORMAT_VERSION / edgenlp_bundle_format_version(): the
 *     newest manifest "format_version" this library reads. Opening a bundle
 *     of a newer format fails with EDGENLP_ERR_BUNDLE_FORMAT.
 *
 * ABI
 *   - Only the functions below are exported (the library is built with
 *     hidden visibility). Handles are opaque; no struct layout is part of
 *     the ABI. Enum values are fixed; new codes are only ever appended.
 *   - Within one MAJOR version, functions are only added, never changed or
 *     removed, and the soname (libedgenlp.so.MAJOR) stays the same.
 *
 *   ABI level  release  added
 *   1          0.1.0    edgenlp_version ... edgenlp_write_etdump
 *   2          0.2.0    edgenlp_open_ex, EDGENLP_OPEN_* flags
 *   3          0.3.0    edgenlp_abi_version, edgenlp_bundle_format_version,
 *                       EDGENLP_ERR_BUNDLE_FORMAT
 *   4          0.3.0    dynamic bundles: edgenlp_dynamic_layers,
 *                       edgenlp_set_exit_threshold, edgenlp_set_keep_ratio,
 *                       edgenlp_set_static, edgenlp_classify_dynamic,
 *                       edgenlp_logits_dynamic, EDGENLP_DEFAULT,
 *                       EDGENLP_ERR_NOT_DYNAMIC
 *   (Adding to the API: append a row, raise EDGENLP_ABI_VERSION by one and
 *   mark the new declarations "Since ABI N".)
 */
#ifndef EDGENLP_H_
#define EDGENLP_H_

#include <stddef.h>
#include <stdint.h>

#define EDGENLP_VERSION_MAJOR 0
#define EDGENLP_VERSION_MINOR 3
#define EDGENLP_VERSION_PATCH 0
/* Encoded as MAJOR * 10000 + MINOR * 100 + PATCH. */
#define EDGENLP_VERSION \
  (EDGENLP_VERSION_MAJOR * 10000 + EDGENLP_VERSION_MINOR * 100 + EDGENLP_VERSION_PATCH)
/* ABI level of this header (see "Versions" above). */
#define EDGENLP_ABI_VERSION 4
/* Newest bundle manifest format_version this library reads. */
#define EDGENLP_BUNDLE_FORMAT_VERSION 1

#if defined(_WIN32)
#define EDGENLP_API __declspec(dllexport)
#else
#define EDGENLP_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum edgenlp_status {
  EDGENLP_OK = 0,
  EDGENLP_ERR_INVALID_ARGUMENT = 1, /* NULL pointer, bad index, bad count */
  EDGENLP_ERR_IO = 2,               /* a bundle file is missing or unreadable */
  EDGENLP_ERR_BUNDLE = 3,           /* manifest malformed or inconsistent */
  EDGENLP_ERR_CHECKSUM = 4,         /* a file's sha256 differs from the manifest */
  EDGENLP_ERR_INVALID_UTF8 = 5,     /* text is not valid UTF-8 */
  EDGENLP_ERR_MODEL = 6,            /* ExecuTorch failed to load or run the program */
  EDGENLP_ERR_BUFFER_TOO_SMALL = 7, /* an output array is too small */
  EDGENLP_ERR_NO_MODEL = 8,         /* the bundle has no model.pte (tokenizer only) */
  EDGENLP_ERR_OUT_OF_MEMORY = 9,
  EDGENLP_ERR_INTERNAL = 10,
  EDGENLP_ERR_BUNDLE_FORMAT = 11,   /* the bundle's format_version is newer than this library reads. Since ABI 3 */
  EDGENLP_ERR_NOT_DYNAMIC = 12      /* a dynamic option the bundle cannot honour: it has no segments, or no
                                       early exits / token layers for that option. Since ABI 4 */
} edgenlp_status;

/* An open bundle. Opaque. */
typedef struct edgenlp_handle edgenlp_handle;

/* Library version, encoded like EDGENLP_VERSION. */
EDGENLP_API int edgenlp_version(void);

/* ABI level of the library (EDGENLP_ABI_VERSION it was built with). Since ABI 3. */
EDGENLP_API int edgenlp_abi_version(void);

/* Newest bundle format_version the library reads. Since ABI 3. */
EDGENLP_API int edgenlp_bundle_format_version(void);

/* Static English name of a status code ("ok", "invalid utf-8", ...). */
EDGENLP_API const char* edgenlp_status_string(edgenlp_status status);

/*
 * Open a bundle directory: read manifest.json, verify the sha256 of every
 * file the runtime reads (vocabulary, labels.json, model.pte; other listed
 * files such as model.onnx must exist but are not read), load the
 * vocabulary, labels and (when present) the model.pte program, and check
 * each method's signature. Same as edgenlp_open_ex(bundle_dir,
 * EDGENLP_OPEN_DEFAULT, out).
 *
 * The program is used from the very bytes that were verified (one read-only
 * mapping; the path is not opened a second time). Verification guards
 * against corrupted or swapped files at rest; it cannot guard against a
 * process that rewrites model.pte in place while the handle is open.
 *
 * A method (one per sequence-length bucket) is loaded the first time a text
 * needs it: the first classify call of each bucket pays for XNNPACK's
 * weight packing, and an error in a method's delegate data surfaces there
 * as EDGENLP_ERR_MODEL. EDGENLP_OPEN_LOAD_ALL_METHODS moves all of that into
 * the open call.
 *
 * On return *out is a handle even when opening failed (unless out is NULL or
 * memory ran out, then *out is NULL), so that edgenlp_last_error(*out) can
 * say why. Always release it with edgenlp_close().
 */
EDGENLP_API edgenlp_status edgenlp_open(const char* bundle_dir, edgenlp_handle** out);

/* Flags of edgenlp_open_ex, OR-ed together. */
#define EDGENLP_OPEN_DEFAULT 0u
/*
 * Do not compute the sha256 of the bundle files (saves reading model.pte
 * once, ~0.05-0.3 s for a 90 MB program depending on the CPU). Only for
 * bundles whose integrity the application has already established, e.g.
 * verified once at install time into storage no other app can write. The
 * manifest is still checked, and a malformed program is still rejected by
 * ExecuTorch's own checks, but a modified one is not detected.
 */
#define EDGENLP_OPEN_SKIP_VERIFY 1u
/*
 * Load every method at open instead of on first use: a slower open, no
 * first-call delay per bucket, and every load error reported by the open.
 */
#define EDGENLP_OPEN_LOAD_ALL_METHODS 2u
/*
 * Let every bucket method pack its own copy of the weights, as ExecuTorch
 * does by default. Without this flag the XNNPACK weights cache is switched
 * on: the methods of a program share one packed copy of each weight (looked
 * up by its name in the program's named data), so memory does not grow with
 * the number of buckets. For measurements and as an escape hatch.
 */
#define EDGENLP_OPEN_NO_WEIGHT_CACHE 4u

/* edgenlp_open with flags; unknown flag bits give EDGENLP_ERR_INVALID_ARGUMENT. Since 0.2. */
EDGENLP_API edgenlp_status edgenlp_open_ex(const char* bundle_dir, uint32_t flags, edgenlp_handle** out);

/* Release a handle. NULL is allowed. */
EDGENLP_API void edgenlp_close(edgenlp_handle* handle);

/* Message of the last failed call on this handle ("" after success). Never NULL. */
EDGENLP_API const char* edgenlp_last_error(const edgenlp_handle* handle);

/*
 * Set the number of ExecuTorch worker threads (>= 1). Process-wide, see
 * "Thread safety". Unloads the loaded methods of every open handle; they
 * load again on their next use (or here, with EDGENLP_OPEN_LOAD_ALL_METHODS).
 */
EDGENLP_API edgenlp_status edgenlp_set_threads(edgenlp_handle* handle, int32_t threads);

/* Number of labels of the bundle. */
EDGENLP_API edgenlp_status edgenlp_num_labels(const edgenlp_handle* handle, size_t* out);

/* Name of label `index`; NULL when the index is out of range. Owned by the handle. */
EDGENLP_API const char* edgenlp_label_name(const edgenlp_handle* handle, size_t index);

/* The bundle's max_seq_len (tokens including [CLS] and [SEP]). */
EDGENLP_API edgenlp_status edgenlp_max_seq_len(const edgenlp_handle* handle, size_t* out);

/*
 * Tokenize `text` as the model sees it: [CLS] wordpieces [SEP], truncated to
 * max_seq_len. Writes *n_tokens ids into ids[] and the attention mask (all 1)
 * into mask[] (mask may be NULL). capacity is the length of ids/mask; when
 * it is too small, *n_tokens is set to the needed length and
 * EDGENLP_ERR_BUFFER_TOO_SMALL is returned. Works without model.pte.
 * For a bundle with a trimmed vocabulary (manifest tokenizer.vocab_map) the
 * ids are the model's new ids; pieces the model does not keep are [UNK].
 */
EDGENLP_API edgenlp_status edgenlp_tokenize(edgenlp_handle* handle, const char* text, size_t text_len,
                                            int64_t* ids, int64_t* mask, size_t capacity,
                                            size_t* n_tokens);

/*
 * Classify one text. probs receives num_labels softmax probabilities
 * (capacity >= num_labels); label (may be NULL) the arg-max index.
 */
EDGENLP_API edgenlp_status edgenlp_classify(edgenlp_handle* handle, const char* text, size_t text_len,
                                            float* probs, size_t capacity, int32_t* label);

/*
 * Classify n texts (texts[i] has text_lens[i] bytes). probs receives
 * n * num_labels probabilities, row-major (capacity >= n * num_labels);
 * labels (may be NULL) n arg-max indices. Stops at the first failing text.
 */
EDGENLP_API edgenlp_status edgenlp_classify_batch(edgenlp_handle* handle, const char* const* texts,
                                                  const size_t* text_lens, size_t n, float* probs,
                                                  size_t capacity, int32_t* labels);

/* Like edgenlp_classify_batch but writes raw logits (n * num_labels floats). */
EDGENLP_API edgenlp_status edgenlp_logits_batch(edgenlp_handle* handle, const char* const* texts,
                                                const size_t* text_lens, size_t n, float* logits,
                                                size_t capacity);

/*
 * Dynamic bundles (since ABI 4)
 *
 * A dynamic bundle (`edgenlp export` of a model made with `edgenlp dynamic`;
 * manifest key "dynamic") holds, beside the static methods, an embedding
 * method and one method per segment (the layers between two exits or token
 * layers) for every bucket. edgenlp_classify_dynamic() and
 * edgenlp_logits_dynamic() run it segment by segment: after a segment that
 * ends at an exit they stop when the exit rule fires (maxprob: the largest
 * probability reaches the threshold; entropy: the normalized entropy falls
 * to it; patience: that many exits in a row agree), and after a token layer
 * they keep the tokens the bundle's token pruning keeps ([CLS] and [SEP]
 * always) and re-pad them to the smallest bucket that holds them. The
 * decisions are those of the Python runtimes (edgenlp.dynamic.rules).
 *
 * The older calls (edgenlp_classify, edgenlp_classify_batch,
 * edgenlp_logits_batch) are unchanged: they run the static methods, every
 * layer on every token, on every bundle, and ignore the settings below.
 *
 * Settings: each handle starts with the bundle's own (its exit rule and
 * threshold, its token pruning). The setters change them for every later
 * dynamic call on that handle; the same three options can be overridden for
 * one call. EDGENLP_DEFAULT means "not set here": to a setter, back to the
 * bundle's value; in a call's arguments, the handle's setting.
 *   - exit threshold: maxprob and entropy in [0, 1], patience an integer
 *     from 1 to the number of exits. EDGENLP_ERR_NOT_DYNAMIC when the bundle
 *     has no early exit (only the last layer answers).
 *   - keep ratio in (0, 1]: after each token layer keep the
 *     max(2, ceil(ratio * n)) most important of the n current tokens (ties to
 *     the earlier token) instead of the bundle's token pruning; 1 keeps every
 *     token. EDGENLP_ERR_NOT_DYNAMIC when the bundle has no token layers.
 *   - static: 1 runs the static methods (every layer on every token), 0 the
 *     segments.
 * A value out of range gives EDGENLP_ERR_INVALID_ARGUMENT and changes
 * nothing; any of them on a bundle without segments gives
 * EDGENLP_ERR_NOT_DYNAMIC. The message (edgenlp_last_error) names the
 * option, the value and the range.
 */

/* "Not set here" for the dynamic settings (see above). Since ABI 4. */
#define EDGENLP_DEFAULT (-1)

/*
 * Number of encoder layers of a dynamic bundle (the length the tokens_kept
 * arrays below need), or 0 for a bundle without segments. Since ABI 4.
 */
EDGENLP_API edgenlp_status edgenlp_dynamic_layers(const edgenlp_handle* handle, size_t* num_layers);

/* The handle's exit threshold (EDGENLP_DEFAULT: the bundle's). Since ABI 4. */
EDGENLP_API edgenlp_status edgenlp_set_exit_threshold(edgenlp_handle* handle, double threshold);

/* The handle's keep ratio (EDGENLP_DEFAULT: the bundle's own token pruning). Since ABI 4. */
EDGENLP_API edgenlp_status edgenlp_set_keep_ratio(edgenlp_handle* handle, double keep);

/* The handle's mode: 1 static, 0 segments (EDGENLP_DEFAULT: segments). Since ABI 4. */
EDGENLP_API edgenlp_status edgenlp_set_static(edgenlp_handle* handle, int32_t on);

/*
 * Classify one text through the segments of a dynamic bundle.
 * exit_threshold, keep and static_mode override the handle's settings for
 * this call (EDGENLP_DEFAULT: the handle's). probs and label as for
 * edgenlp_classify (label may be NULL). *exit_layer (may be NULL) receives
 * the layer whose exit answered (1-based; the last layer when no earlier
 * exit fired or in static mode). tokens_kept (may be NULL; else
 * tokens_capacity >= edgenlp_dynamic_layers()) receives, per layer, the
 * number of tokens it processed ([CLS] and [SEP] included), 0 for the
 * layers after the exit.
 *
 * On a bundle without segments, with every override EDGENLP_DEFAULT, this
 * is edgenlp_classify: *exit_layer is set to 0 and tokens_kept is not
 * written. Since ABI 4.
 */
EDGENLP_API edgenlp_status edgenlp_classify_dynamic(edgenlp_handle* handle, const char* text, size_t text_len,
                                                    double exit_threshold, double keep, int32_t static_mode,
                                                    float* probs, size_t capacity, int32_t* label,
                                                    int32_t* exit_layer, int32_t* tokens_kept,
                                                    size_t tokens_capacity);

/* Like edgenlp_classify_dynamic but writes the raw logits of the answering exit. Since ABI 4. */
EDGENLP_API edgenlp_status edgenlp_logits_dynamic(edgenlp_handle* handle, const char* text, size_t text_len,
                                                  double exit_threshold, double keep, int32_t static_mode,
                                                  float* logits, size_t capacity, int32_t* exit_layer,
                                                  int32_t* tokens_kept, size_t tokens_capacity);

/*
 * Profiling: record an ExecuTorch ETDump of the following classify calls.
 * Reloads the program with an event tracer attached. edgenlp_write_etdump()
 * writes what was recorded so far to `path` (the format the ExecuTorch
 * Inspector reads).
 */
EDGENLP_API edgenlp_status edgenlp_enable_etdump(edgenlp_handle* handle);
EDGENLP_API edgenlp_status edgenlp_write_etdump(edgenlp_handle* handle, const char* path);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* EDGENLP_H_ */
