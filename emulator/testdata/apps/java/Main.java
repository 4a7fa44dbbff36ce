import java.io.*;
import java.nio.charset.StandardCharsets;

// The java application of devhook's emulator tests: it reads the run's
// input from standard input, logs a line on standard error, and prints
// {"options": {}, "solution": {"input": <input>, "args": [...]}, "metrics": {}}
// on standard output.
public class Main {
    public static void main(String[] args) throws IOException {
        ByteArrayOutputStream in = new ByteArrayOutputStream();
        byte[] buf = new byte[4096];
        int n;
        while ((n = System.in.read(buf)) > 0) {
            in.write(buf, 0, n);
        }
        System.err.println("java app: read " + in.size() + " bytes");
        StringBuilder a = new StringBuilder();
        for (int i = 0; i < args.length; i++) {
            if (i > 0) a.append(",");
            a.append("\"").append(args[i].replace("\\", "\\\\").replace("\"", "\\\"")).append("\"");
        }
        String input = in.toString(StandardCharsets.UTF_8.name()).trim();
        System.out.println("{\"options\":{},\"solution\":{\"input\":" + input + ",\"args\":[" + a + "]},\"metrics\":{}}");
    }
}
