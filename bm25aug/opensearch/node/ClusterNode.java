// One OpenSearch node in a JVM of its own, as the distribution's own launcher starts one, with the
// two modules bm25aug needs on the classpath (as OpenSearch's test harness, MockNode, loads them)
// instead of a modules/ folder. Settings: <home>/config/opensearch.yml (bm25aug.opensearch.local
// writes it). Stops cleanly on SIGTERM; `kill -9` is a node crash.
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import org.opensearch.analysis.common.CommonAnalysisPlugin;
import org.opensearch.common.logging.LogConfigurator;
import org.opensearch.common.settings.Settings;
import org.opensearch.env.Environment;
import org.opensearch.node.InternalSettingsPreparer;
import org.opensearch.node.Node;
import org.opensearch.transport.Netty4Plugin;

public final class ClusterNode {
  private static final class ModuleNode extends Node {
    ModuleNode(Environment environment) {
      super(environment, List.of(Netty4Plugin.class, CommonAnalysisPlugin.class), true);
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
