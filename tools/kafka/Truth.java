// The broker's own view of consumer groups, through Kafka's Java Admin API, as JSON.
//
// Used by the Kafka test harness (tests/harness) to take "truth snapshots" (docs/truth-snapshot.md)
// (describeConsumerGroups, describeShareGroups, describeStreamsGroups and their offsets) and for
// the few admin operations the Python clients lack. Compiled from source at test time by
// tests/harness/admin.py; no binary is committed.
//
//   java -cp <kafka libs>/* Truth.java snapshot BOOTSTRAP [GROUP ...]   (no GROUP: every group)
//   java -cp <kafka libs>/* Truth.java delete-offsets BOOTSTRAP GROUP TOPIC:PARTITION ...
//   java -cp <kafka libs>/* Truth.java log-end-offsets BOOTSTRAP TOPIC
//
// Output: one JSON document on stdout. Errors: a message on stderr and exit code 1.

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import java.util.*;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.GroupType;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;

public class Truth {
  public static void main(String[] args) throws Exception {
    if (args.length < 2) {
      System.err.println("usage: Truth snapshot|delete-offsets|log-end-offsets BOOTSTRAP ...");
      System.exit(2);
    }
    Properties props = new Properties();
    props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[1]);
    props.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
    ObjectMapper json = new ObjectMapper().enable(SerializationFeature.ORDER_MAP_ENTRIES_BY_KEYS);
    try (Admin admin = Admin.create(props)) {
      Object out;
      switch (args[0]) {
        case "snapshot":
          out = snapshot(admin, Arrays.asList(args).subList(2, args.length));
          break;
        case "delete-offsets":
          out = deleteOffsets(admin, args[2], Arrays.asList(args).subList(3, args.length));
          break;
        case "log-end-offsets":
          out = logEndOffsets(admin, args[2]);
          break;
        default:
          System.err.println("unknown command " + args[0]);
          System.exit(2);
          return;
      }
      System.out.println(json.writeValueAsString(out));
    } catch (ExecutionException e) {
      System.err.println(e.getCause().getClass().getSimpleName() + ": " + e.getCause().getMessage());
      System.exit(1);
    }
  }

  /** Log end offsets of every partition of a topic (the offsets topic at snapshot time). */
  static Map<String, Long> logEndOffsets(Admin admin, String topic) throws Exception {
    TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
    Map<TopicPartition, OffsetSpec> req = new HashMap<>();
    for (TopicPartitionInfo p : d.partitions()) req.put(new TopicPartition(topic, p.partition()), OffsetSpec.latest());
    Map<String, Long> out = new TreeMap<>(Comparator.comparingInt(Integer::parseInt));
    admin.listOffsets(req).all().get().forEach((tp, info) -> out.put(Integer.toString(tp.partition()), info.offset()));
    return out;
  }

  static Map<String, Object> snapshot(Admin admin, List<String> wanted) throws Exception {
    // Group types from ListGroups (all types): a group that is not listed does not exist.
    Map<String, GroupListing> listed = new TreeMap<>();
    for (GroupListing g : admin.listGroups().all().get()) listed.put(g.groupId(), g);
    List<String> groups = new ArrayList<>(wanted.isEmpty() ? listed.keySet() : wanted);
    Collections.sort(groups);
    // The offsets topic's end offsets before and after: equal means the snapshot is the state
    // at exactly that log position (the caller retries otherwise).
    Map<String, Long> before = logEndOffsets(admin, "__consumer_offsets");
    List<Object> rows = new ArrayList<>();
    for (String g : groups) {
      GroupListing listing = listed.get(g);
      GroupType type = listing == null ? null : listing.type().orElse(null);
      Map<String, Object> row;
      if (listing == null) {
        row = new LinkedHashMap<>();
        row.put("group_id", g);
        row.put("exists", false);
      } else if (type == GroupType.SHARE) {
        row = shareGroup(admin, g);
      } else if (type == GroupType.STREAMS) {
        row = streamsGroup(admin, g);
      } else {
        try {
          row = consumerGroup(admin, g);
        } catch (ExecutionException e) {
          // listed a moment ago, gone now (expired or deleted meanwhile): the end offsets moved,
          // so the caller sees an inconsistent snapshot and retries
          if (!(e.getCause() instanceof org.apache.kafka.common.errors.GroupIdNotFoundException)) throw e;
          row = new LinkedHashMap<>();
          row.put("group_id", g);
          row.put("exists", false);
        }
      }
      // the protocol type ListGroups reports ("" for simple and Empty classic groups)
      if (listing != null) row.put("protocol_type", listing.protocol());
      rows.add(row);
    }
    Map<String, Long> after = logEndOffsets(admin, "__consumer_offsets");
    Map<String, Object> out = new LinkedHashMap<>();
    out.put("offsets_topic_end_offsets", after);
    out.put("consistent", before.equals(after));
    out.put("groups", rows);
    return out;
  }

  static Map<String, Object> consumerGroup(Admin admin, String g) throws Exception {
    Map<String, Object> row = new LinkedHashMap<>();
    row.put("group_id", g);
    row.put("exists", true);
    ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(g)).all().get().get(g);
    row.put("type", d.type() == null ? null : d.type().toString().toLowerCase(Locale.ROOT));
    row.put("state", d.groupState() == null ? null : d.groupState().toString());
    row.put("simple_consumer_group", d.isSimpleConsumerGroup());
    row.put("partition_assignor", d.partitionAssignor());
    row.put("group_epoch", d.groupEpoch().orElse(null));
    row.put("target_assignment_epoch", d.targetAssignmentEpoch().orElse(null));
    List<Map<String, Object>> members = new ArrayList<>();
    for (MemberDescription m : d.members()) {
      Map<String, Object> mm = new LinkedHashMap<>();
      mm.put("member_id", m.consumerId());
      mm.put("group_instance_id", m.groupInstanceId().orElse(null));
      mm.put("client_id", m.clientId());
      mm.put("host", m.host());
      mm.put("assignment", partitions(m.assignment().topicPartitions()));
      mm.put("target_assignment", m.targetAssignment().map(a -> partitions(a.topicPartitions())).orElse(null));
      mm.put("member_epoch", m.memberEpoch().orElse(null));
      mm.put("upgraded", m.upgraded().orElse(null));
      members.add(mm);
    }
    members.sort(Comparator.comparing(o -> (String) o.get("member_id")));
    row.put("members", members);
    row.put("offsets", offsetRows(admin.listConsumerGroupOffsets(g).partitionsToOffsetAndMetadata().get()));
    return row;
  }

  static Map<String, Object> shareGroup(Admin admin, String g) throws Exception {
    Map<String, Object> row = new LinkedHashMap<>();
    row.put("group_id", g);
    row.put("exists", true);
    row.put("type", "share");
    ShareGroupDescription d = admin.describeShareGroups(List.of(g)).all().get().get(g);
    row.put("state", d.groupState() == null ? null : d.groupState().toString());
    row.put("group_epoch", d.groupEpoch());
    row.put("target_assignment_epoch", d.targetAssignmentEpoch());
    List<Map<String, Object>> members = new ArrayList<>();
    for (ShareMemberDescription m : d.members()) {
      Map<String, Object> mm = new LinkedHashMap<>();
      mm.put("member_id", m.consumerId());
      mm.put("client_id", m.clientId());
      mm.put("host", m.host());
      mm.put("assignment", partitions(m.assignment().topicPartitions()));
      mm.put("member_epoch", m.memberEpoch());
      members.add(mm);
    }
    members.sort(Comparator.comparing(o -> (String) o.get("member_id")));
    row.put("members", members);
    // Share groups keep their start offsets in the share-state topic, not __consumer_offsets.
    Map<TopicPartition, SharePartitionOffsetInfo> offsets =
        admin.listShareGroupOffsets(Map.of(g, new ListShareGroupOffsetsSpec())).partitionsToOffsetInfo(g).get();
    TreeMap<TopicPartition, SharePartitionOffsetInfo> sorted = new TreeMap<>(BY_TOPIC_PARTITION);
    offsets.forEach((k, v) -> { if (v != null) sorted.put(k, v); });
    List<Object> offs = new ArrayList<>();
    sorted.forEach((tp, info) -> {
      Map<String, Object> o = new LinkedHashMap<>();
      o.put("topic", tp.topic());
      o.put("partition", tp.partition());
      o.put("start_offset", info.startOffset());
      offs.add(o);
    });
    row.put("share_offsets", offs);
    return row;
  }

  static Map<String, Object> streamsGroup(Admin admin, String g) throws Exception {
    Map<String, Object> row = new LinkedHashMap<>();
    row.put("group_id", g);
    row.put("exists", true);
    row.put("type", "streams");
    StreamsGroupDescription d = admin.describeStreamsGroups(List.of(g)).all().get().get(g);
    row.put("state", d.groupState() == null ? null : d.groupState().toString());
    row.put("group_epoch", d.groupEpoch());
    row.put("target_assignment_epoch", d.targetAssignmentEpoch());
    row.put("topology_epoch", d.topologyEpoch());
    List<Map<String, Object>> subtopologies = new ArrayList<>();
    for (StreamsGroupSubtopologyDescription st : d.subtopologies()) {
      Map<String, Object> s = new LinkedHashMap<>();
      s.put("subtopology_id", st.subtopologyId());
      s.put("source_topics", sorted(st.sourceTopics()));
      s.put("repartition_sink_topics", sorted(st.repartitionSinkTopics()));
      s.put("state_changelog_topics", topicInfos(st.stateChangelogTopics()));
      s.put("repartition_source_topics", topicInfos(st.repartitionSourceTopics()));
      subtopologies.add(s);
    }
    subtopologies.sort(Comparator.comparing(o -> (String) o.get("subtopology_id")));
    row.put("subtopologies", subtopologies);
    List<Map<String, Object>> members = new ArrayList<>();
    for (StreamsGroupMemberDescription m : d.members()) {
      Map<String, Object> mm = new LinkedHashMap<>();
      mm.put("member_id", m.memberId());
      mm.put("group_instance_id", m.instanceId().orElse(null));
      mm.put("client_id", m.clientId());
      mm.put("host", m.clientHost());
      mm.put("member_epoch", m.memberEpoch());
      mm.put("process_id", m.processId());
      mm.put("tasks", tasks(m.assignment()));
      mm.put("target_tasks", tasks(m.targetAssignment()));
      members.add(mm);
    }
    members.sort(Comparator.comparing(o -> (String) o.get("member_id")));
    row.put("members", members);
    Map<TopicPartition, OffsetAndMetadata> offsets =
        admin.listStreamsGroupOffsets(Map.of(g, new ListStreamsGroupOffsetsSpec())).partitionsToOffsetAndMetadata(g).get();
    row.put("offsets", offsetRows(offsets));
    return row;
  }

  static List<String> sorted(Collection<String> names) {
    List<String> out = new ArrayList<>(names);
    Collections.sort(out);
    return out;
  }

  static List<Object> topicInfos(Map<String, StreamsGroupSubtopologyDescription.TopicInfo> topics) {
    List<Object> out = new ArrayList<>();
    new TreeMap<>(topics).forEach((name, info) -> {
      Map<String, Object> t = new LinkedHashMap<>();
      t.put("name", name);
      t.put("partitions", info.partitions());
      t.put("replication_factor", info.replicationFactor());
      out.add(t);
    });
    return out;
  }

  /** Active, standby and warmup tasks: [{subtopology_id, partitions}] sorted by subtopology. */
  static Map<String, Object> tasks(StreamsGroupMemberAssignment a) {
    Map<String, Object> out = new LinkedHashMap<>();
    out.put("active", taskIds(a.activeTasks()));
    out.put("standby", taskIds(a.standbyTasks()));
    out.put("warmup", taskIds(a.warmupTasks()));
    return out;
  }

  static List<Object> taskIds(List<StreamsGroupMemberAssignment.TaskIds> ids) {
    List<StreamsGroupMemberAssignment.TaskIds> sorted = new ArrayList<>(ids);
    sorted.sort(Comparator.comparing(StreamsGroupMemberAssignment.TaskIds::subtopologyId));
    List<Object> out = new ArrayList<>();
    for (StreamsGroupMemberAssignment.TaskIds t : sorted) {
      List<Integer> parts = new ArrayList<>(t.partitions());
      Collections.sort(parts);
      out.add(Map.of("subtopology_id", t.subtopologyId(), "partitions", parts));
    }
    return out;
  }

  static List<Object> offsetRows(Map<TopicPartition, OffsetAndMetadata> offsets) {
    TreeMap<TopicPartition, OffsetAndMetadata> sorted = new TreeMap<>(BY_TOPIC_PARTITION);
    offsets.forEach((k, v) -> { if (v != null) sorted.put(k, v); });
    List<Object> offs = new ArrayList<>();
    sorted.forEach((tp, om) -> {
      Map<String, Object> o = new LinkedHashMap<>();
      o.put("topic", tp.topic());
      o.put("partition", tp.partition());
      o.put("offset", om.offset());
      o.put("leader_epoch", om.leaderEpoch().orElse(null));
      o.put("metadata", om.metadata());
      offs.add(o);
    });
    return offs;
  }

  static final Comparator<TopicPartition> BY_TOPIC_PARTITION =
      Comparator.comparing(TopicPartition::topic).thenComparingInt(TopicPartition::partition);

  static List<Object> partitions(Collection<TopicPartition> tps) {
    List<TopicPartition> sorted = new ArrayList<>(tps);
    sorted.sort(BY_TOPIC_PARTITION);
    List<Object> out = new ArrayList<>();
    for (TopicPartition tp : sorted) out.add(Map.of("topic", tp.topic(), "partition", tp.partition()));
    return out;
  }

  static Map<String, Object> deleteOffsets(Admin admin, String group, List<String> tps) throws Exception {
    Set<TopicPartition> set = new HashSet<>();
    for (String s : tps) {
      int i = s.lastIndexOf(':');
      set.add(new TopicPartition(s.substring(0, i), Integer.parseInt(s.substring(i + 1))));
    }
    admin.deleteConsumerGroupOffsets(group, set).all().get();
    return Map.of("deleted", tps);
  }
}
