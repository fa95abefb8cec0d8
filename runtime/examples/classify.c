/*
 * classify.c: the smallest program that classifies text with an edgenlp bundle.
 * Prints "label probability" per text; for a dynamic bundle (early exits,
 * token pruning) also the layer that answered and the tokens each layer
 * processed: "label probability exit_layer=2 tokens_kept=14,9".
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
  size_t num_labels = 0, num_layers = 0;
  edgenlp_num_labels(h, &num_labels);
  edgenlp_dynamic_layers(h, &num_layers); /* 0: a static bundle */
  float* probs = malloc(num_labels * sizeof(float));
  int32_t* tokens = malloc((num_layers + 1) * sizeof(int32_t));
  int rc = 0;
  for (int i = 2; i < argc && probs != NULL && tokens != NULL; ++i) {
    int32_t label = 0, exit_layer = 0;
    /* The bundle's own exit threshold and token pruning (EDGENLP_DEFAULT); a static bundle runs as edgenlp_classify. */
    st = edgenlp_classify_dynamic(h, argv[i], strlen(argv[i]), EDGENLP_DEFAULT, EDGENLP_DEFAULT, EDGENLP_DEFAULT,
                                  probs, num_labels, &label, &exit_layer, tokens, num_layers);
    if (st != EDGENLP_OK) {
      fprintf(stderr, "error: %s: %s\n", edgenlp_status_string(st), edgenlp_last_error(h));
      rc = 2;
      break;
    }
    printf("%s %.4f", edgenlp_label_name(h, (size_t)label), probs[label]);
    if (num_layers > 0) {
      printf(" exit_layer=%d tokens_kept=", (int)exit_layer);
      for (int32_t l = 0; l < exit_layer; ++l) printf(l ? ",%d" : "%d", (int)tokens[l]);
    }
    printf("\n");
  }
  free(tokens);
  free(probs);
  edgenlp_close(h);
  return rc;
}
