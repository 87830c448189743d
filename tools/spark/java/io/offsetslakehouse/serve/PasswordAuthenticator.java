/*
 * offsets-lakehouse: who may use the SQL endpoint.
 * Licensed under the Apache License, Version 2.0.
 */
package io.offsetslakehouse.serve;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.security.spec.InvalidKeySpecException;
import java.util.Base64;
import java.util.HashMap;
import java.util.Map;

import javax.crypto.SecretKeyFactory;
import javax.crypto.spec.PBEKeySpec;
import javax.security.sasl.AuthenticationException;

import org.apache.hive.service.auth.PasswdAuthenticationProvider;

/**
 * HiveServer2's CUSTOM authentication for {@code offsets-lakehouse serve}: user names and salted
 * PBKDF2-SHA256 password hashes from a file outside the repository
 * ({@code offsets.serve.passwords}, a system property the serve command sets), one
 * {@code user:pbkdf2_sha256$iterations$salt$hash} line per user (base64 salt and hash), as
 * {@code offsets-lakehouse serve-passwd} writes them. The file is read at each login, so users are
 * added or removed without a restart. A wrong user or password is refused after the same work as
 * a right one (no timing difference tells which was wrong).
 */
public class PasswordAuthenticator implements PasswdAuthenticationProvider {

    static final String FILE_PROPERTY = "offsets.serve.passwords";
    private static final String SCHEME = "pbkdf2_sha256";
    // a hash that no password matches, checked against for unknown users
    private static final String NOBODY = SCHEME + "$600000$AAAAAAAAAAAAAAAAAAAAAA==$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";

    public PasswordAuthenticator() {
    }

    @Override
    public void Authenticate(String user, String password) throws AuthenticationException {
        String file = System.getProperty(FILE_PROPERTY);
        if (file == null || file.isEmpty()) {
            throw new AuthenticationException("no password file configured");
        }
        Map<String, String> users;
        try {
            users = read(Paths.get(file));
        } catch (IOException e) {
            throw new AuthenticationException("password file unreadable: " + e.getMessage(), e);
        }
        String stored = users.get(user == null ? "" : user);
        boolean ok = matches(password == null ? "" : password, stored == null ? NOBODY : stored);
        if (stored == null || !ok) {
            throw new AuthenticationException("wrong user name or password");
        }
    }

    static Map<String, String> read(Path file) throws IOException {
        Map<String, String> users = new HashMap<>();
        for (String line : Files.readAllLines(file, StandardCharsets.UTF_8)) {
            line = line.strip();
            if (line.isEmpty() || line.startsWith("#")) {
                continue;
            }
            int colon = line.indexOf(':');
            if (colon > 0) {
                users.put(line.substring(0, colon), line.substring(colon + 1));
            }
        }
        return users;
    }

    static boolean matches(String password, String stored) throws AuthenticationException {
        String[] parts = stored.split("\\$");
        if (parts.length != 4 || !parts[0].equals(SCHEME)) {
            throw new AuthenticationException("password file: unknown hash format");
        }
        byte[] salt = Base64.getDecoder().decode(parts[2]);
        byte[] want = Base64.getDecoder().decode(parts[3]);
        try {
            PBEKeySpec spec = new PBEKeySpec(password.toCharArray(), salt, Integer.parseInt(parts[1]), want.length * 8);
            byte[] got = SecretKeyFactory.getInstance("PBKDF2WithHmacSHA256").generateSecret(spec).getEncoded();
            return MessageDigest.isEqual(got, want);
        } catch (NoSuchAlgorithmException | InvalidKeySpecException | NumberFormatException e) {
            throw new AuthenticationException("password file: " + e.getMessage(), e);
        }
    }
}
