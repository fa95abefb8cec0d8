"""Block sparsity: weights pruned in blocks along K and run by edgenlp's block-sparse kernels."""
