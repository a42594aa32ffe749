// Record batches made by Apache Kafka's own client code, for tests/unit/test_batches.py.
// The unit tests check Mirrorline's batch codec (mirrorline.core.batches) against batches it
// did not make: Kafka's MemoryRecordsBuilder for every codec (lz4, zstd and snappy have no
// Python library in the venv), its end-transaction markers, and MemoryRecords.filterTo -- the
// code Kafka's log cleaner compacts with -- for offset gaps, emptied batches and the delete
// horizon. Each case also carries what Kafka's reader says of every batch and record.
//
// Regenerate (writes tests/unit/data/kafka_batches.json):
//   javac -d /tmp/bf -cp "$KAFKA/lib/*" tests/java/BatchFixtures.java
//   java -cp "/tmp/bf:$KAFKA/lib/*" BatchFixtures tests/unit/data/kafka_batches.json
// with KAFKA the Kafka installation `make kafka` made (~/.cache/mirrorline/kafka-<version>).
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;

import org.apache.kafka.common.compress.Compression;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.record.TimestampType;
import org.apache.kafka.common.record.internal.ControlRecordType;
import org.apache.kafka.common.record.internal.DefaultRecordBatch;
import org.apache.kafka.common.record.internal.EndTransactionMarker;
import org.apache.kafka.common.record.internal.MemoryRecords;
import org.apache.kafka.common.record.internal.MemoryRecordsBuilder;
import org.apache.kafka.common.record.internal.Record;
import org.apache.kafka.common.record.internal.RecordBatch;
import org.apache.kafka.common.utils.BufferSupplier;

public class BatchFixtures {
    static final long T0 = 1_700_000_000_000L;

    static String hex(ByteBuffer buffer) {
        if (buffer == null) return "null";
        ByteBuffer b = buffer.duplicate();
        StringBuilder out = new StringBuilder("\"");
        while (b.hasRemaining()) out.append(String.format("%02x", b.get()));
        return out.append('"').toString();
    }

    static byte[] utf8(String s) {
        return s == null ? null : s.getBytes(StandardCharsets.UTF_8);
    }

    /** Appends n records at offsets base, base+1, ...; record i has key k<i>, value v<i>. */
    static MemoryRecords build(Compression compression, long base, int n, long producerId,
                               short epoch, int sequence, boolean transactional,
                               boolean tombstoneAtTwo) {
        ByteBuffer buffer = ByteBuffer.allocate(1 << 16);
        MemoryRecordsBuilder builder = MemoryRecords.builder(buffer, RecordBatch.MAGIC_VALUE_V2,
            compression, TimestampType.CREATE_TIME, base, T0, producerId, epoch, sequence,
            transactional, 3);
        for (int i = 0; i < n; i++) {
            Header[] headers = i % 2 == 0
                ? new Header[] {new RecordHeader("h" + i, utf8("x".repeat(i))),
                                new RecordHeader("empty", (byte[]) null)}
                : new Header[0];
            byte[] key = i == 1 ? null : utf8("k" + i);
            byte[] value = tombstoneAtTwo && i == 2 ? null : utf8("v" + i + "-" + "y".repeat(7 * i));
            builder.appendWithOffset(base + i, T0 + 10L * i - (i == 3 ? 25 : 0), key, value, headers);
        }
        return builder.build();
    }

    static MemoryRecords marker(long offset, long producerId, short epoch, ControlRecordType type) {
        return MemoryRecords.withEndTransactionMarker(offset, T0 + 99, 3, producerId, epoch,
            new EndTransactionMarker(type, 5));
    }

    /** Kafka's log cleaner filter: keep records whose key is in `keep`, and null keys unless
     *  `keep` is empty (which removes every record). */
    static MemoryRecords compact(MemoryRecords records, java.util.Set<String> keep,
                                 MemoryRecords.RecordFilter.BatchRetention retention) {
        MemoryRecords.RecordFilter filter = new MemoryRecords.RecordFilter(T0 + 1000, 60_000) {
            @Override
            protected BatchRetentionResult checkBatchRetention(RecordBatch batch) {
                return new BatchRetentionResult(retention, false);
            }

            @Override
            protected boolean shouldRetainRecord(RecordBatch batch, Record record) {
                if (!record.hasKey()) return !keep.isEmpty();
                return keep.contains(StandardCharsets.UTF_8.decode(record.key()).toString());
            }
        };
        ByteBuffer out = ByteBuffer.allocate(1 << 16);
        records.filterTo(filter, out, BufferSupplier.NO_CACHING);
        out.flip();
        return MemoryRecords.readableRecords(out);
    }

    static MemoryRecords concat(MemoryRecords... parts) {
        int size = 0;
        for (MemoryRecords part : parts) size += part.sizeInBytes();
        ByteBuffer all = ByteBuffer.allocate(size);
        for (MemoryRecords part : parts) all.put(part.buffer().duplicate());
        all.flip();
        return MemoryRecords.readableRecords(all);
    }

    static String describe(String name, MemoryRecords records) {
        StringBuilder out = new StringBuilder();
        out.append("{\"name\": \"").append(name).append("\", \"bytes\": ")
           .append(hex(records.buffer())).append(", \"batches\": [");
        String batchSep = "";
        for (RecordBatch batch : records.batches()) {
            batch.ensureValid();
            DefaultRecordBatch b = (DefaultRecordBatch) batch;
            out.append(batchSep).append("{")
               .append("\"base_offset\": ").append(b.baseOffset())
               .append(", \"size\": ").append(b.sizeInBytes())
               .append(", \"partition_leader_epoch\": ").append(b.partitionLeaderEpoch())
               .append(", \"magic\": ").append(b.magic())
               .append(", \"crc\": ").append(b.checksum())
               .append(", \"compression\": ").append(b.compressionType().id)
               .append(", \"log_append_time\": ").append(b.timestampType() == TimestampType.LOG_APPEND_TIME)
               .append(", \"is_transactional\": ").append(b.isTransactional())
               .append(", \"is_control\": ").append(b.isControlBatch())
               .append(", \"has_delete_horizon\": ").append(b.deleteHorizonMs().isPresent())
               .append(", \"last_offset\": ").append(b.lastOffset())
               .append(", \"base_timestamp\": ").append(b.baseTimestamp())
               .append(", \"max_timestamp\": ").append(b.maxTimestamp())
               .append(", \"producer_id\": ").append(b.producerId())
               .append(", \"producer_epoch\": ").append(b.producerEpoch())
               .append(", \"base_sequence\": ").append(b.baseSequence())
               .append(", \"record_count\": ").append(b.countOrNull())
               .append(", \"records\": [");
            String recordSep = "";
            for (Record r : b) {
                out.append(recordSep).append("{\"offset\": ").append(r.offset())
                   .append(", \"timestamp\": ").append(r.timestamp())
                   .append(", \"key\": ").append(hex(r.key()))
                   .append(", \"value\": ").append(hex(r.value()))
                   .append(", \"headers\": [");
                String headerSep = "";
                for (Header h : r.headers()) {
                    out.append(headerSep).append("[\"").append(h.key()).append("\", ")
                       .append(h.value() == null ? "null" : hex(ByteBuffer.wrap(h.value())))
                       .append("]");
                    headerSep = ", ";
                }
                out.append("]}");
                recordSep = ", ";
            }
            out.append("]}");
            batchSep = ", ";
        }
        return out.append("]}").toString();
    }

    public static void main(String[] args) throws Exception {
        List<String> cases = new ArrayList<>();
        Compression[] codecs = {Compression.NONE, Compression.gzip().build(),
            Compression.snappy().build(), Compression.lz4().build(), Compression.zstd().build()};
        for (Compression codec : codecs) {
            cases.add(describe("idempotent-" + codec.type().name,
                build(codec, 1000, 6, 7L, (short) 2, 40, false, false)));
            cases.add(describe("plain-" + codec.type().name,
                build(codec, 0, 3, -1L, (short) -1, -1, false, false)));
        }
        // One partition's log with two transactional producers: 9 aborts then commits,
        // 11 aborts after a plain producer's batch came between. Under read_committed the
        // fetch response lists (9, 0) and (11, 7) as aborted transactions.
        cases.add(describe("transactions", concat(
            build(Compression.NONE, 0, 3, 9L, (short) 1, 0, true, false),
            marker(3, 9L, (short) 1, ControlRecordType.ABORT),
            build(Compression.lz4().build(), 4, 2, 9L, (short) 1, 3, true, false),
            marker(6, 9L, (short) 1, ControlRecordType.COMMIT),
            build(Compression.NONE, 7, 2, 11L, (short) 0, 0, true, false),
            build(Compression.NONE, 9, 1, -1L, (short) -1, -1, false, false),
            marker(10, 11L, (short) 0, ControlRecordType.ABORT))));
        java.util.Set<String> even = java.util.Set.of("k0", "k2", "k4", "k6", "k8");
        for (Compression codec : new Compression[] {Compression.NONE, Compression.gzip().build(),
                Compression.lz4().build()}) {
            cases.add(describe("compacted-gaps-" + codec.type().name,
                compact(build(codec, 100, 10, -1L, (short) -1, -1, false, false), even,
                        MemoryRecords.RecordFilter.BatchRetention.DELETE_EMPTY)));
        }
        cases.add(describe("compacted-emptied", compact(
            build(Compression.NONE, 200, 4, 21L, (short) 0, 0, false, false), java.util.Set.of(),
            MemoryRecords.RecordFilter.BatchRetention.RETAIN_EMPTY)));
        cases.add(describe("compacted-delete-horizon", compact(
            build(Compression.NONE, 300, 4, -1L, (short) -1, -1, false, true),
            java.util.Set.of("k0", "k2", "k3"),
            MemoryRecords.RecordFilter.BatchRetention.DELETE_EMPTY)));
        // What a broker writes to a topic with message.timestamp.type=LogAppendTime.
        MemoryRecordsBuilder appended = MemoryRecords.builder(ByteBuffer.allocate(1 << 12),
            RecordBatch.MAGIC_VALUE_V2, Compression.NONE, TimestampType.LOG_APPEND_TIME, 400,
            T0 + 500);
        appended.appendWithOffset(400, T0, utf8("k0"), utf8("v0"));
        appended.appendWithOffset(401, T0 + 1, utf8("k1"), utf8("v1"));
        cases.add(describe("log-append-time", appended.build()));
        Files.writeString(Paths.get(args[0]),
            "{\"generator\": \"tests/java/BatchFixtures.java\", \"kafka\": \""
            + org.apache.kafka.common.utils.AppInfoParser.getVersion() + "\", \"cases\": [\n"
            + String.join(",\n", cases) + "\n]}\n");
    }
}
