// What ClusterNode needs in OpenSearch 2.x's own names: a node with the transport (Netty4Plugin),
// the analysis filters (CommonAnalysisPlugin) and LoopbackOnly loaded from the classpath, and the
// REST wrapper that answers ClusterNode.refusal instead of a request it refuses.
import java.util.List;
import java.util.function.UnaryOperator;
import org.opensearch.analysis.common.CommonAnalysisPlugin;
import org.opensearch.client.node.NodeClient;
import org.opensearch.common.util.concurrent.ThreadContext;
import org.opensearch.env.Environment;
import org.opensearch.node.Node;
import org.opensearch.plugins.ActionPlugin;
import org.opensearch.plugins.Plugin;
import org.opensearch.rest.BytesRestResponse;
import org.opensearch.rest.RestChannel;
import org.opensearch.rest.RestHandler;
import org.opensearch.rest.RestRequest;
import org.opensearch.transport.Netty4Plugin;

public final class Engine {
  static Node node(Environment environment) {
    return new ModuleNode(environment);
  }

  private static final class ModuleNode extends Node {
    ModuleNode(Environment environment) {
      super(environment, List.of(Netty4Plugin.class, CommonAnalysisPlugin.class, LoopbackOnly.class), true);
    }
  }

  public static final class LoopbackOnly extends Plugin implements ActionPlugin {
    @Override
    public UnaryOperator<RestHandler> getRestHandlerWrapper(ThreadContext threadContext) {
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
