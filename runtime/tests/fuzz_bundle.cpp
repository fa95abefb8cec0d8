// libFuzzer target: the manifest JSON parser and bundle loader over arbitrary manifests.
// The input is written as manifest.json into a scratch bundle beside a valid vocab.txt.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "bundle.h"
#include "json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  edgenlp::json::Value v;
  std::string err;
  (void)edgenlp::json::parse(text, &v, &err);

  static const std::string dir = [] {
    char tmpl[] = "/tmp/edgenlp-fuzz-XXXXXX";
    std::string d = mkdtemp(tmpl);
    FILE* f = std::fopen((d + "/vocab.txt").c_str(), "wb");
    std::fputs("[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n", f);
    std::fclose(f);
    return d;
  }();
  FILE* f = std::fopen((dir + "/manifest.json").c_str(), "wb");
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  edgenlp::BundleInfo info;
  (void)edgenlp::load_bundle(dir, &info, &err);
  return 0;
}
