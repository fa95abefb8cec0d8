"""``edgenlp compress``: fine-tune -> prune -> quantize -> export -> verify, under a device budget."""
