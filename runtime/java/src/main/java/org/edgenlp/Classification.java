package org.edgenlp;

import java.util.Arrays;

/**
 * The result of classifying one text: the arg-max label and the softmax over all labels; for
 * {@link EdgeNlp#classifyDynamic} on a dynamic bundle, also the layer whose exit answered and
 * the tokens each layer processed.
 */
public final class Classification {
  private static final int[] NONE = new int[0];

  private final String label;
  private final int index;
  private final float[] probabilities;
  private final int exitLayer;
  private final int[] tokensKept;

  Classification(String label, int index, float[] probabilities) {
    this(label, index, probabilities, 0, NONE);
  }

  Classification(String label, int index, float[] probabilities, int exitLayer, int[] tokensKept) {
    this.label = label;
    this.index = index;
    this.probabilities = probabilities;
    this.exitLayer = exitLayer;
    this.tokensKept = tokensKept;
  }

  /** The arg-max label's name (labels.json). */
  public String label() {
    return label;
  }

  /** The arg-max label's index (its logit position). */
  public int index() {
    return index;
  }

  /** The probability of the arg-max label. */
  public float probability() {
    return probabilities[index];
  }

  /** A copy of the probabilities of every label, in label order. */
  public float[] probabilities() {
    return probabilities.clone();
  }

  /**
   * The layer whose exit answered (1-based; the last layer when no earlier exit fired, or in
   * static mode) for {@link EdgeNlp#classifyDynamic} on a dynamic bundle; 0 for every other call
   * and for a bundle without segments.
   */
  public int exitLayer() {
    return exitLayer;
  }

  /**
   * A copy of the tokens each layer that ran processed ({@code [CLS]} and {@code [SEP]}
   * included), one entry per layer up to {@link #exitLayer()}; empty when exitLayer() is 0.
   */
  public int[] tokensKept() {
    return tokensKept.clone();
  }

  @Override
  public String toString() {
    String dynamic = exitLayer == 0 ? "" : " exit " + exitLayer + " tokens " + Arrays.toString(tokensKept);
    return "Classification{" + label + " " + probabilities[index] + " " + Arrays.toString(probabilities) + dynamic
        + "}";
  }
}
