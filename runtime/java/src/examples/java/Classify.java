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
      for (int start = 0; start < texts.size(); start += 64) {
        List<String> chunk = texts.subList(start, Math.min(texts.size(), start + 64));
        Classification[] out = nlp.classifyBatch(chunk.toArray(new String[0]));
        for (Classification c : out) {
          if (!json) {
            System.out.printf("%s %.4f%n", c.label(), c.probability());
            continue;
          }
          StringBuilder b = new StringBuilder("{\"index\": ").append(c.index()).append(", \"probabilities\": [");
          float[] p = c.probabilities();
          for (int j = 0; j < p.length; j++) b.append(j == 0 ? "" : ", ").append(p[j]);
          System.out.println(b.append("]}"));
        }
      }
    } catch (EdgeNlpException e) {
      System.err.println("error: " + e.status() + ": " + e.getMessage());
      System.exit(2);
    }
  }
}
