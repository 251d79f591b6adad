// One OpenSearch node in a JVM of its own, as the distribution's own launcher starts one, with the
// two modules bm25aug needs on the classpath (as OpenSearch's test harness, MockNode, loads them)
// instead of a modules/ folder, and the loopback check below. Settings: <home>/config/opensearch.yml
// (bm25aug.opensearch.local writes it). Stops cleanly on SIGTERM; `kill -9` is a node crash.
// Compiled with the Engine.java of the engine's major version (opensearch-2/, opensearch-3/): the
// node with its modules and the REST wrapper, which OpenSearch 3.0 renamed and re-typed.
import java.io.IOException;
import java.nio.file.Path;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import org.opensearch.common.logging.LogConfigurator;
import org.opensearch.common.settings.Settings;
import org.opensearch.common.xcontent.XContentFactory;
import org.opensearch.core.rest.RestStatus;
import org.opensearch.env.Environment;
import org.opensearch.node.InternalSettingsPreparer;
import org.opensearch.node.Node;
import org.opensearch.rest.BytesRestResponse;
import org.opensearch.rest.RestRequest;

public final class ClusterNode {
  private static final Set<String> NAMES = Set.of("localhost", "127.0.0.1", "[::1]");

  static boolean loopback(String value, String scheme) {
    String name = value.trim().toLowerCase(Locale.ROOT);
    if (!name.startsWith(scheme)) {
      return false;
    }
    name = name.substring(scheme.length()).replaceFirst(":[0-9]{1,5}$", "");
    return NAMES.contains(name);
  }

  /**
   * DNS rebinding: a page on another site can resolve its name to 127.0.0.1 and reach a node, but
   * its requests still carry that site's Host (and Origin). Every REST handler (Engine.LoopbackOnly
   * wraps each) answers only a loopback Host (localhost, 127.0.0.1, [::1], any port, or none:
   * HTTP/1.0) and no Origin or a loopback one (http://NAME[:PORT]); others get 421 (Host) or 403
   * (Origin), as `bm25aug serve`. The answer that refuses the request; null: it may be answered.
   */
  static BytesRestResponse refusal(RestRequest request) throws IOException {
    String host = request.header("Host");
    String origin = request.header("Origin");
    if (host != null && !loopback(host, "")) {
      return refusal(RestStatus.MISDIRECTED_REQUEST, "this local node answers only Host localhost, 127.0.0.1 or "
          + "[::1], not " + host + " (a page on another site may be reaching it through DNS rebinding); fix: use "
          + "http://127.0.0.1:PORT");
    }
    if (origin != null && !loopback(origin, "http://")) {
      return refusal(RestStatus.FORBIDDEN, "this local node answers no page from Origin " + origin + "; fix: send "
          + "the request from this machine without a foreign Origin");
    }
    return null;
  }

  private static BytesRestResponse refusal(RestStatus status, String message) throws IOException {
    return new BytesRestResponse(status, XContentFactory.jsonBuilder().startObject()
        .field("error", message).field("status", status.getStatus()).endObject());
  }

  public static void main(String[] args) throws Exception {
    if (args.length != 1) {
      System.err.println("usage: ClusterNode <node home folder holding config/opensearch.yml>");
      System.exit(2);
    }
    Path home = Path.of(args[0]).toAbsolutePath();
    Settings given = Settings.builder().put("path.home", home.toString()).build();
    Environment environment = InternalSettingsPreparer.prepareEnvironment(
        given, Map.of(), home.resolve("config"), () -> home.getFileName().toString());
    LogConfigurator.registerErrorListener();
    LogConfigurator.configureWithoutConfig(environment.settings());
    Node node = Engine.node(environment);
    CountDownLatch closed = new CountDownLatch(1);
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      try {
        node.close();
      } catch (Exception e) {
        e.printStackTrace();
      }
      closed.countDown();
    }));
    node.start();
    System.out.println("bm25aug: node started");
    closed.await();
  }
}
