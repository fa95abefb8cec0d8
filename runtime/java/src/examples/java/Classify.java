import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import org.edgenlp.Classification;
import org.edgenlp.EdgeNlp;
import org.edgenlp.EdgeNlpException;

/**
 * Classify texts with an edgenlp bundle from Java: the smallest complete program.
 *
 * <pre>
 * java -Djava.library.path=SDK/lib -cp SDK/share/java/edgenlp-VERSION.jar:. Classify BUNDLE "a gripping film"
 * java ... Classify BUNDLE --input texts.txt --json     # one text per line, JSON lines out
 * </pre>
 *
 * <p>A dynamic bundle (made with {@code edgenlp dynamic}) runs text by text through its segments
 * with the bundle's own exit rule and token pruning, and also prints the layer that answered and
 * the tokens each layer processed.
 */
public final class Classify {
  public static void main(String[] args) throws IOException {
    if (args.length < 2) {
      System.err.println("usage: Classify BUNDLE (TEXT... | --input FILE) [--json]");
      System.exit(2);
    }
    List<String> texts = new ArrayList<>();
    boolean json = false;
    for (int i = 1; i < args.length; i++) {
      if (args[i].equals("--json")) {
        json = true;
      } else if (args[i].equals("--input") && i + 1 < args.length) {
        try (BufferedReader r = Files.newBufferedReader(Paths.get(args[++i]), StandardCharsets.UTF_8)) {
          for (String line; (line = r.readLine()) != null; ) texts.add(line);
        }
      } else {
        texts.add(args[i]);
      }
    }
    try (EdgeNlp nlp = EdgeNlp.open(args[0])) {
      boolean dynamic = nlp.dynamicLayers() > 0;
      for (int start = 0; start < texts.size(); start += 64) {
        List<String> chunk = texts.subList(start, Math.min(texts.size(), start + 64));
        Classification[] out;
        if (dynamic) {
          out = new Classification[chunk.size()];
          for (int i = 0; i < out.length; i++) out[i] = nlp.classifyDynamic(chunk.get(i));
        } else {
          out = nlp.classifyBatch(chunk.toArray(new String[0]));
        }
        for (Classification c : out) {
          if (!json) {
            String exit = dynamic ? String.format(" (exit at layer %d)", c.exitLayer()) : "";
            System.out.printf("%s %.4f%s%n", c.label(), c.probability(), exit);
            continue;
          }
          StringBuilder b = new StringBuilder("{\"index\": ").append(c.index()).append(", \"probabilities\": [");
          float[] p = c.probabilities();
          for (int j = 0; j < p.length; j++) b.append(j == 0 ? "" : ", ").append(p[j]);
          b.append(']');
          if (dynamic) {
            b.append(", \"exit_layer\": ").append(c.exitLayer()).append(", \"tokens_kept\": ");
            b.append(java.util.Arrays.toString(c.tokensKept()));
          }
          System.out.println(b.append('}'));
        }
      }
    } catch (EdgeNlpException e) {
      System.err.println("error: " + e.status() + ": " + e.getMessage());
      System.exit(2);
    }
  }
}
