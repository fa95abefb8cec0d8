package org.edgenlp;

import java.util.Arrays;

/** The result of classifying one text: the arg-max label and the softmax over all labels. */
public final class Classification {
  private final String label;
  private final int index;
  private final float[] probabilities;

  Classification(String label, int index, float[] probabilities) {
    this.label = label;
    this.index = index;
    this.probabilities = probabilities;
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

  @Override
  public String toString() {
    return "Classification{" + label + " " + probabilities[index] + " " + Arrays.toString(probabilities) + "}";
  }
}
