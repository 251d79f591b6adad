// What ClusterNode needs in OpenSearch 3.x's own names: a node with the transport
// (Netty4ModulePlugin), the analysis filters (CommonAnalysisModulePlugin) and LoopbackOnly loaded
// from the classpath (3.0's Node takes each as a PluginInfo, as its MockNode does), and the REST
// wrapper that answers ClusterNode.refusal instead of a request it refuses. No security manager is
// installed (Node does not; OpenSearch's own Bootstrap would), so none is needed on JDK 24+.
import java.util.List;
import java.util.Set;
import java.util.function.UnaryOperator;
import org.opensearch.Version;
import org.opensearch.analysis.common.CommonAnalysisModulePlugin;
import org.opensearch.common.util.concurrent.ThreadContext;
import org.opensearch.env.Environment;
import org.opensearch.node.Node;
import org.opensearch.plugins.ActionPlugin;
import org.opensearch.plugins.Plugin;
import org.opensearch.plugins.PluginInfo;
import org.opensearch.rest.BytesRestResponse;
import org.opensearch.rest.RestChannel;
import org.opensearch.rest.RestHandler;
import org.opensearch.rest.RestHeaderDefinition;
import org.opensearch.rest.RestRequest;
import org.opensearch.transport.Netty4ModulePlugin;
import org.opensearch.transport.client.node.NodeClient;

public final class Engine {
  static Node node(Environment environment) {
    return new ModuleNode(environment);
  }

  private static final class ModuleNode extends Node {
    ModuleNode(Environment environment) {
      super(environment, List.of(Netty4ModulePlugin.class, CommonAnalysisModulePlugin.class, LoopbackOnly.class)
          .stream().map(ModuleNode::classpath).toList(), true);
    }

    private static PluginInfo classpath(Class<? extends Plugin> plugin) {
      return new PluginInfo(plugin.getName(), "classpath plugin", "NA", Version.CURRENT,
          System.getProperty("java.specification.version"), plugin.getName(), List.of(), false);
    }
  }

  public static final class LoopbackOnly extends Plugin implements ActionPlugin {
    @Override
    public UnaryOperator<RestHandler> getRestHandlerWrapper(ThreadContext threadContext,
        Set<RestHeaderDefinition> headersToCopy) {
      return handler -> new RestHandler.Wrapper(handler) {
        @Override
        public void handleRequest(RestRequest request, RestChannel channel, NodeClient client) throws Exception {
          BytesRestResponse refused = ClusterNode.refusal(request);
          if (refused != null) {
            channel.sendResponse(refused);
          } else {
            super.handleRequest(request, channel, client);
          }
        }
      };
    }
  }
}
