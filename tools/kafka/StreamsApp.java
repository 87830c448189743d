// A small Kafka Streams application in a KIP-1071 streams group (group.protocol=streams), so the
// Kafka test harness (tests/harness/streams.py) can make the broker write streams-group records
// (types 17-23) into __consumer_offsets. Compiled from source at test time with Truth.java by
// tests/harness/admin.py; no binary is committed.
//
//   java -cp <classes>:<kafka libs>/* StreamsApp BOOTSTRAP APPLICATION_ID CLIENT_ID STATE_DIR IN OUT
//
// Topology: IN -> group by value (a repartition topic) -> count in an in-memory store (a changelog
// topic) -> OUT. Two subtopologies, one of them stateful, so the group's topology record carries
// source, repartition and changelog topics, and a standby replica can be placed on a second
// instance. The store is in memory: RocksDB's native library is left out of the jars
// (tools/kafka/pom.xml).
//
// Protocol on stdout, one line each: "STATE <new state>" on every state change. Closing stdin
// (or the line "stop") closes the application, leaving the group, then prints "CLOSED".

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Properties;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.CloseOptions;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.state.Stores;

public class StreamsApp {
  public static void main(String[] args) throws Exception {
    if (args.length != 6) {
      System.err.println("usage: StreamsApp BOOTSTRAP APPLICATION_ID CLIENT_ID STATE_DIR IN OUT");
      System.exit(2);
    }
    Properties props = new Properties();
    props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
    props.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
    props.put(StreamsConfig.CLIENT_ID_CONFIG, args[2]);
    props.put(StreamsConfig.STATE_DIR_CONFIG, args[3]);
    props.put(StreamsConfig.GROUP_PROTOCOL_CONFIG, "streams");
    props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
    // commit often and forward every update, so offsets are committed within the scenario
    props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 200);
    props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
    props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);

    StreamsBuilder builder = new StreamsBuilder();
    builder.stream(args[4], Consumed.with(Serdes.String(), Serdes.String()))
        .groupBy((key, value) -> value, Grouped.with("by-value", Serdes.String(), Serdes.String()))
        .count(Materialized.<String, Long>as(Stores.inMemoryKeyValueStore("counts"))
            .withKeySerde(Serdes.String())
            .withValueSerde(Serdes.Long()))
        .toStream()
        .to(args[5], Produced.with(Serdes.String(), Serdes.Long()));

    KafkaStreams streams = new KafkaStreams(builder.build(), props);
    streams.setStateListener((now, before) -> say("STATE " + now));
    streams.setUncaughtExceptionHandler(e -> {
      System.err.println("uncaught: " + e);
      return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse
          .SHUTDOWN_CLIENT;
    });
    streams.start();
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    String line;
    while ((line = in.readLine()) != null && !line.trim().equals("stop")) {
      // nothing else is understood: the parent only ever stops the application
    }
    // leave the group on close: otherwise the member stays until its session times out
    boolean closed = streams.close(CloseOptions.groupMembershipOperation(CloseOptions.GroupMembershipOperation.LEAVE_GROUP)
        .withTimeout(Duration.ofSeconds(30)));
    say(closed ? "CLOSED" : "CLOSE_TIMED_OUT");
    System.exit(closed ? 0 : 1);
  }

  static synchronized void say(String line) {
    System.out.println(line);
    System.out.flush();
  }
}
