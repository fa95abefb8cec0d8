/*
 * classify.c: the smallest program that classifies text with an edgenlp bundle.
 *
 * Against an installed SDK (cmake --install, or the unpacked edgenlp-runtime archive):
 *   cc classify.c $(pkg-config --cflags --libs edgenlp) \
 *      -Wl,-rpath,$(pkg-config --variable=libdir edgenlp) -o classify
 * or with CMake: CMakeLists.txt beside this file (find_package(edgenlp)).
 *   ./classify out/minilm-sst2 "a gripping, funny film"
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "edgenlp.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s BUNDLE TEXT...\n", argv[0]);
    return 2;
  }
  /* The library may be older than the header this was compiled with. */
  if (edgenlp_abi_version() < EDGENLP_ABI_VERSION) {
    fprintf(stderr, "error: libedgenlp ABI level %d is older than this program needs (%d)\n",
            edgenlp_abi_version(), EDGENLP_ABI_VERSION);
    return 1;
  }
  edgenlp_handle* h = NULL;
  edgenlp_status st = edgenlp_open(argv[1], &h);
  if (st != EDGENLP_OK) {
    fprintf(stderr, "error: %s: %s\n", edgenlp_status_string(st), edgenlp_last_error(h));
    edgenlp_close(h);
    return 2;
  }
  size_t num_labels = 0;
  edgenlp_num_labels(h, &num_labels);
  float* probs = malloc(num_labels * sizeof(float));
  int rc = 0;
  for (int i = 2; i < argc && probs != NULL; ++i) {
    int32_t label = 0;
    st = edgenlp_classify(h, argv[i], strlen(argv[i]), probs, num_labels, &label);
    if (st != EDGENLP_OK) {
      fprintf(stderr, "error: %s: %s\n", edgenlp_status_string(st), edgenlp_last_error(h));
      rc = 2;
      break;
    }
    printf("%s %.4f\n", edgenlp_label_name(h, (size_t)label), probs[label]);
  }
  free(probs);
  edgenlp_close(h);
  return rc;
}
