// One OpenSearch node in a JVM of its own, as the distribution's own launcher starts one, with the
// two modules bm25aug needs on the classpath (as OpenSearch's test harness, MockNode, loads them)
// instead of a modules/ folder, and LoopbackOnly below. Settings: <home>/config/opensearch.yml
// (bm25aug.opensearch.local writes it). Stops cleanly on SIGTERM; `kill -9` is a node crash.
import java.nio.file.Path;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.function.UnaryOperator;
import org.opensearch.analysis.common.CommonAnalysisPlugin;
import org.opensearch.client.node.NodeClient;
import org.opensearch.common.logging.LogConfigurator;
import org.opensearch.common.settings.Settings;
import org.opensearch.common.util.concurrent.ThreadContext;
import org.opensearch.common.xcontent.XContentFactory;
import org.opensearch.core.rest.RestStatus;
import org.opensearch.env.Environment;
import org.opensearch.node.InternalSettingsPreparer;
import org.opensearch.node.Node;
import org.opensearch.plugins.ActionPlugin;
import org.opensearch.plugins.Plugin;
import org.opensearch.rest.BytesRestResponse;
import org.opensearch.rest.RestChannel;
import org.opensearch.rest.RestHandler;
import org.opensearch.rest.RestRequest;
import org.opensearch.transport.Netty4Plugin;

public final class ClusterNode {
  private static final class ModuleNode extends Node {
    ModuleNode(Environment environment) {
      super(environment, List.of(Netty4Plugin.class, CommonAnalysisPlugin.class, LoopbackOnly.class), true);
    }
  }

  /**
   * DNS rebinding: a page on another site can resolve its name to 127.0.0.1 and reach a node, but
   * its requests still carry that site's Host (and Origin). Every REST handler answers only a
   * loopback Host (localhost, 127.0.0.1, [::1], any port, or none: HTTP/1.0) and no Origin or a
   * loopback one (http://NAME[:PORT]); others get 421 (Host) or 403 (Origin), as `bm25aug serve`.
   */
  public static final class LoopbackOnly extends Plugin implements ActionPlugin {
    private static final Set<String> NAMES = Set.of("localhost", "127.0.0.1", "[::1]");

    static boolean loopback(String value, String scheme) {
      String name = value.trim().toLowerCase(Locale.ROOT);
      if (!name.startsWith(scheme)) {
        return false;
      }
      name = name.substring(scheme.length()).replaceFirst(":[0-9]{1,5}$", "");
      return NAMES.contains(name);
    }

    static BytesRestResponse refusal(RestStatus status, String message) throws java.io.IOException {
      return new BytesRestResponse(status, XContentFactory.jsonBuilder().startObject()
          .field("error", message).field("status", status.getStatus()).endObject());
    }

    @Override
    public UnaryOperator<RestHandler> getRestHandlerWrapper(ThreadContext threadContext) {
      return handler -> new RestHandler.Wrapper(handler) {
        @Override
        public void handleRequest(RestRequest request, RestChannel channel, NodeClient client) throws Exception {
          String host = request.header("Host");
          String origin = request.header("Origin");
          if (host != null && !loopback(host, "")) {
            channel.sendResponse(refusal(RestStatus.MISDIRECTED_REQUEST, "this local node answers only Host "
                + "localhost, 127.0.0.1 or [::1], not " + host + " (a page on another site may be reaching it "
                + "through DNS rebinding); fix: use http://127.0.0.1:PORT"));
          } else if (origin != null && !loopback(origin, "http://")) {
            channel.sendResponse(refusal(RestStatus.FORBIDDEN, "this local node answers no page from Origin "
                + origin + "; fix: send the request from this machine without a foreign Origin"));
          } else {
            super.handleRequest(request, channel, client);
          }
        }
      };
    }
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
    Node node = new ModuleNode(environment);
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
