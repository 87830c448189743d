/*
 * offsets-lakehouse: Delta's commit coordination on S3 and S3-compatible stores.
 * Licensed under the Apache License, Version 2.0.
 */
package io.offsetslakehouse.delta;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.UUID;

import io.delta.storage.HadoopFileSystemLogStore;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FSDataOutputStreamBuilder;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.s3a.S3AFileSystem;
import software.amazon.awssdk.core.exception.SdkException;
import software.amazon.awssdk.core.exception.SdkServiceException;
import software.amazon.awssdk.services.s3.S3Client;
import software.amazon.awssdk.services.s3.model.ListObjectsV2Request;
import software.amazon.awssdk.services.s3.model.ListObjectsV2Response;
import software.amazon.awssdk.services.s3.model.S3Object;

import static org.apache.hadoop.fs.Options.CreateFileOptionKeys.FS_OPTION_CREATE_CONDITIONAL_OVERWRITE;
import static org.apache.hadoop.fs.s3a.Constants.FS_S3A_CREATE_HEADER;
import static org.apache.hadoop.fs.s3a.Constants.XA_HEADER_PREFIX;

/**
 * A Delta log store for S3 and S3-compatible object stores that any number of writers, in any
 * number of JVMs on any number of hosts, may share.
 *
 * <p>Delta commits version N of a table by creating {@code _delta_log/N.json}, and relies on that
 * creation failing when the file exists: of two writers committing N, exactly one must win, and
 * the other checks for conflicts and retries at N+1. S3 had no "put if absent" until 2024, so
 * Delta's own S3 log store serialises writers inside one JVM only, and a writer on another host
 * can silently replace a commit. This store creates commit files with the store's conditional
 * write ({@code If-None-Match: *}, through S3A's conditional create): the store refuses the second
 * writer, wherever it runs. delta-rs writes the same files with the same header (its
 * {@code conditional_put=etag}), so both may commit to one table.
 *
 * <p>S3A retries a request whose response was lost, and the retry of a conditional create that
 * did succeed is refused by the object it created itself. Each commit therefore carries a random
 * write id in its user metadata; a refusal by an object that carries ours is our own success,
 * not a conflict (reporting a conflict would make Delta commit the same actions again at N+1).
 *
 * <p>Listing starts at the requested version ({@code ListObjectsV2}'s {@code StartAfter}), so a
 * snapshot update costs one request however many commits the log keeps.
 */
public class S3ConditionalPutLogStore extends HadoopFileSystemLogStore {

    /** User-metadata key of the write id (S3 lower-cases metadata keys). */
    static final String WRITE_ID = "offsets-lakehouse-write-id";

    /** S3 answers 409 when two conditional writes of one key overlap: the loser may try again. */
    private static final int OVERLAP_RETRIES = 5;

    public S3ConditionalPutLogStore(Configuration hadoopConf) {
        super(hadoopConf);
    }

    @Override
    public void write(Path path, Iterator<String> actions, Boolean overwrite, Configuration hadoopConf)
            throws IOException {
        FileSystem fs = path.getFileSystem(hadoopConf);
        byte[] body = lines(actions);
        if (overwrite) {
            // _last_checkpoint and the like, which Delta replaces: a PUT is atomic on S3
            try (FSDataOutputStream out = fs.create(path, true)) {
                out.write(body);
            }
            return;
        }
        String id = UUID.randomUUID().toString();
        for (int attempt = 1; ; attempt++) {
            try {
                FSDataOutputStreamBuilder<FSDataOutputStream, ?> builder = fs.createFile(path);
                builder.must(FS_OPTION_CREATE_CONDITIONAL_OVERWRITE, true);
                builder.must(FS_S3A_CREATE_HEADER + "." + WRITE_ID, id);
                FSDataOutputStream out = builder.build();
                try {
                    out.write(body);
                } finally {
                    out.close(); // the PUT, and its condition, happen here
                }
                return;
            } catch (IOException e) {
                int status = statusOf(e);
                if (status == 412 || e instanceof org.apache.hadoop.fs.FileAlreadyExistsException) {
                    if (writtenBy(fs, path, id)) {
                        return;
                    }
                    FileAlreadyExistsException conflict = new FileAlreadyExistsException(path.toString());
                    conflict.initCause(e);
                    throw conflict;
                }
                if (status == 409 && attempt < OVERLAP_RETRIES) {
                    continue;
                }
                throw e;
            }
        }
    }

    @Override
    public Iterator<FileStatus> listFrom(Path path, Configuration hadoopConf) throws IOException {
        FileSystem fs = path.getFileSystem(hadoopConf);
        if (!(fs instanceof S3AFileSystem)) {
            return super.listFrom(path, hadoopConf);
        }
        S3AFileSystem s3a = (S3AFileSystem) fs;
        Path qualified = s3a.makeQualified(path);
        String key = s3a.pathToKey(qualified);
        String prefix = s3a.pathToKey(qualified.getParent()) + "/";
        S3Client client = s3a.getS3AInternals().getAmazonS3Client("delta log listing");
        ListObjectsV2Request request = ListObjectsV2Request.builder()
                .bucket(s3a.getBucket())
                .prefix(prefix)
                .delimiter("/")
                .startAfter(keyBefore(key))
                .build();
        List<FileStatus> found = new ArrayList<>();
        try {
            for (ListObjectsV2Response page : client.listObjectsV2Paginator(request)) {
                for (S3Object object : page.contents()) {
                    if (object.key().compareTo(key) < 0 || object.key().endsWith("/")) {
                        continue;
                    }
                    found.add(new FileStatus(object.size(), false, 1, s3a.getDefaultBlockSize(qualified),
                            object.lastModified().toEpochMilli(), s3a.keyToQualifiedPath(object.key())));
                }
            }
        } catch (SdkException e) {
            throw new IOException("listing " + prefix + " from " + key + ": " + e.getMessage(), e);
        }
        if (found.isEmpty() && !fs.exists(qualified.getParent())) {
            throw new java.io.FileNotFoundException("No such file or directory: " + qualified.getParent());
        }
        return found.iterator(); // S3 lists keys in UTF-8 binary order, the order Delta expects
    }

    @Override
    public Boolean isPartialWriteVisible(Path path, Configuration hadoopConf) {
        return false; // an object appears whole or not at all
    }

    private static byte[] lines(Iterator<String> actions) throws IOException {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        while (actions.hasNext()) {
            out.write((actions.next() + "\n").getBytes(StandardCharsets.UTF_8));
        }
        return out.toByteArray();
    }

    /** Whether the object at {@code path} carries write id {@code id}: an error is not a "no". */
    private static boolean writtenBy(FileSystem fs, Path path, String id) throws IOException {
        byte[] value = fs.getXAttr(path, XA_HEADER_PREFIX + WRITE_ID);
        return value != null && id.equals(new String(value, StandardCharsets.UTF_8));
    }

    /** The HTTP status of the store's answer inside {@code e}'s causes, or 0. */
    private static int statusOf(Throwable e) {
        for (Throwable c = e; c != null; c = c.getCause()) {
            if (c instanceof SdkServiceException) {
                return ((SdkServiceException) c).statusCode();
            }
        }
        return 0;
    }

    /** The key right before {@code key} in S3's order, for an inclusive listing from it. */
    static String keyBefore(String key) {
        byte[] bytes = key.getBytes(StandardCharsets.UTF_8);
        if (bytes.length == 0) {
            return null;
        }
        if (bytes[bytes.length - 1] > 0) {
            bytes[bytes.length - 1] -= 1;
            return new String(bytes, StandardCharsets.UTF_8);
        }
        return new String(bytes, 0, bytes.length - 1, StandardCharsets.UTF_8);
    }
}
