// What MirrorMaker 2's own client library (connect-mirror-client) answers about a cluster.
// Compiled and run by tests/integration/test_mm2_client_agrees.py against topics Mirrorline
// wrote. Usage: Mm2ClientProbe BOOTSTRAP UPSTREAM_ALIAS GROUP...
// Prints one line per answer, tab-separated, sorted, so Python compares it plainly:
//   remote-topic T | upstream-cluster A | hops A N | checkpoint-topic T | heartbeat-topic T
//   translated GROUP TOPIC PARTITION OFFSET
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.connect.mirror.MirrorClient;
import org.apache.kafka.connect.mirror.RemoteClusterUtils;

public class Mm2ClientProbe {
    public static void main(String[] args) throws Exception {
        Map<String, Object> props = new HashMap<>();
        props.put("bootstrap.servers", args[0]);
        String upstream = args[1];
        List<String> lines = new ArrayList<>();
        try (MirrorClient client = new MirrorClient(props)) {
            for (String topic : client.remoteTopics()) {
                lines.add("remote-topic\t" + topic);
            }
            for (String alias : client.upstreamClusters()) {
                lines.add("upstream-cluster\t" + alias);
                lines.add("hops\t" + alias + "\t" + client.replicationHops(alias));
            }
            lines.add("hops\t" + upstream + "\t" + client.replicationHops(upstream));
            for (String topic : client.checkpointTopics()) {
                lines.add("checkpoint-topic\t" + topic);
            }
            for (String topic : client.heartbeatTopics()) {
                lines.add("heartbeat-topic\t" + topic);
            }
        }
        for (int i = 2; i < args.length; i++) {
            Map<TopicPartition, OffsetAndMetadata> offsets = RemoteClusterUtils.translateOffsets(
                props, upstream, args[i], Duration.ofSeconds(30));
            for (Map.Entry<TopicPartition, OffsetAndMetadata> e : offsets.entrySet()) {
                lines.add("translated\t" + args[i] + "\t" + e.getKey().topic() + "\t"
                          + e.getKey().partition() + "\t" + e.getValue().offset());
            }
        }
        Collections.sort(lines);
        for (String line : new java.util.LinkedHashSet<>(lines)) {
            System.out.println(line);
        }
    }
}
