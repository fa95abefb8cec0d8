// JNI layer of org.edgenlp.EdgeNlp over the C API (edgenlp.h).
//
// Written for the Android NDK as much as for a desktop JDK: standard <jni.h>
// only, no glibc-only calls, no C++ exception crosses into the JVM. Strings
// travel as UTF-8 byte arrays (Java's modified UTF-8 of GetStringUTFChars is
// not UTF-8 for characters outside the BMP); statuses come back as ints and
// the Java side turns them into exceptions with the handle's message.
#include <jni.h>

#include <cstdint>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "edgenlp.h"

#ifdef EDGENLP_JNI_GENERATED_HEADER
// javac -h output: a signature that drifted from EdgeNlp.java fails to compile here.
#include "org_edgenlp_EdgeNlp.h"
#endif

namespace {

edgenlp_handle* from(jlong h) { return reinterpret_cast<edgenlp_handle*>(static_cast<std::intptr_t>(h)); }

jlong to(edgenlp_handle* h) { return static_cast<jlong>(reinterpret_cast<std::intptr_t>(h)); }

// A new byte[] with the bytes of s; nullptr with a pending OutOfMemoryError when allocation fails.
jbyteArray bytes(JNIEnv* env, const char* s) {
  if (s == nullptr) s = "";
  const jsize n = static_cast<jsize>(std::strlen(s));
  jbyteArray out = env->NewByteArray(n);
  if (out != nullptr && n > 0) env->SetByteArrayRegion(out, 0, n, reinterpret_cast<const jbyte*>(s));
  return out;
}

// Copy a Java byte[] into out; false when the array is null.
bool copy(JNIEnv* env, jbyteArray array, std::string* out) {
  if (array == nullptr) return false;
  const jsize n = env->GetArrayLength(array);
  out->resize(static_cast<std::size_t>(n));
  if (n > 0) env->GetByteArrayRegion(array, 0, n, reinterpret_cast<jbyte*>(&(*out)[0]));
  return true;
}

}  // namespace

extern "C" {

JNIEXPORT jint JNICALL Java_org_edgenlp_EdgeNlp_nativeVersion(JNIEnv*, jclass) { return edgenlp_version(); }

JNIEXPORT jint JNICALL Java_org_edgenlp_EdgeNlp_nativeAbiVersion(JNIEnv*, jclass) { return edgenlp_abi_version(); }

JNIEXPORT jint JNICALL Java_org_edgenlp_EdgeNlp_nativeBundleFormatVersion(JNIEnv*, jclass) {
  return edgenlp_bundle_format_version();
}

JNIEXPORT jint JNICALL Java_org_edgenlp_EdgeNlp_nativeOpen(JNIEnv* env, jclass, jbyteArray path, jint flags,
                                                           jlongArray handle_out) {
  try {
    std::string dir;
    if (!copy(env, path, &dir) || handle_out == nullptr || env->GetArrayLength(handle_out) < 1)
      return EDGENLP_ERR_INVALID_ARGUMENT;
    if (dir.find('\0') != std::string::npos) dir.clear();  // "" names no bundle: the open reports it
    edgenlp_handle* h = nullptr;
    const edgenlp_status st = edgenlp_open_ex(dir.c_str(), static_cast<std::uint32_t>(flags), &h);
    const jlong value = to(h);
    env->SetLongArrayRegion(handle_out, 0, 1, &value);
    return st;
  } catch (const std::bad_alloc&) {
    return EDGENLP_ERR_OUT_OF_MEMORY;
  } catch (...) {
    return EDGENLP_ERR_INTERNAL;
  }
}

JNIEXPORT void JNICALL Java_org_edgenlp_EdgeNlp_nativeClose(JNIEnv*, jclass, jlong h) { edgenlp_close(from(h)); }

JNIEXPORT jbyteArray JNICALL Java_org_edgenlp_EdgeNlp_nativeLastError(JNIEnv* env, jclass, jlong h) {
  return bytes(env, edgenlp_last_error(from(h)));
}

JNIEXPORT jbyteArray JNICALL Java_org_edgenlp_EdgeNlp_nativeStatusString(JNIEnv* env, jclass, jint status) {
  return bytes(env, edgenlp_status_string(static_cast<edgenlp_status>(status)));
}

JNIEXPORT jint JNICALL Java_org_edgenlp_EdgeNlp_nativeNumLabels(JNIEnv*, jclass, jlong h) {
  std::size_t n = 0;
  if (edgenlp_num_labels(from(h), &n) != EDGENLP_OK) return 0;
  return static_cast<jint>(n);
}

JNIEXPORT jbyteArray JNICALL Java_org_edgenlp_EdgeNlp_nativeLabelName(JNIEnv* env, jclass, jlong h, jint index) {
  if (index < 0) return nullptr;
  return bytes(env, edgenlp_label_name(from(h), static_cast<std::size_t>(index)));
}

JNIEXPORT jint JNICALL Java_org_edgenlp_EdgeNlp_nativeMaxSeqLen(JNIEnv*, jclass, jlong h) {
  std::size_t n = 0;
  if (edgenlp_max_seq_len(from(h), &n) != EDGENLP_OK) return 0;
  return static_cast<jint>(n);
}

JNIEXPORT jint JNICALL Java_org_edgenlp_EdgeNlp_nativeClassify(JNIEnv* env, jclass, jlong h, jobjectArray texts,
                                                               jfloatArray probs, jintArray labels) {
  try {
    if (texts == nullptr || probs == nullptr || labels == nullptr) return EDGENLP_ERR_INVALID_ARGUMENT;
    const jsize n = env->GetArrayLength(texts);
    if (env->GetArrayLength(labels) < n) return EDGENLP_ERR_INVALID_ARGUMENT;
    std::vector<std::string> data(static_cast<std::size_t>(n));
    for (jsize i = 0; i < n; ++i) {
      auto text = static_cast<jbyteArray>(env->GetObjectArrayElement(texts, i));
      const bool ok = copy(env, text, &data[static_cast<std::size_t>(i)]);
      if (text != nullptr) env->DeleteLocalRef(text);
      if (!ok) return EDGENLP_ERR_INVALID_ARGUMENT;
    }
    std::vector<const char*> ptrs(data.size());
    std::vector<std::size_t> lens(data.size());
    for (std::size_t i = 0; i < data.size(); ++i) {
      ptrs[i] = data[i].data();
      lens[i] = data[i].size();
    }
    const std::size_t capacity = static_cast<std::size_t>(env->GetArrayLength(probs));
    std::vector<float> p(capacity);
    std::vector<std::int32_t> best(data.size());
    const edgenlp_status st =
        edgenlp_classify_batch(from(h), ptrs.data(), lens.data(), data.size(), p.data(), capacity, best.data());
    if (st != EDGENLP_OK) return st;
    if (capacity > 0) env->SetFloatArrayRegion(probs, 0, static_cast<jsize>(capacity), p.data());
    std::vector<jint> out(best.begin(), best.end());
    if (n > 0) env->SetIntArrayRegion(labels, 0, n, out.data());
    return EDGENLP_OK;
  } catch (const std::bad_alloc&) {
    return EDGENLP_ERR_OUT_OF_MEMORY;
  } catch (...) {
    return EDGENLP_ERR_INTERNAL;
  }
}

JNIEXPORT jint JNICALL Java_org_edgenlp_EdgeNlp_nativeTokenize(JNIEnv* env, jclass, jlong h, jbyteArray text,
                                                               jlongArray ids, jintArray count) {
  try {
    std::string data;
    if (!copy(env, text, &data) || ids == nullptr || count == nullptr || env->GetArrayLength(count) < 1)
      return EDGENLP_ERR_INVALID_ARGUMENT;
    const std::size_t capacity = static_cast<std::size_t>(env->GetArrayLength(ids));
    std::vector<std::int64_t> out(capacity);
    std::size_t n = 0;
    const edgenlp_status st = edgenlp_tokenize(from(h), data.data(), data.size(), out.data(), nullptr, capacity, &n);
    if (st != EDGENLP_OK) return st;
    std::vector<jlong> j(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(n));
    if (n > 0) env->SetLongArrayRegion(ids, 0, static_cast<jsize>(n), j.data());
    const jint c = static_cast<jint>(n);
    env->SetIntArrayRegion(count, 0, 1, &c);
    return EDGENLP_OK;
  } catch (const std::bad_alloc&) {
    return EDGENLP_ERR_OUT_OF_MEMORY;
  } catch (...) {
    return EDGENLP_ERR_INTERNAL;
  }
}

JNIEXPORT jint JNICALL Java_org_edgenlp_EdgeNlp_nativeSetThreads(JNIEnv*, jclass, jlong h, jint threads) {
  return edgenlp_set_threads(from(h), threads);
}

JNIEXPORT jint JNICALL Java_org_edgenlp_EdgeNlp_nativeDynamicLayers(JNIEnv* env, jclass, jlong h, jintArray count) {
  if (count == nullptr || env->GetArrayLength(count) < 1) return EDGENLP_ERR_INVALID_ARGUMENT;
  std::size_t n = 0;
  const edgenlp_status st = edgenlp_dynamic_layers(from(h), &n);
  if (st != EDGENLP_OK) return st;
  const jint c = static_cast<jint>(n);
  env->SetIntArrayRegion(count, 0, 1, &c);
  return EDGENLP_OK;
}

JNIEXPORT jint JNICALL Java_org_edgenlp_EdgeNlp_nativeSetExitThreshold(JNIEnv*, jclass, jlong h, jdouble threshold) {
  return edgenlp_set_exit_threshold(from(h), threshold);
}

JNIEXPORT jint JNICALL Java_org_edgenlp_EdgeNlp_nativeSetKeepRatio(JNIEnv*, jclass, jlong h, jdouble keep) {
  return edgenlp_set_keep_ratio(from(h), keep);
}

JNIEXPORT jint JNICALL Java_org_edgenlp_EdgeNlp_nativeSetStatic(JNIEnv*, jclass, jlong h, jint on) {
  return edgenlp_set_static(from(h), on);
}

// probs: num_labels floats; label_and_exit: {label, exit layer}; tokens_kept: edgenlp_dynamic_layers() ints
// (empty for a bundle without segments).
JNIEXPORT jint JNICALL Java_org_edgenlp_EdgeNlp_nativeClassifyDynamic(JNIEnv* env, jclass, jlong h, jbyteArray text,
                                                                      jdouble exit_threshold, jdouble keep,
                                                                      jint static_mode, jfloatArray probs,
                                                                      jintArray label_and_exit, jintArray tokens_kept) {
  try {
    std::string data;
    if (!copy(env, text, &data) || probs == nullptr || label_and_exit == nullptr || tokens_kept == nullptr ||
        env->GetArrayLength(label_and_exit) < 2)
      return EDGENLP_ERR_INVALID_ARGUMENT;
    const std::size_t capacity = static_cast<std::size_t>(env->GetArrayLength(probs));
    const std::size_t layers = static_cast<std::size_t>(env->GetArrayLength(tokens_kept));
    std::vector<float> p(capacity);
    std::vector<std::int32_t> kept(layers);
    std::int32_t label = 0;
    std::int32_t exit_layer = 0;
    const edgenlp_status st = edgenlp_classify_dynamic(
        from(h), data.data(), data.size(), exit_threshold, keep, static_mode, p.data(), capacity, &label, &exit_layer,
        layers > 0 ? kept.data() : nullptr, layers);
    if (st != EDGENLP_OK) return st;
    if (capacity > 0) env->SetFloatArrayRegion(probs, 0, static_cast<jsize>(capacity), p.data());
    const jint le[2] = {static_cast<jint>(label), static_cast<jint>(exit_layer)};
    env->SetIntArrayRegion(label_and_exit, 0, 2, le);
    std::vector<jint> out(kept.begin(), kept.end());
    if (layers > 0) env->SetIntArrayRegion(tokens_kept, 0, static_cast<jsize>(layers), out.data());
    return EDGENLP_OK;
  } catch (const std::bad_alloc&) {
    return EDGENLP_ERR_OUT_OF_MEMORY;
  } catch (...) {
    return EDGENLP_ERR_INTERNAL;
  }
}

}  // extern "C"
